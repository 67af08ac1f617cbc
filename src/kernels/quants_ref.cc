// Scalar reference implementations of every format: dequantize, quantize, dot product.
// Plain loops over the layouts documented in quant_blocks.h; the oracle for the SIMD kernels.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/kernels_internal.h"
#include "kernels/quant_blocks.h"
#include "kernels/quants.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

using detail::nearest_int;

inline float h2f(uint16_t h) { return fp16_to_fp32(h); }
inline uint16_t f2h(float f) { return fp32_to_fp16(f); }

int64_t n_blocks(int64_t n, int64_t qk) {
    CHECK_MSG(n % qk == 0, "row length is not a multiple of the block size");
    return n / qk;
}

// ---- plain floats ----

void dequant_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dequant_f16(const void* src, float* dst, int64_t n) {
    const auto* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = h2f(s[i]);
}
void dequant_bf16(const void* src, float* dst, int64_t n) {
    const auto* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
}
void quant_f32(const float* src, void* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quant_f16(const float* src, void* dst, int64_t n) {
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f2h(src[i]);
}
void quant_bf16(const float* src, void* dst, int64_t n) {
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
}
float dot_f32(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const float*>(w);
    const auto* y = static_cast<const float*>(a);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
    return static_cast<float>(s);
}
float dot_f16(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(h2f(x[i])) * h2f(y[i]);
    return static_cast<float>(s);
}
float dot_bf16(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
        s += static_cast<double>(bf16_to_fp32(x[i])) * bf16_to_fp32(y[i]);
    return static_cast<float>(s);
}

// ---- 32-element formats ----

// The element of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

void min_max(const float* x, int n, float* mn, float* mx) {
    *mn = FLT_MAX;
    *mx = -FLT_MAX;
    for (int j = 0; j < n; ++j) {
        *mn = std::min(*mn, x[j]);
        *mx = std::max(*mx, x[j]);
    }
}

void dequant_q4_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ4_0*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < kQK / 2; ++j) {
            dst[j] = static_cast<float>((b[i].qs[j] & 15) - 8) * d;
            dst[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

// Maps the signed abs-max to -8 (as ggml): q = x / d + 8 truncated after adding 0.5.
void quant_q4_0(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ4_0*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        const float d = signed_absmax(x, kQK) / -8.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = f2h(d);
        for (int j = 0; j < kQK / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
            const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
            b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void dequant_q4_1(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ4_1*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = h2f(b[i].d), m = h2f(b[i].m);
        for (int j = 0; j < kQK / 2; ++j) {
            dst[j] = static_cast<float>(b[i].qs[j] & 15) * d + m;
            dst[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
        }
    }
}

void quant_q4_1(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ4_1*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        float mn, mx;
        min_max(x, kQK, &mn, &mx);
        const float d = (mx - mn) / 15.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = f2h(d);
        b[i].m = f2h(mn);
        for (int j = 0; j < kQK / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>((x[j] - mn) * id + 0.5f));
            const int q1 = std::min(15, static_cast<int>((x[j + 16] - mn) * id + 0.5f));
            b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

// 5-bit value of element j (0..31) of a Q5 block.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
    const int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
    return lo | static_cast<int>(((qh >> j) & 1) << 4);
}

inline void q5_pack(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
        qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
        qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    std::memcpy(qh_bytes, &qh, 4);
}

void dequant_q5_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ5_0*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = h2f(b[i].d);
        uint32_t qh;
        std::memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < kQK; ++j)
            dst[j] = static_cast<float>(q5_value(b[i].qs, qh, j) - 16) * d;
    }
}

void quant_q5_0(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ5_0*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        const float d = signed_absmax(x, kQK) / -16.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = f2h(d);
        int q[kQK];
        for (int j = 0; j < kQK; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
        q5_pack(q, b[i].qs, b[i].qh);
    }
}

void dequant_q5_1(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ5_1*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = h2f(b[i].d), m = h2f(b[i].m);
        uint32_t qh;
        std::memcpy(&qh, b[i].qh, 4);
        for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(q5_value(b[i].qs, qh, j)) * d + m;
    }
}

void quant_q5_1(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ5_1*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        float mn, mx;
        min_max(x, kQK, &mn, &mx);
        const float d = (mx - mn) / 31.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = f2h(d);
        b[i].m = f2h(mn);
        int q[kQK];
        for (int j = 0; j < kQK; ++j)
            q[j] = std::min(31, static_cast<int>((x[j] - mn) * id + 0.5f));
        q5_pack(q, b[i].qs, b[i].qh);
    }
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
    }
}

float absmax(const float* x, int n) {
    float amax = 0;
    for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
    return amax;
}

// ggml's reference: d = amax / 127, q = roundf(x / d) (ties away from zero).
void quant_q8_0(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        const float d = absmax(x, kQK) / 127.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        b[i].d = f2h(d);
        for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
    }
}

void dequant_q8_1(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ8_1*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
    }
}

void quant_q8_1(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8_1*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        const float d = absmax(x, kQK) / 127.f;
        const float id = d != 0 ? 1.f / d : 0.f;
        int sum = 0;
        for (int j = 0; j < kQK; ++j) {
            b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
            sum += b[i].qs[j];
        }
        b[i].d = f2h(d);
        b[i].s = f2h(static_cast<float>(sum) * d);
    }
}

// The float step of Q4_0's, Q4_1's and Q5_1's dot products, the order every kernel of theirs
// keeps outside ModelOptions::ggml_order: per block, the exact integer sum s scaled by dx * dy
// in one fused multiply-add onto the running sum (Q4_1 and Q5_1 first fuse their offset m * ys
// into it). Fused because the batched kernels are bound by this step's instructions: two fused
// operations per block and column instead of three products and two sums made `ferrox bench
// -np 16` 8-12 % and pp512 5-7 % faster on the Q4_1 default model (AVX-512). Q5_0 and Q8_0 keep
// (s * dx) * dy added: their kernels gain one instruction in 13, and with the fused step
// Gemma 3's default-order agreement with llama.cpp measured lower (4 of 10 greedy prompts
// instead of 6, logits cosine 0.9987 instead of 0.9991).
inline float block_add(float dxdy, int s, float sum) { return std::fma(dxdy, static_cast<float>(s), sum); }

