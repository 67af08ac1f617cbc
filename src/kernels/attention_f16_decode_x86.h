#pragma once
// Decode attention in 8-lane registers: the grouped dots against K (dots_decode_64, at the end)
// and P·V over the transposed V cache (AttnF16Kernels::pv_decode_t),
// included by attention_f16_avx2.cc (16 registers: one dimension per pass) and
// attention_f16_avx512.cc (32 registers with AVX-512VL: two), which has 16-lane versions of
// both for its common shapes (the same operations per lane; fewer loads) and keeps these for
// the others.
//
// In a block, one dimension's F16 values of 8 consecutive positions are one load; lane l of the
// register holding positions 8m.. is position 8m + l, whose partial row is (8m + l) % 32, so the
// four accumulators a[m % 4] of a (head, dimension) are its 32 partial rows, lane by lane, and
// they see the positions in increasing order: accumulate's fused multiply-adds, the same bits.
// Per pass the accumulators stay in registers over every position; each converted slice of V
// serves every head of the group (up to 3; a lone head takes twice the dimensions), each weight
// vector every dimension of the pass. At the end, x = (a0 + a2) + (a1 + a3) and the lane
// reduction of reduce_decode, 8 dimensions at a time. The bound is the loads (V slices and
// weights), not the multiply-adds. Against the previous kernel (32 partial rows in memory per
// head, V converted per head): 4.9 -> 2.5-2.8 ns per head and position at 128 positions hot,
// 6.5 -> 2.9 cold (tests/model/bench_attention.cc).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention_f16.h"

