// Compiled with -mavx2 -mfma -mf16c; called only after a CPUID check. Same orders as the
// scalar versions in attention_f16.cc (see attention_f16.h).
#include <immintrin.h>

#include <algorithm>

#include "kernels/attention_f16.h"
#include "kernels/attention_f16_decode_x86.h"

namespace ferrox {

namespace {

inline __m256 load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }

__attribute__((always_inline)) inline float dot_decode_avx2(const float* q, const uint16_t* k, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16(k + i), _mm256_loadu_ps(q + i), a0);
        a1 = _mm256_fmadd_ps(load_f16(k + i + 8), _mm256_loadu_ps(q + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16(k + i + 16), _mm256_loadu_ps(q + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16(k + i + 24), _mm256_loadu_ps(q + i + 24), a3);
    }
    const __m256 x = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 h = _mm_hadd_ps(t, t);
    double s = _mm_cvtss_f32(_mm_hadd_ps(h, h));
    for (; i < n; ++i) s += static_cast<double>(f16_scalar(k[i]) * q[i]);
    return static_cast<float>(s);
}

inline float hsum_tiny(__m256 x) {
    __m128 t = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

__attribute__((always_inline)) inline float dot_prefill_avx2(const float* q, const uint16_t* k, int n) {
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i + 8 <= n; i += 8) a = _mm256_fmadd_ps(load_f16(k + i), _mm256_loadu_ps(q + i), a);
    return hsum_tiny(a);
}

__attribute__((always_inline)) inline void accumulate_avx2(float p, const uint16_t* v, float* acc, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(load_f16(v + i), pv, _mm256_loadu_ps(acc + i)));
    for (; i < n; ++i)
        acc[i] = _mm_cvtss_f32(
            _mm_fmadd_ss(_mm_set_ss(f16_scalar(v[i])), _mm_set_ss(p), _mm_set_ss(acc[i])));
}

// Partial rows are indexed by position residue; the reductions work on 8 dimensions at once,
// each lane doing exactly the scalar order of attention_f16.cc.
void reduce_decode_avx2(const float* acc, float* out, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 x[8];
        for (int l = 0; l < 8; ++l) {
            const __m256 a0 = _mm256_loadu_ps(acc + (0 + l) * n + d);
            const __m256 a1 = _mm256_loadu_ps(acc + (8 + l) * n + d);
            const __m256 a2 = _mm256_loadu_ps(acc + (16 + l) * n + d);
            const __m256 a3 = _mm256_loadu_ps(acc + (24 + l) * n + d);
            x[l] = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
        }
        const __m256 t0 = _mm256_add_ps(x[0], x[4]), t1 = _mm256_add_ps(x[1], x[5]);
        const __m256 t2 = _mm256_add_ps(x[2], x[6]), t3 = _mm256_add_ps(x[3], x[7]);
        _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));
    }
    for (; d < n; ++d) {
        float x[8];
        for (int l = 0; l < 8; ++l)
            x[l] = (acc[l * n + d] + acc[(16 + l) * n + d]) + (acc[(8 + l) * n + d] + acc[(24 + l) * n + d]);
        out[d] = ((x[0] + x[4]) + (x[1] + x[5])) + ((x[2] + x[6]) + (x[3] + x[7]));
    }
}

void reduce_prefill_avx2(const float* acc, float* out, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        const __m256 t0 = _mm256_add_ps(_mm256_loadu_ps(acc + 0 * n + d), _mm256_loadu_ps(acc + 4 * n + d));
        const __m256 t1 = _mm256_add_ps(_mm256_loadu_ps(acc + 1 * n + d), _mm256_loadu_ps(acc + 5 * n + d));
        const __m256 t2 = _mm256_add_ps(_mm256_loadu_ps(acc + 2 * n + d), _mm256_loadu_ps(acc + 6 * n + d));
        const __m256 t3 = _mm256_add_ps(_mm256_loadu_ps(acc + 3 * n + d), _mm256_loadu_ps(acc + 7 * n + d));
        _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3)));
    }
    for (; d < n; ++d) {
        out[d] = ((acc[0 * n + d] + acc[4 * n + d]) + (acc[2 * n + d] + acc[6 * n + d])) +
                 ((acc[1 * n + d] + acc[5 * n + d]) + (acc[3 * n + d] + acc[7 * n + d]));
    }
}