float dot_q4_0(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ4_0*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i) {
        int s = 0;
        for (int j = 0; j < kQK / 2; ++j) {
            s += ((x[i].qs[j] & 15) - 8) * y[i].qs[j];
            s += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sum = block_add(h2f(x[i].d) * h2f(y[i].d), s, sum);
    }
    return sum;
}

float dot_q4_1(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ4_1*>(w);
    const auto* y = static_cast<const BlockQ8_1*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i) {
        int s = 0;
        for (int j = 0; j < kQK / 2; ++j) {
            s += (x[i].qs[j] & 15) * y[i].qs[j];
            s += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sum = block_add(h2f(x[i].d) * h2f(y[i].d), s, std::fma(h2f(x[i].m), h2f(y[i].s), sum));
    }
    return sum;
}

float dot_q5_0(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ5_0*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i) {
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        int s = 0;
        for (int j = 0; j < kQK; ++j) s += (q5_value(x[i].qs, qh, j) - 16) * y[i].qs[j];
        sum += static_cast<float>(s) * h2f(x[i].d) * h2f(y[i].d);
    }
    return sum;
}

float dot_q5_1(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ5_1*>(w);
    const auto* y = static_cast<const BlockQ8_1*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i) {
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        int s = 0;
        for (int j = 0; j < kQK; ++j) s += q5_value(x[i].qs, qh, j) * y[i].qs[j];
        sum = block_add(h2f(x[i].d) * h2f(y[i].d), s, std::fma(h2f(x[i].m), h2f(y[i].s), sum));
    }
    return sum;
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ8_0*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i) {
        int s = 0;
        for (int j = 0; j < kQK; ++j) s += x[i].qs[j] * y[i].qs[j];
        sum += static_cast<float>(s) * h2f(x[i].d) * h2f(y[i].d);
    }
    return sum;
}

// ---- K formats ----

// Unpacked Q4_K/Q5_K element e (0..255) of a block: the 4 low bits.
inline int qk4_low(const uint8_t* qs, int e) {
    const int c = e / 64, l = e % 32;
    return (e % 64) < 32 ? (qs[32 * c + l] & 15) : (qs[32 * c + l] >> 4);
}
inline int qk5_high(const uint8_t* qh, int e) { return (qh[e % 32] >> (e / 32)) & 1; }

// Q6_K element e: 6-bit value in [0, 63].
inline int q6k_value(const BlockQ6_K& b, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t qh = b.qh[32 * h + l];
    const int lo = k == 0   ? (ql[l] & 15)
                   : k == 1 ? (ql[l + 32] & 15)
                   : k == 2 ? (ql[l] >> 4)
                            : (ql[l + 32] >> 4);
    return lo | (((qh >> (2 * k)) & 3) << 4);
}

void dequant_q4_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ4_K*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            kquant_scale_min(b[i].scales, j, &sc, &m);
            const float ds = d * sc, dm = dmin * m;
            for (int e = 32 * j; e < 32 * j + 32; ++e)
                dst[e] = ds * static_cast<float>(qk4_low(b[i].qs, e)) - dm;
        }
    }
}

void dequant_q5_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ5_K*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            kquant_scale_min(b[i].scales, j, &sc, &m);
            const float ds = d * sc, dm = dmin * m;
            for (int e = 32 * j; e < 32 * j + 32; ++e) {
                const int q = qk4_low(b[i].qs, e) | (qk5_high(b[i].qh, e) << 4);
                dst[e] = ds * static_cast<float>(q) - dm;
            }
        }
    }
}

