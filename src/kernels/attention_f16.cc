#include "kernels/attention_f16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/quants.h"
#include "tensor/fp16.h"

namespace ferrox {

void attn_softcap(float* s, int n, float c) {
    const float inv_c = 1.0f / c;
    for (int i = 0; i < n; ++i) s[i] = std::tanh(s[i] * inv_c) * c;
}

namespace {

// The scalar versions follow the same orders with std::fma, so they give the same bits.
float dot_decode_scalar(const float* q, const uint16_t* k, int n) {
    float acc[4][8] = {};
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 8; ++l)
                acc[j][l] = std::fma(fp16_to_fp32(k[i + 8 * j + l]), q[i + 8 * j + l], acc[j][l]);
    float x[8];
    for (int l = 0; l < 8; ++l) x[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
    double s = (t0 + t1) + (t2 + t3);
    for (; i < n; ++i) s += static_cast<double>(fp16_to_fp32(k[i]) * q[i]);
    return static_cast<float>(s);
}

float dot_prefill_scalar(const float* q, const uint16_t* k, int n) {
    float x[8] = {};
    for (int i = 0; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) x[l] = std::fma(fp16_to_fp32(k[i + l]), q[i + l], x[l]);
    const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
    return (t0 + t2) + (t1 + t3);
}

void accumulate_scalar(float p, const uint16_t* v, float* acc, int n) {
    for (int i = 0; i < n; ++i) acc[i] = std::fma(fp16_to_fp32(v[i]), p, acc[i]);
}

void reduce_decode_scalar(const float* acc, float* out, int n) {
    for (int d = 0; d < n; ++d) {
        float x[8];
        for (int l = 0; l < 8; ++l) {
            const float a0 = acc[(0 + l) * n + d], a1 = acc[(8 + l) * n + d];
            const float a2 = acc[(16 + l) * n + d], a3 = acc[(24 + l) * n + d];
            x[l] = (a0 + a2) + (a1 + a3);
        }
        const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
        out[d] = (t0 + t1) + (t2 + t3);
    }
}

void reduce_prefill_scalar(const float* acc, float* out, int n) {
    for (int d = 0; d < n; ++d) {
        const float t0 = acc[0 * n + d] + acc[4 * n + d], t1 = acc[1 * n + d] + acc[5 * n + d];
        const float t2 = acc[2 * n + d] + acc[6 * n + d], t3 = acc[3 * n + d] + acc[7 * n + d];
        out[d] = (t0 + t2) + (t1 + t3);
    }
}

void to_f16_scalar(const float* x, uint16_t* y, int n) {
    for (int i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

void round_f16_row_scalar(const float* x, float* y, int n) {
    for (int i = 0; i < n; ++i) y[i] = round_f16(x[i]);
}

void gather_vt_scalar(const uint16_t* const* cols, int dstride, int count, int n, float* vt, int ld) {
    const int padded = std::min(ld, (count + 7) / 8 * 8);
    for (int d = 0; d < n; ++d) {
        for (int j = 0; j < padded; ++j) {
            vt[static_cast<size_t>(d) * ld + j] = j < count ? fp16_to_fp32(cols[j][static_cast<size_t>(d) * dstride]) : 0.0f;
        }
    }
}

void reduce_prefill_t_scalar(const float* acc_t, float* out, int n) {
    for (int d = 0; d < n; ++d) {
        const float* a = acc_t + d * 8;
        out[d] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    }
}

}  // namespace

void attn_pv_decode_t_generic(const float* p, int p_stride, int n_q, const uint16_t* const* blocks, int bs, int p_begin,
                              int p_end, float* const* out, int n) {
    std::vector<float> acc(static_cast<size_t>(32) * n);
    for (int g = 0; g < n_q; ++g) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        const float* w = p + static_cast<size_t>(g) * p_stride;
        for (int i = p_begin; i < p_end; ++i) {
            const uint16_t* col = blocks[(i - p_begin) / bs] + kv_v_offset(bs, n, i % bs, 0);
            const int t = kv_v_tile(bs);
            float* a = acc.data() + static_cast<size_t>(i % 32) * n;
            for (int d = 0; d < n; ++d) a[d] = std::fma(fp16_to_fp32(col[static_cast<size_t>(d) * t]), w[i], a[d]);
        }
        reduce_decode_scalar(acc.data(), out[g], n);
    }
}

// attention_f16_avx2.cc, attention_f16_avx512.cc
const AttnF16Kernels* attn_f16_kernels_avx2();
const AttnF16Kernels* attn_f16_kernels_avx512();

const AttnF16Kernels& attn_f16_kernels_scalar() {
    static const AttnF16Kernels k{dot_decode_scalar,
                                  dot_prefill_scalar,
                                  accumulate_scalar,
                                  reduce_decode_scalar,
                                  reduce_prefill_scalar,
                                  to_f16_scalar,
                                  round_f16_row_scalar,
                                  attn_dots_run<dot_decode_scalar, dot_prefill_scalar>,
                                  attn_accumulate_run<accumulate_scalar, round_f16>,
                                  attn_accumulate_t<round_f16>,
                                  gather_vt_scalar,
                                  reduce_prefill_t_scalar,
                                  attn_dots_prefill_group<dot_prefill_scalar>,
                                  attn_dots_decode_group<dot_decode_scalar>,
                                  attn_pv_decode_t_generic};
    return k;
}

const AttnF16Kernels* attn_f16_kernels_avx2_if_supported() { return cpu_has_avx2() ? attn_f16_kernels_avx2() : nullptr; }

const AttnF16Kernels& attn_f16_kernels() {
    static const AttnF16Kernels* k = [] {
        // The matrix kernels' ISA (CPUID, or FERROX_KERNELS_ISA): avx512 has F/BW/DQ/VL.
        if (std::strcmp(kernels_isa_name(), "avx512") == 0) return attn_f16_kernels_avx512();
        if (cpu_has_avx2()) {  // AVX2, FMA and F16C (kernels/dispatch.cc)
            return attn_f16_kernels_avx2();
        }
        return &attn_f16_kernels_scalar();
    }();
    return *k;
}

}  // namespace ferrox