void to_f16_avx2(const float* x, uint16_t* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
    }
    for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// F16C rounds to nearest even, as fp32_to_fp16 does.
inline float round_f16(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }

void round_f16_row_avx2(const float* x, float* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; ++i) y[i] = round_f16(x[i]);
}

// See AttnF16Kernels::accumulate_t. Per 8 dimensions, their 8 partial-row vectors (one lane per
// partial row) stay in registers over the chunk; per 8 positions, one vector of their weights
// (rounded to F16) and a multiply-add per dimension. The last partial group updates only its
// lanes (a blend keeps the others, whatever the transposed columns past `count` hold).
void accumulate_t_avx2(const float* p, const float* vt, int ld, int count, float* acc_t, int n) {
    constexpr int kMaxChunk = 256;
    if (n % 8 != 0 || count > kMaxChunk) {
        attn_accumulate_t<round_f16>(p, vt, ld, count, acc_t, n);
        return;
    }
    alignas(32) float pr[kMaxChunk + 8];
    round_f16_row_avx2(p, pr, count);
    const int full = count / 8 * 8, rem = count - full;
    for (int j = count; j < full + 8; ++j) pr[j] = 0.0f;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 keep_new = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(rem), lane));
    for (int d = 0; d < n; d += 8) {
        float* a = acc_t + d * 8;
        const float* v = vt + static_cast<size_t>(d) * ld;
        __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8), a2 = _mm256_loadu_ps(a + 16);
        __m256 a3 = _mm256_loadu_ps(a + 24), a4 = _mm256_loadu_ps(a + 32), a5 = _mm256_loadu_ps(a + 40);
        __m256 a6 = _mm256_loadu_ps(a + 48), a7 = _mm256_loadu_ps(a + 56);
#define FERROX_PVT(acc, i) acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + (i) * static_cast<size_t>(ld) + k), pv, acc)
        for (int k = 0; k < full; k += 8) {
            const __m256 pv = _mm256_load_ps(pr + k);
            FERROX_PVT(a0, 0); FERROX_PVT(a1, 1); FERROX_PVT(a2, 2); FERROX_PVT(a3, 3);
            FERROX_PVT(a4, 4); FERROX_PVT(a5, 5); FERROX_PVT(a6, 6); FERROX_PVT(a7, 7);
        }
#undef FERROX_PVT
        if (rem > 0) {
            const int k = full;
            const __m256 pv = _mm256_load_ps(pr + k);
#define FERROX_PVT(acc, i) \
    acc = _mm256_blendv_ps(acc, _mm256_fmadd_ps(_mm256_loadu_ps(v + (i) * static_cast<size_t>(ld) + k), pv, acc), keep_new)
            FERROX_PVT(a0, 0); FERROX_PVT(a1, 1); FERROX_PVT(a2, 2); FERROX_PVT(a3, 3);
            FERROX_PVT(a4, 4); FERROX_PVT(a5, 5); FERROX_PVT(a6, 6); FERROX_PVT(a7, 7);
#undef FERROX_PVT
        }
        _mm256_storeu_ps(a, a0); _mm256_storeu_ps(a + 8, a1); _mm256_storeu_ps(a + 16, a2);
        _mm256_storeu_ps(a + 24, a3); _mm256_storeu_ps(a + 32, a4); _mm256_storeu_ps(a + 40, a5);
        _mm256_storeu_ps(a + 48, a6); _mm256_storeu_ps(a + 56, a7);
    }
}

void gather_vt_avx2(const uint16_t* const* cols, int dstride, int count, int n, float* vt, int ld) {
    attn_x86::gather_vt(cols, dstride, count, n, vt, ld);
}

// Per dimension, the 8 partial rows are one vector: the prefill pairing (l0 + l4, l1 + l5, ...),
// then (t0 + t2) + (t1 + t3), as hsum_tiny does.
void reduce_prefill_t_avx2(const float* acc_t, float* out, int n) {
    for (int d = 0; d < n; ++d) {
        const __m256 x = _mm256_loadu_ps(acc_t + d * 8);
        const __m128 t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));  // t0 t1 t2 t3
        const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));                                 // t0+t2, t1+t3
        out[d] = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
    }
}