void pack_kquant_scales(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

// Shared scale-and-min fit of the K-formats (Q2_K: 16 sub-blocks of 16, 2-bit quants, 4-bit
// scales; Q4_K/Q5_K: 8 of 32, 4/5-bit quants, 6-bit scales): per sub-block j,
// min_j = -min(0, x) and scale_j = (max - min) / nmax; d = max scale_j / smax, dmin = max min_j
// / smax. The mins are rounded up (so x + dmin*m_j >= 0: no clamp at 0) and the scales are
// rounded up after that (so the top of the sub-block fits in nmax steps), unless that needs a
// scale above smax. Max error per element: half a step of its sub-block, d*sc_j/2 <=
// (scale_j + d + dmin/nmax)/2, plus at most dmin where the smax cap bites.
void fit_scale_min(const float* x, int n_sub, int sub_len, int nmax, int smax, uint16_t* d_out,
                   uint16_t* dmin_out, uint8_t* sc, uint8_t* m, uint8_t* q) {
    float scale[16], mins[16], tops[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < n_sub; ++j) {
        float mn, mx;
        min_max(x + sub_len * j, sub_len, &mn, &mx);
        mn = std::min(mn, 0.f);
        mx = std::max(mx, 0.f);
        mins[j] = -mn;
        tops[j] = mx;
        scale[j] = (mx - mn) / static_cast<float>(nmax);
        max_scale = std::max(max_scale, scale[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float fsmax = static_cast<float>(smax);
    *d_out = f2h(max_scale / fsmax);
    *dmin_out = f2h(max_min / fsmax);
    const float d = h2f(*d_out), dmin = h2f(*dmin_out);
    for (int j = 0; j < n_sub; ++j) {
        m[j] = dmin > 0 ? static_cast<uint8_t>(std::min(fsmax, std::ceil(mins[j] / dmin))) : 0;
        const float dm = dmin * m[j];
        const float need = (tops[j] + dm) / (d * static_cast<float>(nmax));
        sc[j] = d > 0 ? static_cast<uint8_t>(std::clamp(std::ceil(need), 0.f, fsmax)) : 0;
        const float ds = d * sc[j];
        for (int l = 0; l < sub_len; ++l) {
            const int e = sub_len * j + l;
            q[e] = ds > 0 ? static_cast<uint8_t>(std::clamp(nearest_int((x[e] + dm) / ds), 0, nmax)) : 0;
        }
    }
}

// Q4_K (nmax 15) and Q5_K (nmax 31): fit_scale_min over 8 sub-blocks of 32 with 6-bit scales
// and mins, packed into the 12 scale bytes.
void fit_kquant(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales,
                uint8_t* q) {
    uint8_t sc[8], m[8];
    fit_scale_min(x, 8, 32, nmax, 63, d_out, dmin_out, sc, m, q);
    pack_kquant_scales(sc, m, scales);
}

void quant_q4_k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ4_K*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, x += kQK_K) {
        uint8_t q[kQK_K];
        fit_kquant(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l)
                b[i].qs[32 * c + l] =
                    static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

void quant_q5_k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ5_K*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, x += kQK_K) {
        uint8_t q[kQK_K];
        fit_kquant(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        std::memset(b[i].qh, 0, sizeof(b[i].qh));
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
                const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                b[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
                b[i].qh[l] |=
                    static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

void dequant_q6_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ6_K*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        const float d = h2f(b[i].d);
        for (int e = 0; e < kQK_K; ++e)
            dst[e] = d * static_cast<float>(b[i].scales[e / 16]) *
                     static_cast<float>(q6k_value(b[i], e) - 32);
    }
}

// Per sub-block of 16: scale_j = amax_j / 31 (so q - 32 stays in [-31, 31]); d = max scale_j
// / 127 and the 8-bit scales are rounded up, so no element clamps. Max error: half a step,
// d*sc_j/2 <= (amax_j/31 + d)/2.
void quant_q6_k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ6_K*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, x += kQK_K) {
        float scale[16], max_scale = 0;
        for (int j = 0; j < 16; ++j) {
            scale[j] = absmax(x + 16 * j, 16) / 31.f;
            max_scale = std::max(max_scale, scale[j]);
        }
        b[i].d = f2h(max_scale / 127.f);
        const float d = h2f(b[i].d);
        uint8_t q[kQK_K];
        for (int j = 0; j < 16; ++j) {
            const int sc = d > 0 ? static_cast<int>(std::min(127.f, std::ceil(scale[j] / d))) : 0;
            b[i].scales[j] = static_cast<int8_t>(sc);
            const float ds = d * static_cast<float>(sc);
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * j + l;
                q[e] = static_cast<uint8_t>(
                    ds > 0 ? std::clamp(nearest_int(x[e] / ds), -32, 31) + 32 : 32);
            }
        }
        for (int h = 0; h < 2; ++h) {
            const uint8_t* qq = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                b[i].ql[64 * h + l] = static_cast<uint8_t>((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
                b[i].ql[64 * h + l + 32] =
                    static_cast<uint8_t>((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
                b[i].qh[32 * h + l] =
                    static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                         ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
            }
        }
    }
}

void dequant_q8_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ8_K*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K)
        for (int j = 0; j < kQK_K; ++j) dst[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

// Sum over a Q4_K/Q5_K block of sc_j * sum(q * y) and of m_j * sum(y), with y's bsums.
float dot_kquant_block(const uint8_t* scales, uint16_t d16, uint16_t dmin16, const int* q,
                       const BlockQ8_K& y) {
    int sum_q = 0, sum_m = 0;
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        kquant_scale_min(scales, j, &sc, &m);
        int s = 0;
        for (int l = 32 * j; l < 32 * j + 32; ++l) s += q[l] * y.qs[l];
        sum_q += sc * s;
        sum_m += m * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    }
    return y.d * h2f(d16) * static_cast<float>(sum_q) -
           y.d * h2f(dmin16) * static_cast<float>(sum_m);
}

float dot_q4_k(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ4_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        int q[kQK_K];
        for (int e = 0; e < kQK_K; ++e) q[e] = qk4_low(x[i].qs, e);
        sum += dot_kquant_block(x[i].scales, x[i].d, x[i].dmin, q, y[i]);
    }
    return sum;
}

float dot_q5_k(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ5_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        int q[kQK_K];
        for (int e = 0; e < kQK_K; ++e) q[e] = qk4_low(x[i].qs, e) | (qk5_high(x[i].qh, e) << 4);
        sum += dot_kquant_block(x[i].scales, x[i].d, x[i].dmin, q, y[i]);
    }
    return sum;
}

float dot_q6_k(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ6_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            int sj = 0;
            for (int e = 16 * j; e < 16 * j + 16; ++e) sj += (q6k_value(x[i], e) - 32) * y[i].qs[e];
            s += x[i].scales[j] * sj;
        }
        sum += y[i].d * h2f(x[i].d) * static_cast<float>(s);
    }
    return sum;
}

// ---- low-bit formats: Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4 ----

// 2-bit quant of element e (0..255) of a Q2_K/Q3_K qs array.
inline int q2_bits(const uint8_t* qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
// Q3_K element e: q in [-4, 3].
inline int q3k_value(const BlockQ3_K& b, int e) {
    const int hbit = (b.hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
    return q2_bits(b.qs, e) - (hbit ? 0 : 4);
}
inline void q2_pack(const uint8_t* q, uint8_t* qs) {
    std::memset(qs, 0, kQK_K / 4);
    for (int e = 0; e < kQK_K; ++e)
        qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((q[e] & 3) << (2 * ((e % 128) / 32)));
}
// Nibble index q of 32-element block element j (0..31), qs as Q4_0's.
inline int nib(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }
inline void nib_pack(const uint8_t* q, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}
// The index of the level of table (16 entries, sorted within the considered range) nearest
// to v (the first on ties).
inline uint8_t nearest_level(const int8_t* table, float v) {
    int best = 0;
    float err = std::fabs(v - table[0]);
    for (int k = 1; k < 16; ++k) {
        const float e = std::fabs(v - table[k]);
        if (e < err) err = e, best = k;
    }
    return static_cast<uint8_t>(best);
}

void dequant_q2_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ2_K*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        for (int e = 0; e < kQK_K; ++e) {
            const uint8_t sc = b[i].scales[e / 16];
            dst[e] = d * static_cast<float>(sc & 15) * static_cast<float>(q2_bits(b[i].qs, e)) -
                     dmin * static_cast<float>(sc >> 4);
        }
    }
}