namespace ferrox::attn_x86 {

inline __m256 load8_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The decode order's lane reduction of x[0..7] (lanes (l, l + 4) added, then (t0 + t1) +
// (t2 + t3)), the 8 results in order in one vector.
inline __m256 reduce_eight(const __m256* x) {
    __m256 t[4];
    for (int i = 0; i < 4; ++i) {
        const __m256 lo = _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x20);  // (x lanes 0-3 | y lanes 0-3)
        const __m256 hi = _mm256_permute2f128_ps(x[2 * i], x[2 * i + 1], 0x31);  // (x lanes 4-7 | y lanes 4-7)
        t[i] = _mm256_add_ps(lo, hi);                                             // (t of x | t of y)
    }
    // Per 128-bit half: (t0 + t1, t2 + t3) of two dots, then their sums: r0 r2 r4 r6 | r1 r3 r5 r7.
    const __m256 h0 = _mm256_hadd_ps(t[0], t[1]), h1 = _mm256_hadd_ps(t[2], t[3]);
    const __m256 r = _mm256_hadd_ps(h0, h1);
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One vector of positions (8k.., k % 4 == M): col at its first position's slot of the pass's
// first dimension (the next dimensions ds elements apart, ds the V tile's width); w[g] + 8k at
// head g's weights of those positions. kMask: the last, partial vector, whose lanes from `keep` on are zeroed on both
// sides (slots not yet written, weights not ours), so they add +0 to rows that are never -0.
template <int kG, int kDD, int M, bool kMask = false>
__attribute__((always_inline)) inline void pv_step(__m256 (&a)[kG][kDD][4], const float* const* w, int i,
                                                   const uint16_t* col, size_t ds, __m256 keep = __m256{}) {
    __m256 v[kDD];
    _Pragma("GCC unroll 4") for (int dd = 0; dd < kDD; ++dd) {
        v[dd] = load8_f16(col + dd * ds);
        if constexpr (kMask) v[dd] = _mm256_and_ps(v[dd], keep);
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < kG; ++g) {
        __m256 pw = _mm256_loadu_ps(w[g] + i);
        if constexpr (kMask) pw = _mm256_and_ps(pw, keep);
        // One load for every dimension of the pass (GCC would fold it into each multiply-add,
        // a load per dimension: the loads, not the multiply-adds, are the bound here).
        if constexpr (kDD > 1) __asm__("" : "+x"(pw));
        _Pragma("GCC unroll 4") for (int dd = 0; dd < kDD; ++dd) a[g][dd][M] = _mm256_fmadd_ps(v[dd], pw, a[g][dd][M]);
    }
}

// Dimensions [d, d + kDD) of kG heads over the vectors k0 .. k0 + n_vec of positions (vector k:
// positions 8k.. at vp[k - k0] + d * ds, the last one partial when rem > 0: its rem first
// lanes): x[g][dd] as above. Every accumulator index is a constant, so they stay in registers.
template <int kG, int kDD>
inline void pv_pass(const float* const* w, const uint16_t* const* vp, int k0, int n_full, int rem, size_t ds, int d,
                    __m256 (&x)[kG][kDD]) {
    __m256 a[kG][kDD][4];
    _Pragma("GCC unroll 4") for (int g = 0; g < kG; ++g)
        _Pragma("GCC unroll 4") for (int dd = 0; dd < kDD; ++dd)
            _Pragma("GCC unroll 4") for (int m = 0; m < 4; ++m) a[g][dd][m] = _mm256_setzero_ps();
    const size_t off = static_cast<size_t>(d) * ds;
    int k = k0;
    const int k_end = k0 + n_full;
#define FERROX_PV_AT(M, kk) pv_step<kG, kDD, M>(a, w, 8 * (kk), vp[(kk) - k0] + off, ds)
    if (k % 4 == 1 && k < k_end) { FERROX_PV_AT(1, k); ++k; }
    if (k % 4 == 2 && k < k_end) { FERROX_PV_AT(2, k); ++k; }
    if (k % 4 == 3 && k < k_end) { FERROX_PV_AT(3, k); ++k; }
    for (; k + 4 <= k_end; k += 4) {
        FERROX_PV_AT(0, k); FERROX_PV_AT(1, k + 1); FERROX_PV_AT(2, k + 2); FERROX_PV_AT(3, k + 3);
    }
    if (k < k_end) { FERROX_PV_AT(0, k); ++k; }
    if (k < k_end) { FERROX_PV_AT(1, k); ++k; }
    if (k < k_end) { FERROX_PV_AT(2, k); ++k; }
#undef FERROX_PV_AT
    if (rem > 0) {
        const __m256 keep = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        const uint16_t* col = vp[k - k0] + off;
        switch (k % 4) {
            case 0: pv_step<kG, kDD, 0, true>(a, w, 8 * k, col, ds, keep); break;
            case 1: pv_step<kG, kDD, 1, true>(a, w, 8 * k, col, ds, keep); break;
            case 2: pv_step<kG, kDD, 2, true>(a, w, 8 * k, col, ds, keep); break;
            default: pv_step<kG, kDD, 3, true>(a, w, 8 * k, col, ds, keep); break;
        }
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < kG; ++g)
        _Pragma("GCC unroll 4") for (int dd = 0; dd < kDD; ++dd) x[g][dd] =
            _mm256_add_ps(_mm256_add_ps(a[g][dd][0], a[g][dd][2]), _mm256_add_ps(a[g][dd][1], a[g][dd][3]));
}

// kG heads, every dimension (n % 8 == 0), 8 at a time into reduce_eight.
template <int kG, int kDD>
void pv_heads(const float* const* w, const uint16_t* const* vp, int k0, int n_full, int rem, size_t ds, float* const* out,
              int n) {
    static_assert(8 % kDD == 0);
    for (int d8 = 0; d8 < n; d8 += 8) {
        __m256 xs[kG][8];
        for (int dd0 = 0; dd0 < 8; dd0 += kDD) {
            __m256 x[kG][kDD];
            pv_pass<kG, kDD>(w, vp, k0, n_full, rem, ds, d8 + dd0, x);
            for (int g = 0; g < kG; ++g)
                for (int dd = 0; dd < kDD; ++dd) xs[g][dd0 + dd] = x[g][dd];
        }
        for (int g = 0; g < kG; ++g) _mm256_storeu_ps(out[g] + d8, reduce_eight(xs[g]));
    }
}

template <int kG, int kDD>
void pv_some_heads(int ng, const float* const* w, const uint16_t* const* vp, int k0, int n_full, int rem, size_t ds,
                   float* const* out, int n) {
    if constexpr (kG > 1) {
        if (ng < kG) return pv_some_heads<kG - 1, kDD>(ng, w, vp, k0, n_full, rem, ds, out, n);
    }
    if constexpr (kG == 1) {
        // One head: the registers of the others take more dimensions (fewer weight loads).
        pv_heads<1, 2 * kDD>(w, vp, k0, n_full, rem, ds, out, n);
    } else {
        pv_heads<kG, kDD>(w, vp, k0, n_full, rem, ds, out, n);
    }
}

// AttnF16Kernels::pv_decode_t, kG heads at a time; false (nothing done) unless the V tiles are
// as wide as a block or 8 slots or more (bs % 8 == 0) and n % 8 == 0.
template <int kG, int kDD>
bool pv_decode_t(const float* p, int p_stride, int n_q, const uint16_t* const* blocks, int bs, int p_begin, int p_end,
                 float* const* out, int n) {
    const int tile = kv_v_tile(bs);
    if (tile % 8 != 0 || n % 8 != 0) return false;
    // Each vector's tile, once for every pass.
    const int k0 = p_begin / 8, n_full = (p_end - p_begin) / 8, rem = (p_end - p_begin) % 8;
    thread_local std::vector<const uint16_t*> vp_store;
    vp_store.resize(static_cast<size_t>(n_full) + 1);
    const uint16_t** vp = vp_store.data();
    for (int k = 0; k < n_full + (rem > 0 ? 1 : 0); ++k) {
        const int i = p_begin + 8 * k;
        vp[k] = blocks[(i - p_begin) / bs] + kv_v_offset(bs, n, i % bs, 0);
    }
    for (int g0 = 0; g0 < n_q; g0 += kG) {
        const int ng = std::min(kG, n_q - g0);
        const float* w[kG];
        for (int g = 0; g < ng; ++g) w[g] = p + static_cast<size_t>(g0 + g) * p_stride;
        pv_some_heads<kG, kDD>(ng, w, vp, k0, n_full, rem, static_cast<size_t>(tile), out + g0, n);
    }
    return true;
}

// The decode order's reduction of one x = (a0 + a2) + (a1 + a3): lanes (l, l + 4) added, then
// (t0 + t1) + (t2 + t3).
inline float reduce_one(__m256 x) {
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 h = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

// x of dot_decode for query q (64 floats) against a converted row k[0..8): a_j over elements
// 8j.. and 32 + 8j.. (from +0, as dot_decode's first multiply-add), x = (a0 + a2) + (a1 + a3).
__attribute__((always_inline)) inline __m256 dot_x(const __m256 (&k)[8], const float* q) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 a0 = _mm256_fmadd_ps(k[4], _mm256_loadu_ps(q + 32), _mm256_fmadd_ps(k[0], _mm256_loadu_ps(q), zero));
    const __m256 a1 = _mm256_fmadd_ps(k[5], _mm256_loadu_ps(q + 40), _mm256_fmadd_ps(k[1], _mm256_loadu_ps(q + 8), zero));
    const __m256 a2 = _mm256_fmadd_ps(k[6], _mm256_loadu_ps(q + 48), _mm256_fmadd_ps(k[2], _mm256_loadu_ps(q + 16), zero));
    const __m256 a3 = _mm256_fmadd_ps(k[7], _mm256_loadu_ps(q + 56), _mm256_fmadd_ps(k[3], _mm256_loadu_ps(q + 24), zero));
    return _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
}

// AttnF16Kernels::dots_decode_group for a head size of 64 in 8-lane registers: per row of K,
// converted once, kG heads' dots; 8 rows' x of a head reduced together (reduce_eight).
template <int kG>
void dots_decode_64(const float* q, int n_q, const uint16_t* k, int stride, int count, float scale, float* out,
                    int out_stride) {
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int g0 = 0; g0 < n_q; g0 += kG) {
        const int ng = std::min(kG, n_q - g0);
        const float* qg = q + static_cast<size_t>(g0) * 64;
        float* og = out + static_cast<size_t>(g0) * out_stride;
        int j0 = 0;
        for (; j0 + 8 <= count; j0 += 8) {
            __m256 x[kG][8];
            for (int j = 0; j < 8; ++j) {
                const uint16_t* kr = k + static_cast<size_t>(j0 + j) * stride;
                __m256 kv[8];
                _Pragma("GCC unroll 8") for (int i = 0; i < 8; ++i) kv[i] = load8_f16(kr + 8 * i);
                _Pragma("GCC unroll 4") for (int g = 0; g < kG; ++g) {
                    if (g < ng) x[g][j] = dot_x(kv, qg + g * 64);
                }
            }
            for (int g = 0; g < ng; ++g) {
                _mm256_storeu_ps(og + static_cast<size_t>(g) * out_stride + j0, _mm256_mul_ps(reduce_eight(x[g]), vscale));
            }
        }
        for (int j = j0; j < count; ++j) {
            const uint16_t* kr = k + static_cast<size_t>(j) * stride;
            __m256 kv[8];
            for (int i = 0; i < 8; ++i) kv[i] = load8_f16(kr + 8 * i);
            for (int g = 0; g < ng; ++g) og[static_cast<size_t>(g) * out_stride + j] = reduce_one(dot_x(kv, qg + g * 64)) * scale;
        }
    }
}

// AttnF16Kernels::gather_vt: runs of 8 positions whose slots are consecutive (one block's) are
// one load per dimension; others element by element.
inline void gather_vt(const uint16_t* const* cols, int dstride, int count, int n, float* vt, int ld) {
    const int padded = std::min(ld, (count + 7) / 8 * 8);
    for (int j = 0; j < padded; j += 8) {
        const bool run = j + 8 <= count && cols[j + 7] == cols[j] + 7;
        for (int d = 0; d < n; ++d) {
            float* o = vt + static_cast<size_t>(d) * ld + j;
            if (run) {
                _mm256_storeu_ps(o, load8_f16(cols[j] + static_cast<size_t>(d) * dstride));
            } else {
                for (int l = 0; l < 8 && j + l < padded; ++l) {
                    o[l] = j + l < count ? _cvtsh_ss(cols[j + l][static_cast<size_t>(d) * dstride]) : 0.0f;
                }
            }
        }
    }
}

}  // namespace ferrox::attn_x86