// Grouped-query prefill dots. For a head size of 64 the cache row stays in 8 registers while
// every head of the group takes its dot (dot_prefill_avx2's one accumulator, in its order);
// the OoO core overlaps the heads' independent chains.
void dots_prefill_group_avx2(const float* q, int n_q, const uint16_t* k, int stride, int count, int n, float scale,
                             float* out, int out_stride) {
    if (n != 64) {
        attn_dots_prefill_group<dot_prefill_avx2>(q, n_q, k, stride, count, n, scale, out, out_stride);
        return;
    }
    for (int j = 0; j < count; ++j) {
        const uint16_t* kr = k + static_cast<size_t>(j) * stride;
        const __m256 k0 = load_f16(kr), k1 = load_f16(kr + 8), k2 = load_f16(kr + 16), k3 = load_f16(kr + 24);
        const __m256 k4 = load_f16(kr + 32), k5 = load_f16(kr + 40), k6 = load_f16(kr + 48), k7 = load_f16(kr + 56);
        for (int g = 0; g < n_q; ++g) {
            const float* qg = q + g * 64;
            __m256 a = _mm256_fmadd_ps(k0, _mm256_loadu_ps(qg), _mm256_setzero_ps());
            a = _mm256_fmadd_ps(k1, _mm256_loadu_ps(qg + 8), a);
            a = _mm256_fmadd_ps(k2, _mm256_loadu_ps(qg + 16), a);
            a = _mm256_fmadd_ps(k3, _mm256_loadu_ps(qg + 24), a);
            a = _mm256_fmadd_ps(k4, _mm256_loadu_ps(qg + 32), a);
            a = _mm256_fmadd_ps(k5, _mm256_loadu_ps(qg + 40), a);
            a = _mm256_fmadd_ps(k6, _mm256_loadu_ps(qg + 48), a);
            a = _mm256_fmadd_ps(k7, _mm256_loadu_ps(qg + 56), a);
            out[g * out_stride + j] = hsum_tiny(a) * scale;
        }
    }
}

// Grouped-query decode dots; head size 64: attention_f16_decode_x86.h (8 rows of a head reduced
// together instead of a horizontal add chain per dot: 5-15 % faster than that).
void dots_decode_group_avx2(const float* q, int n_q, const uint16_t* k, int stride, int count, int n, float scale,
                            float* out, int out_stride) {
    if (n != 64) {
        attn_dots_decode_group<dot_decode_avx2>(q, n_q, k, stride, count, n, scale, out, out_stride);
        return;
    }
    attn_x86::dots_decode_64<3>(q, n_q, k, stride, count, scale, out, out_stride);
}

// See attention_f16_decode_x86.h: three heads and one dimension per pass (12 accumulators).
void pv_decode_t_avx2(const float* p, int p_stride, int n_q, const uint16_t* const* blocks, int bs, int p_begin,
                      int p_end, float* const* out, int n) {
    if (!attn_x86::pv_decode_t<3, 1>(p, p_stride, n_q, blocks, bs, p_begin, p_end, out, n)) {
        attn_pv_decode_t_generic(p, p_stride, n_q, blocks, bs, p_begin, p_end, out, n);
    }
}

}  // namespace

const AttnF16Kernels* attn_f16_kernels_avx2() {
    static const AttnF16Kernels k{dot_decode_avx2,
                                  dot_prefill_avx2,
                                  accumulate_avx2,
                                  reduce_decode_avx2,
                                  reduce_prefill_avx2,
                                  to_f16_avx2,
                                  round_f16_row_avx2,
                                  attn_dots_run<dot_decode_avx2, dot_prefill_avx2>,
                                  attn_accumulate_run<accumulate_avx2, round_f16>,
                                  accumulate_t_avx2,
                                  gather_vt_avx2,
                                  reduce_prefill_t_avx2,
                                  dots_prefill_group_avx2,
                                  dots_decode_group_avx2,
                                  pv_decode_t_avx2};
    return &k;
}

}  // namespace ferrox