// fit_scale_min with nmax 3 and 4-bit scales and mins.
void quant_q2_k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ2_K*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, x += kQK_K) {
        uint8_t sc[16], m[16], q[kQK_K];
        fit_scale_min(x, 16, 16, 3, 15, &b[i].d, &b[i].dmin, sc, m, q);
        for (int j = 0; j < 16; ++j) b[i].scales[j] = static_cast<uint8_t>(sc[j] | (m[j] << 4));
        q2_pack(q, b[i].qs);
    }
}

void dequant_q3_k(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ3_K*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        const float d = h2f(b[i].d);
        for (int e = 0; e < kQK_K; ++e)
            dst[e] = d * static_cast<float>(q3k_scale(b[i].scales, e / 16) - 32) *
                     static_cast<float>(q3k_value(b[i], e));
    }
}

// Symmetric, as Q6_K's fit: per sub-block of 16, scale_j = amax_j / 3 (q in [-3, 3]: the level
// -4 goes unused); d = max scale_j / 31 and the 6-bit scales (only the non-negative half of
// [-32, 31]) are rounded up, so no element clamps. Max error: half a step, d*sc_j/2 <=
// (amax_j/3 + d)/2.
void quant_q3_k(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ3_K*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, x += kQK_K) {
        float scale[16], max_scale = 0;
        for (int j = 0; j < 16; ++j) {
            scale[j] = absmax(x + 16 * j, 16) / 3.f;
            max_scale = std::max(max_scale, scale[j]);
        }
        b[i].d = f2h(max_scale / 31.f);
        const float d = h2f(b[i].d);
        uint8_t q[kQK_K];
        std::memset(b[i].scales, 0, sizeof(b[i].scales));
        std::memset(b[i].hmask, 0, sizeof(b[i].hmask));
        for (int j = 0; j < 16; ++j) {
            const int sc = d > 0 ? static_cast<int>(std::min(31.f, std::ceil(scale[j] / d))) : 0;
            const int stored = sc + 32;
            b[i].scales[j % 8] |= static_cast<uint8_t>((stored & 15) << (j < 8 ? 0 : 4));
            b[i].scales[8 + j % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (j / 4)));
            const float ds = d * static_cast<float>(sc);
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * j + l;
                const int v = ds > 0 ? std::clamp(nearest_int(x[e] / ds), -4, 3) : 0;
                q[e] = static_cast<uint8_t>(v + 4);  // bits 0-1 low, bit 2 the high bit
                b[i].hmask[e % 32] |= static_cast<uint8_t>(((v + 4) >> 2) << (4 * (e / 128) + (e % 128) / 32));
            }
        }
        q2_pack(q, b[i].qs);
    }
}

void dequant_iq4_nl(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockIQ4_NL*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(kIQ4NLValues[nib(b[i].qs, j)]);
    }
}

// The signed abs-max maps to the level -127 (d = max / -127), every element to its nearest
// level. Max error: half the widest gap between levels (24), or where x / d lies above the top
// level 113 (up to 127), 14 steps of d: 14 * amax / 127.
void quant_iq4_nl(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockIQ4_NL*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        b[i].d = f2h(signed_absmax(x, kQK) / -127.f);
        const float d = h2f(b[i].d);
        uint8_t q[kQK];
        for (int j = 0; j < kQK; ++j) q[j] = d != 0 ? nearest_level(kIQ4NLValues, x[j] / d) : 8;
        nib_pack(q, b[i].qs);
    }
}

void dequant_iq4_xs(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockIQ4_XS*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < 8; ++j) {
            const float dl = d * static_cast<float>(iq4xs_scale(b[i].scales_h, b[i].scales_l, j) - 32);
            for (int l = 0; l < 32; ++l)
                dst[32 * j + l] = dl * static_cast<float>(kIQ4NLValues[nib(b[i].qs + 16 * j, l)]);
        }
    }
}

// Per sub-block of 32, IQ4_NL's fit with scale_j = max_j / -127 (signed); d = max |scale_j| / 31,
// and ls_j = scale_j / d rounded away from zero (|d * ls_j| >= |scale_j|: every x / (d * ls_j)
// stays within [-127, 127]). Max error: 14 steps of d * |ls_j| <= |scale_j| + d.
void quant_iq4_xs(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockIQ4_XS*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, x += kQK_K) {
        float scale[8], max_scale = 0;
        for (int j = 0; j < 8; ++j) {
            scale[j] = signed_absmax(x + 32 * j, 32) / -127.f;
            max_scale = std::max(max_scale, std::fabs(scale[j]));
        }
        b[i].d = f2h(max_scale / 31.f);
        const float d = h2f(b[i].d);
        b[i].scales_h = 0;
        std::memset(b[i].scales_l, 0, sizeof(b[i].scales_l));
        for (int j = 0; j < 8; ++j) {
            const float r = d > 0 ? scale[j] / d : 0.f;
            const int ls = static_cast<int>(std::clamp(r < 0 ? std::floor(r) : std::ceil(r), -32.f, 31.f));
            const int stored = ls + 32;
            b[i].scales_l[j / 2] |= static_cast<uint8_t>((stored & 15) << (4 * (j % 2)));
            b[i].scales_h = static_cast<uint16_t>(b[i].scales_h | ((stored >> 4) << (2 * j)));
            const float ds = d * static_cast<float>(ls);
            uint8_t q[32];
            for (int l = 0; l < 32; ++l) q[l] = ds != 0 ? nearest_level(kIQ4NLValues, x[32 * j + l] / ds) : 8;
            nib_pack(q, b[i].qs + 16 * j);
        }
    }
}

void dequant_mxfp4(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockMXFP4*>(src);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, dst += kQK) {
        const float d = mxfp4_scale(b[i].e);
        for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(kMXFP4Values[nib(b[i].qs, j)]) * d;
    }
}

// The smallest exponent whose scale d = 2^(e - 128) takes the abs-max within the top level
// (12 * d >= amax), every element to its nearest level. Max error: half the widest gap (4),
// 2 * d < amax / 3 (the exponent below would have 12 * d / 2 < amax).
void quant_mxfp4(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockMXFP4*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i, x += kQK) {
        const float amax = absmax(x, kQK);
        int e = 0;
        while (e < 254 && 12.f * mxfp4_scale(static_cast<uint8_t>(e)) < amax) ++e;
        b[i].e = static_cast<uint8_t>(e);
        const float d = mxfp4_scale(b[i].e);
        uint8_t q[kQK];
        for (int j = 0; j < kQK; ++j) q[j] = nearest_level(kMXFP4Values, x[j] / d);
        nib_pack(q, b[i].qs);
    }
}

// The low-bit formats' dot products: one exact integer sum per (super-)block, scaled in float.
// Q2_K as Q4_K: sum_j sc_j * sum(q * y) and sum_j m_j * bsums_j, then
// y.d * d * sumq - y.d * dmin * summ. Q3_K and IQ4_XS as Q6_K: sum_j (sc_j - 32) * sum(q * y),
// times y.d * d. IQ4_NL and MXFP4 as Q4_0: block_add(dx * dy, sum(v * y)).
float dot_q2_k(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ2_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 16; ++j) {
            int s = 0;
            for (int e = 16 * j; e < 16 * j + 16; ++e) s += q2_bits(x[i].qs, e) * y[i].qs[e];
            sum_q += (x[i].scales[j] & 15) * s;
            sum_m += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        sum += y[i].d * h2f(x[i].d) * static_cast<float>(sum_q) -
               y[i].d * h2f(x[i].dmin) * static_cast<float>(sum_m);
    }
    return sum;
}

float dot_q3_k(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ3_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            int sj = 0;
            for (int e = 16 * j; e < 16 * j + 16; ++e) sj += q3k_value(x[i], e) * y[i].qs[e];
            s += (q3k_scale(x[i].scales, j) - 32) * sj;
        }
        sum += y[i].d * h2f(x[i].d) * static_cast<float>(s);
    }
    return sum;
}

float dot_iq4_nl(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockIQ4_NL*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i) {
        int s = 0;
        for (int j = 0; j < kQK; ++j) s += kIQ4NLValues[nib(x[i].qs, j)] * y[i].qs[j];
        sum = block_add(h2f(x[i].d) * h2f(y[i].d), s, sum);
    }
    return sum;
}

float dot_iq4_xs(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockIQ4_XS*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        int s = 0;
        for (int j = 0; j < 8; ++j) {
            int sj = 0;
            for (int l = 0; l < 32; ++l) sj += kIQ4NLValues[nib(x[i].qs + 16 * j, l)] * y[i].qs[32 * j + l];
            s += (iq4xs_scale(x[i].scales_h, x[i].scales_l, j) - 32) * sj;
        }
        sum += y[i].d * h2f(x[i].d) * static_cast<float>(s);
    }
    return sum;
}

float dot_mxfp4(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockMXFP4*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK); ++i) {
        int s = 0;
        for (int j = 0; j < kQK; ++j) s += kMXFP4Values[nib(x[i].qs, j)] * y[i].qs[j];
        sum = block_add(mxfp4_scale(x[i].e) * h2f(y[i].d), s, sum);
    }
    return sum;
}

// ---- grid formats: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (x Q8_K) ----
//
// No quantizer: ggml has none without an importance matrix for most of them (its CPU type
// traits leave from_float unset), and a file of these types comes from llama-quantize. So
// quantize_row_ref CHECK-fails for them (quant_iq_none); the tests use random blocks, every bit
// pattern of which is a valid block. Dequantize: ggml's dequantize_row_iq* float steps. Dot:
// ggml's generic vec_dot_iq*_q8_K, one exact integer sum per super-block (sub-block sums times
// the odd integer scales 2s + 1), then (dx * dy) * sum in float, and ggml's final constant
// (1/8 for IQ2, 1/4 for IQ3_XXS) applied to the row's float sum at the end.

#include "kernels/iq_grids.inc"

inline uint32_t le32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
// Byte j (0..7) of grid entry e.
inline int grid8(uint64_t e, int j) { return static_cast<int>((e >> (8 * j)) & 0xff); }
inline int grid4(uint32_t e, int j) { return static_cast<int>((e >> (8 * j)) & 0xff); }
inline int sgn(uint8_t signs, int j) { return (signs >> j) & 1 ? -1 : 1; }

void quant_iq_none(const float*, void*, int64_t) {
    CHECK_MSG(false, "no quantizer for the IQ1/IQ2/IQ3 grid formats (llama-quantize writes them)");
}

// The element magnitudes (grid bytes, unsigned) and signs of a super-block of IQ2_XXS / IQ2_XS /
// IQ2_S / IQ3_XXS / IQ3_S, and each sub-block's s (two per sub-block for the 16-element scales
// of IQ2_XS / IQ2_S: s16[2ib], s16[2ib + 1]; the others repeat one).
struct IqDecoded {
    int mag[kQK_K];
    int sign[kQK_K];
    int s16[16];
};

void iq2xxs_decode(const BlockIQ2_XXS& b, IqDecoded* o) {
    for (int ib = 0; ib < 8; ++ib) {
        const uint32_t idx = le32(b.qs + 4 * ib), aux = le32(b.qs + 4 * ib + 2);
        o->s16[2 * ib] = o->s16[2 * ib + 1] = static_cast<int>(aux >> 28);
        for (int l = 0; l < 4; ++l) {
            const uint64_t g = kIQ2XXSGrid[(idx >> (8 * l)) & 255];
            const uint8_t s = kIQSigns[(aux >> (7 * l)) & 127];
            for (int j = 0; j < 8; ++j) {
                o->mag[32 * ib + 8 * l + j] = grid8(g, j);
                o->sign[32 * ib + 8 * l + j] = sgn(s, j);
            }
        }
    }
}

void iq2xs_decode(const BlockIQ2_XS& b, IqDecoded* o) {
    for (int ib = 0; ib < 8; ++ib) {
        o->s16[2 * ib] = b.scales[ib] & 15;
        o->s16[2 * ib + 1] = b.scales[ib] >> 4;
        for (int l = 0; l < 4; ++l) {
            const uint16_t q = b.qs[4 * ib + l];
            const uint64_t g = kIQ2XSGrid[q & 511];
            const uint8_t s = kIQSigns[q >> 9];
            for (int j = 0; j < 8; ++j) {
                o->mag[32 * ib + 8 * l + j] = grid8(g, j);
                o->sign[32 * ib + 8 * l + j] = sgn(s, j);
            }
        }
    }
}

void iq2s_decode(const BlockIQ2_S& b, IqDecoded* o) {
    for (int ib = 0; ib < 8; ++ib) {
        o->s16[2 * ib] = b.scales[ib] & 15;
        o->s16[2 * ib + 1] = b.scales[ib] >> 4;
        for (int l = 0; l < 4; ++l) {
            const int g4 = 4 * ib + l;
            const uint64_t g = kIQ2SGrid[b.qs[g4] | (((b.qh[ib] >> (2 * l)) & 3) << 8)];
            for (int j = 0; j < 8; ++j) {
                o->mag[8 * g4 + j] = grid8(g, j);
                o->sign[8 * g4 + j] = sgn(b.qs[32 + g4], j);
            }
        }
    }
}

void iq3xxs_decode(const BlockIQ3_XXS& b, IqDecoded* o) {
    for (int ib = 0; ib < 8; ++ib) {
        const uint32_t aux = le32(b.qs + 64 + 4 * ib);
        o->s16[2 * ib] = o->s16[2 * ib + 1] = static_cast<int>(aux >> 28);
        for (int l = 0; l < 4; ++l) {
            const uint8_t s = kIQSigns[(aux >> (7 * l)) & 127];
            for (int j = 0; j < 8; ++j) {
                const int e = 32 * ib + 8 * l + j;
                o->mag[e] = grid4(kIQ3XXSGrid[b.qs[e / 4]], j % 4);
                o->sign[e] = sgn(s, j);
            }
        }
    }
}

void iq3s_decode(const BlockIQ3_S& b, IqDecoded* o) {
    for (int ib = 0; ib < 8; ++ib) o->s16[2 * ib] = o->s16[2 * ib + 1] = (b.scales[ib / 2] >> (4 * (ib % 2))) & 15;
    for (int e = 0; e < kQK_K; ++e) {
        const int k = e / 4;
        o->mag[e] = grid4(kIQ3SGrid[b.qs[k] | (((b.qh[k / 8] >> (k % 8)) & 1) << 8)], e % 4);
        o->sign[e] = sgn(b.signs[e / 8], e % 8);
    }
}

// dst = d * (0.5 + s) * f * mag * sign with ggml's float steps (f = 0.25 for IQ2, 0.5 for
// IQ3_XXS), or, for IQ3_S (f = 0), d * (1 + 2s) * mag * sign.
void iq_dequant_decoded(float d, const IqDecoded& o, float f, float* dst) {
    for (int e = 0; e < kQK_K; ++e) {
        const int s = o.s16[e / 16];
        const float db = f != 0 ? d * (0.5f + static_cast<float>(s)) * f : d * static_cast<float>(1 + 2 * s);
        dst[e] = db * static_cast<float>(o.mag[e]) * static_cast<float>(o.sign[e]);
    }
}

// One super-block's integer sum: sum over 16-element halves of (2s + 1) * sum(mag * sign * y).
int iq_block_sum(const IqDecoded& o, const int8_t* y) {
    int sum = 0;
    for (int h = 0; h < 16; ++h) {
        int s = 0;
        for (int l = 0; l < 16; ++l) s += o.mag[16 * h + l] * o.sign[16 * h + l] * y[16 * h + l];
        sum += (2 * o.s16[h] + 1) * s;
    }
    return sum;
}

template <class Block, void (*Decode)(const Block&, IqDecoded*)>
void dequant_iq_signed(const void* src, float* dst, int64_t n, float f) {
    const auto* b = static_cast<const Block*>(src);
    IqDecoded o;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        Decode(b[i], &o);
        iq_dequant_decoded(h2f(b[i].d), o, f, dst);
    }
}

// sum_i (dx * dy) * block sum, then times `post` (ggml's 0.125f, 0.25f or 1).
template <class Block, void (*Decode)(const Block&, IqDecoded*)>
float dot_iq_signed(int64_t n, const void* w, const void* a, float post) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    IqDecoded o;
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        Decode(x[i], &o);
        const float d = h2f(x[i].d) * y[i].d;
        sum += d * static_cast<float>(iq_block_sum(o, y[i].qs));
    }
    return post == 1.0f ? sum : post * sum;
}

void dequant_iq2_xxs(const void* s, float* d, int64_t n) { dequant_iq_signed<BlockIQ2_XXS, iq2xxs_decode>(s, d, n, 0.25f); }
void dequant_iq2_xs(const void* s, float* d, int64_t n) { dequant_iq_signed<BlockIQ2_XS, iq2xs_decode>(s, d, n, 0.25f); }
void dequant_iq2_s(const void* s, float* d, int64_t n) { dequant_iq_signed<BlockIQ2_S, iq2s_decode>(s, d, n, 0.25f); }
void dequant_iq3_xxs(const void* s, float* d, int64_t n) { dequant_iq_signed<BlockIQ3_XXS, iq3xxs_decode>(s, d, n, 0.5f); }
void dequant_iq3_s(const void* s, float* d, int64_t n) { dequant_iq_signed<BlockIQ3_S, iq3s_decode>(s, d, n, 0.0f); }
float dot_iq2_xxs(int64_t n, const void* w, const void* a) { return dot_iq_signed<BlockIQ2_XXS, iq2xxs_decode>(n, w, a, 0.125f); }
float dot_iq2_xs(int64_t n, const void* w, const void* a) { return dot_iq_signed<BlockIQ2_XS, iq2xs_decode>(n, w, a, 0.125f); }
float dot_iq2_s(int64_t n, const void* w, const void* a) { return dot_iq_signed<BlockIQ2_S, iq2s_decode>(n, w, a, 0.125f); }
float dot_iq3_xxs(int64_t n, const void* w, const void* a) { return dot_iq_signed<BlockIQ3_XXS, iq3xxs_decode>(n, w, a, 0.25f); }
float dot_iq3_s(int64_t n, const void* w, const void* a) { return dot_iq_signed<BlockIQ3_S, iq3s_decode>(n, w, a, 1.0f); }

// IQ1_S / IQ1_M: per group of 8 its grid values (-1, 0, 1), delta sign (+1, -1) and per
// 16 elements s.
struct Iq1Decoded {
    int v[kQK_K];
    int delta[32];  // per group of 8
    int s16[16];
};

void iq1s_decode(const BlockIQ1_S& b, Iq1Decoded* o) {
    for (int ib = 0; ib < 8; ++ib) {
        const uint16_t qh = b.qh[ib];
        o->s16[2 * ib] = o->s16[2 * ib + 1] = (qh >> 12) & 7;
        for (int l = 0; l < 4; ++l) {
            const uint64_t g = kIQ1SGrid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
            o->delta[4 * ib + l] = qh & 0x8000 ? -1 : 1;
            for (int j = 0; j < 8; ++j) o->v[32 * ib + 8 * l + j] = static_cast<int8_t>(grid8(g, j));
        }
    }
}

void iq1m_decode(const BlockIQ1_M& b, Iq1Decoded* o) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    for (int ib = 0; ib < 8; ++ib) {
        for (int h = 0; h < 2; ++h) o->s16[2 * ib + h] = (sc[ib / 2] >> (6 * (ib % 2) + 3 * h)) & 7;
        for (int l = 0; l < 4; ++l) {
            const int nibble = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
            const uint64_t g = kIQ1SGrid[b.qs[4 * ib + l] | ((nibble & 7) << 8)];
            o->delta[4 * ib + l] = nibble & 8 ? -1 : 1;
            for (int j = 0; j < 8; ++j) o->v[32 * ib + 8 * l + j] = static_cast<int8_t>(grid8(g, j));
        }
    }
}

// value = d * (2s + 1) * (grid + delta * 0.125), ggml's steps.
void iq1_dequant_decoded(float d, const Iq1Decoded& o, float* dst) {
    for (int e = 0; e < kQK_K; ++e) {
        const float dl = d * static_cast<float>(2 * o.s16[e / 16] + 1);
        const float delta = o.delta[e / 8] < 0 ? -0.125f : 0.125f;
        dst[e] = dl * (static_cast<float>(o.v[e]) + delta);
    }
}

void dequant_iq1_s(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockIQ1_S*>(src);
    Iq1Decoded o;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        iq1s_decode(b[i], &o);
        iq1_dequant_decoded(h2f(b[i].d), o, dst);
    }
}

void dequant_iq1_m(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockIQ1_M*>(src);
    Iq1Decoded o;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, dst += kQK_K) {
        iq1m_decode(b[i], &o);
        iq1_dequant_decoded(h2f(iq1m_d(b[i].scales)), o, dst);
    }
}

// Per super-block two exact integer sums, sumi = sum (2s + 1) * sum(grid * y) and sumd =
// sum (2s + 1) * delta * sum(y), then (dx * dy) * (sumi + 0.125f * sumd) as ggml (IQ1_S takes
// sum(y) per 32 from the bsums, IQ1_M per 8 from the quants: the same integers).
float iq1_block_term(float dxdy, const Iq1Decoded& o, const int8_t* y) {
    int sumi = 0, sumd = 0;
    for (int h = 0; h < 16; ++h) {
        int si = 0, sd = 0;
        for (int l = 0; l < 16; ++l) {
            si += o.v[16 * h + l] * y[16 * h + l];
            sd += o.delta[(16 * h + l) / 8] * y[16 * h + l];
        }
        sumi += (2 * o.s16[h] + 1) * si;
        sumd += (2 * o.s16[h] + 1) * sd;
    }
    return dxdy * (static_cast<float>(sumi) + 0.125f * static_cast<float>(sumd));
}

float dot_iq1_s(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockIQ1_S*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    Iq1Decoded o;
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        iq1s_decode(x[i], &o);
        sum += iq1_block_term(h2f(x[i].d) * y[i].d, o, y[i].qs);
    }
    return sum;
}

float dot_iq1_m(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockIQ1_M*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    Iq1Decoded o;
    float sum = 0;
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i) {
        iq1m_decode(x[i], &o);
        sum += iq1_block_term(h2f(iq1m_d(x[i].scales)) * y[i].d, o, y[i].qs);
    }
    return sum;
}

// ---- per-type dispatch of the *_ref entry points ----

struct RefFns {
    DType type;
    void (*dequant)(const void*, float*, int64_t);
    void (*quant)(const float*, void*, int64_t);
    float (*dot)(int64_t, const void*, const void*);  // nullptr for activation-only types
    DType act;
};

constexpr RefFns kRef[] = {
    {DType::kF32, dequant_f32, quant_f32, dot_f32, DType::kF32},
    {DType::kF16, dequant_f16, quant_f16, dot_f16, DType::kF16},
    {DType::kBF16, dequant_bf16, quant_bf16, dot_bf16, DType::kBF16},
    {DType::kQ4_0, dequant_q4_0, quant_q4_0, dot_q4_0, DType::kQ8_0},
    {DType::kQ4_1, dequant_q4_1, quant_q4_1, dot_q4_1, DType::kQ8_1},
    {DType::kQ5_0, dequant_q5_0, quant_q5_0, dot_q5_0, DType::kQ8_0},
    {DType::kQ5_1, dequant_q5_1, quant_q5_1, dot_q5_1, DType::kQ8_1},
    {DType::kQ8_0, dequant_q8_0, quant_q8_0, dot_q8_0, DType::kQ8_0},
    {DType::kQ4_K, dequant_q4_k, quant_q4_k, dot_q4_k, DType::kQ8_K},
    {DType::kQ5_K, dequant_q5_k, quant_q5_k, dot_q5_k, DType::kQ8_K},
    {DType::kQ6_K, dequant_q6_k, quant_q6_k, dot_q6_k, DType::kQ8_K},
    {DType::kQ2_K, dequant_q2_k, quant_q2_k, dot_q2_k, DType::kQ8_K},
    {DType::kQ3_K, dequant_q3_k, quant_q3_k, dot_q3_k, DType::kQ8_K},
    {DType::kIQ4_NL, dequant_iq4_nl, quant_iq4_nl, dot_iq4_nl, DType::kQ8_0},
    {DType::kIQ4_XS, dequant_iq4_xs, quant_iq4_xs, dot_iq4_xs, DType::kQ8_K},
    {DType::kMXFP4, dequant_mxfp4, quant_mxfp4, dot_mxfp4, DType::kQ8_0},
    {DType::kIQ2_XXS, dequant_iq2_xxs, quant_iq_none, dot_iq2_xxs, DType::kQ8_K},
    {DType::kIQ2_XS, dequant_iq2_xs, quant_iq_none, dot_iq2_xs, DType::kQ8_K},
    {DType::kIQ2_S, dequant_iq2_s, quant_iq_none, dot_iq2_s, DType::kQ8_K},
    {DType::kIQ3_XXS, dequant_iq3_xxs, quant_iq_none, dot_iq3_xxs, DType::kQ8_K},
    {DType::kIQ3_S, dequant_iq3_s, quant_iq_none, dot_iq3_s, DType::kQ8_K},
    {DType::kIQ1_S, dequant_iq1_s, quant_iq_none, dot_iq1_s, DType::kQ8_K},
    {DType::kIQ1_M, dequant_iq1_m, quant_iq_none, dot_iq1_m, DType::kQ8_K},
    // activation-only types
    {DType::kQ8_1, dequant_q8_1, quant_q8_1, nullptr, DType::kQ8_1},
    {DType::kQ8_K, dequant_q8_k, detail::quantize_row_q8_k_ref, nullptr, DType::kQ8_K},
};
static_assert(sizeof(kRef) / sizeof(kRef[0]) == detail::kNumWeightTypes + 2);

const RefFns& ref_fns(DType type) {
    for (const auto& r : kRef)
        if (r.type == type) return r;
    CHECK_MSG(false, "unsupported DType");
    __builtin_unreachable();
}

}  // namespace

namespace detail {

// ggml's quantize_row_q8_K_ref: the signed abs-max maps to -127, q = nearest_int(x * -127 /
// max) capped at 127, d = 1 / iscale, and bsums over each 16.
void quantize_row_q8_k_ref(const float* x, void* dst, int64_t n) {
    auto* b = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < n_blocks(n, kQK_K); ++i, x += kQK_K) {
        const float max = signed_absmax(x, kQK_K);
        if (max == 0) {
            std::memset(&b[i], 0, sizeof(BlockQ8_K));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < kQK_K; ++j)
            b[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
        for (int j = 0; j < kQK_K / 16; ++j) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += b[i].qs[16 * j + l];
            b[i].bsums[j] = static_cast<int16_t>(s);
        }
        b[i].d = 1 / iscale;
    }
}

int kernel_index(DType type) {
    for (int i = 0; i < kNumWeightTypes; ++i)
        if (kRef[i].type == type) return i;
    return -1;
}

DType kernel_type_at(int index) { return kRef[index].type; }

void fill_scalar_quant_kernels(QuantKernels* table) {
    for (int i = 0; i < kNumWeightTypes; ++i) {
        const RefFns& r = kRef[i];
        const RefFns& act = ref_fns(r.act);
        table[i] = QuantKernels{r.type, r.act, r.dequant, act.quant, r.dot, nullptr};
    }
    // vec_dot_rows needs the dot as a template argument: one line per type.
    table[0].vec_dot_rows = vec_dot_rows_loop<dot_f32>;
    table[1].vec_dot_rows = vec_dot_rows_loop<dot_f16>;
    table[2].vec_dot_rows = vec_dot_rows_loop<dot_bf16>;
    table[3].vec_dot_rows = vec_dot_rows_loop<dot_q4_0>;
    table[4].vec_dot_rows = vec_dot_rows_loop<dot_q4_1>;
    table[5].vec_dot_rows = vec_dot_rows_loop<dot_q5_0>;
    table[6].vec_dot_rows = vec_dot_rows_loop<dot_q5_1>;
    table[7].vec_dot_rows = vec_dot_rows_loop<dot_q8_0>;
    table[8].vec_dot_rows = vec_dot_rows_loop<dot_q4_k>;
    table[9].vec_dot_rows = vec_dot_rows_loop<dot_q5_k>;
    table[10].vec_dot_rows = vec_dot_rows_loop<dot_q6_k>;
    table[11].vec_dot_rows = vec_dot_rows_loop<dot_q2_k>;
    table[12].vec_dot_rows = vec_dot_rows_loop<dot_q3_k>;
    table[13].vec_dot_rows = vec_dot_rows_loop<dot_iq4_nl>;
    table[14].vec_dot_rows = vec_dot_rows_loop<dot_iq4_xs>;
    table[15].vec_dot_rows = vec_dot_rows_loop<dot_mxfp4>;
    table[16].vec_dot_rows = vec_dot_rows_loop<dot_iq2_xxs>;
    table[17].vec_dot_rows = vec_dot_rows_loop<dot_iq2_xs>;
    table[18].vec_dot_rows = vec_dot_rows_loop<dot_iq2_s>;
    table[19].vec_dot_rows = vec_dot_rows_loop<dot_iq3_xxs>;
    table[20].vec_dot_rows = vec_dot_rows_loop<dot_iq3_s>;
    table[21].vec_dot_rows = vec_dot_rows_loop<dot_iq1_s>;
    table[22].vec_dot_rows = vec_dot_rows_loop<dot_iq1_m>;
}

}  // namespace detail

void dequantize_row_ref(DType type, const void* src, float* dst, int64_t n) {
    ref_fns(type).dequant(src, dst, n);
}

void quantize_row_ref(DType type, const float* src, void* dst, int64_t n) {
    ref_fns(type).quant(src, dst, n);
}

float vec_dot_ref(DType weight_type, int64_t n, const void* w, const void* a) {
    const RefFns& r = ref_fns(weight_type);
    CHECK_MSG(r.dot != nullptr, "not a weight type");
    return r.dot(n, w, a);
}

DType vec_dot_type(DType weight_type) {
    CHECK_MSG(is_weight_type(weight_type), "not a weight type");
    return ref_fns(weight_type).act;
}

bool is_weight_type(DType type) { return detail::kernel_index(type) >= 0; }

}  // namespace ferrox
