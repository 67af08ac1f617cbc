// Compiled with AVX-512 F/VL/DQ/BW (+FMA, F16C); called only where the kernels' ISA is avx512
// (kernels_isa_name(): CPUID, or FERROX_KERNELS_ISA). The prompt dots with 16-lane registers,
// each lane's operations exactly those of the AVX2 kernel (attention_f16_avx2.cc), so every
// head keeps its bits; the decode dots (head size 64) and P·V (V tiles of 16 slots or more)
// in 16-lane registers as well, with the queries or the accumulators held in registers (an
// earlier 16-lane decode dot that reloaded its queries per row was 15 % slower than the 8-lane
// one; these are faster: see dots_heads_64 and pv16_step), else attention_f16_decode_x86.h's
// 8-lane kernels compiled with AVX-512VL's 32 registers; the other entries of the table are
// the AVX2 ones.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/attention_f16.h"
#include "kernels/attention_f16_decode_x86.h"

namespace ferrox {

const AttnF16Kernels* attn_f16_kernels_avx2();

namespace {

// Prompt dots (AttnF16Kernels::dots_prefill_group), head size 64: two queries per register,
// four pairs at a time (pp2048 on the default model, with the padded score rows: 833 -> 847-895).
// The AVX2 kernel keeps one 8-lane accumulator per query over the elements 8s + lane; here
// queries 2i and 2i + 1 share a 16-lane register, their elements 8s..8s + 7 side by side (laid
// out once per call), against the cache row's 8 elements converted into both halves, so each
// multiply-add serves two dots with each lane's operations unchanged. The reduction is the AVX2
// one on both halves at once: lanes (l, l + 4) added, then (t0 + t2) + (t1 + t3) (an addition's
// operands swapped give the same bits).
void dots_prefill_group_avx512(const float* q, int n_q, const uint16_t* k, int stride, int count, int n, float scale,
                               float* out, int out_stride) {
    constexpr int kMaxHeads = 32;  // kAttnQueries
    if (n != 64 || n_q > kMaxHeads) {
        attn_f16_kernels_avx2()->dots_prefill_group(q, n_q, k, stride, count, n, scale, out, out_stride);
        return;
    }
    const int n_pairs = (n_q + 1) / 2;
    alignas(64) float qp[kMaxHeads / 2][8][16];  // [pair][s]: (query 2i elements 8s.. | query 2i + 1's)
    for (int i = 0; i < n_pairs; ++i) {
        for (int s = 0; s < 8; ++s) {
            const __m256 lo = _mm256_loadu_ps(q + (2 * i) * 64 + 8 * s);
            const __m256 hi = 2 * i + 1 < n_q ? _mm256_loadu_ps(q + (2 * i + 1) * 64 + 8 * s) : _mm256_setzero_ps();
            _mm512_store_ps(qp[i][s], _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
        }
    }
    const __m512 vscale = _mm512_set1_ps(scale);
    // The dots of pair i for cache row ks: each query's one multiply-add chain, then the
    // reduction, stored.
    const auto finish = [&](__m512 a, int i, int j) {
        // Per half: t = lanes (l, l + 4) added (the 128-bit quarters swapped), then
        // (t0 + t2) + (t1 + t3); the dots land in lanes 0 and 8.
        const __m512 t = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
        const __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
        const __m512 r = _mm512_mul_ps(_mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1))), vscale);
        out[static_cast<size_t>(2 * i) * out_stride + j] = _mm512_cvtss_f32(r);
        if (2 * i + 1 < n_q) out[static_cast<size_t>(2 * i + 1) * out_stride + j] = _mm_cvtss_f32(_mm512_extractf32x4_ps(r, 2));
    };
    for (int j = 0; j < count; ++j) {
        const uint16_t* kr = k + static_cast<size_t>(j) * stride;
        __m512 ks[8];
        _Pragma("GCC unroll 8") for (int s = 0; s < 8; ++s) {
            const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kr + 8 * s));
            ks[s] = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(h));  // elements 8s.. in both halves
        }
        int i = 0;
        for (; i + 4 <= n_pairs; i += 4) {  // four independent chains in flight
            __m512 a[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; ++c) a[c] = _mm512_fmadd_ps(ks[0], _mm512_load_ps(qp[i + c][0]), _mm512_setzero_ps());
            _Pragma("GCC unroll 8") for (int s = 1; s < 8; ++s) {
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; ++c) a[c] = _mm512_fmadd_ps(ks[s], _mm512_load_ps(qp[i + c][s]), a[c]);
            }
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; ++c) finish(a[c], i + c, j);
        }
        for (; i < n_pairs; ++i) {
            __m512 a = _mm512_fmadd_ps(ks[0], _mm512_load_ps(qp[i][0]), _mm512_setzero_ps());
            _Pragma("GCC unroll 8") for (int s = 1; s < 8; ++s) a = _mm512_fmadd_ps(ks[s], _mm512_load_ps(qp[i][s]), a);
            finish(a, i, j);
        }
    }
}

// The decode order's lane reduction (attn_x86::reduce_eight) of four dots' x, in order in one
// vector.
inline __m128 reduce_four(__m256 x0, __m256 x1, __m256 x2, __m256 x3) {
    const __m256 t01 = _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31));
    const __m256 t23 = _mm256_add_ps(_mm256_permute2f128_ps(x2, x3, 0x20), _mm256_permute2f128_ps(x2, x3, 0x31));
    const __m256 r = _mm256_hadd_ps(_mm256_hadd_ps(t01, t23), _mm256_hadd_ps(t01, t23));  // r0 r2 . . | r1 r3 . .
    return _mm_unpacklo_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
}

// The decode order's reduction of sixteen rows' dots at once, each step one operation for all
// of them where reduce_four takes one per four rows. A row's s = (a0 + a2 | a1 + a3) (the
// 16-lane accumulators below); per row the operations stay those of attn_x86::reduce_one on
// x = (a0 + a2) + (a1 + a3): t = (lanes 0-3 of x) + (lanes 4-7), then (t0 + t1) + (t2 + t3).
//   pair_x(s_j, s_k)      = (x_j | x_k): the A halves of both against the B halves;
//   quarter_t(X_jk, X_lm) = (t_j | t_k | t_l | t_m), each a 128-bit quarter;
//   pair_sums(T, T')      = per quarter c, (t0 + t1, t2 + t3) of T's quarter c then T''s;
// applied to the t of rows 0-3 and 4-7 (and 8-11, 12-15), then to those two results, which
// leaves (t0 + t1) + (t2 + t3) of row c + 4i in lane 4c + i.
inline __m512 pair_x(__m512 s0, __m512 s1) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, 0x44), _mm512_shuffle_f32x4(s0, s1, 0xEE));
}
inline __m512 quarter_t(__m512 x01, __m512 x23) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x01, x23, 0x88), _mm512_shuffle_f32x4(x01, x23, 0xDD));
}
inline __m512 pair_sums(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
}

// Decode dots of NG heads (head size 64) against count rows of K. The 8-lane kernel
// (attn_x86::dots_decode_64) reads its queries from memory for every row: 24 loads a row for
// three heads, on top of the row's 8, and the loads were its bound. Here the heads' queries stay
// in 12 registers for the whole block and a row is 4 loads. Each 16-lane register holds two of
// the 8-lane kernel's accumulators side by side, so every lane sees the same operations: with
// k_i = row elements 16i.., a01 = k2 * q[32..48) + (k0 * q[0..16) + 0) is (a0 | a1), a23 the
// same over k1, k3 is (a2 | a3), and x = the halves of a01 + a23 added, (a0 + a2) + (a1 + a3).
// Four rows' x per head are reduced together (12 of the 32 registers).
template <int NG>
void dots_heads_64(const float* q, const uint16_t* k, int stride, int count, float scale, float* out,
                   int out_stride) {
    __m512 qv[NG][4];
    _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g)
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) qv[g][i] = _mm512_loadu_ps(q + g * 64 + 16 * i);
    const __m512 zero = _mm512_setzero_ps();
    // (a0 + a2 | a1 + a3) of head g against a converted row.
    const auto row16 = [&](int g, const __m512 (&kv)[4]) __attribute__((always_inline)) {
        const __m512 a01 = _mm512_fmadd_ps(kv[2], qv[g][2], _mm512_fmadd_ps(kv[0], qv[g][0], zero));
        const __m512 a23 = _mm512_fmadd_ps(kv[3], qv[g][3], _mm512_fmadd_ps(kv[1], qv[g][1], zero));
        return _mm512_add_ps(a01, a23);
    };
    // Its x, (a0 + a2) + (a1 + a3).
    const auto row = [&](const uint16_t* kr, int g, const __m512 (&kv)[4]) __attribute__((always_inline)) {
        const __m512 s = row16(g, kv);
        (void)kr;
        return _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    };
    const auto load_row = [&](const uint16_t* kr, __m512 (&kv)[4]) __attribute__((always_inline)) {
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i)
            kv[i] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr + 16 * i)));
    };
    const __m128 vscale = _mm_set1_ps(scale);
    int j0 = 0;
    // Sixteen rows at a time, their reductions done together (sixteen_rows below).
    const __m512 vscale16 = _mm512_set1_ps(scale);
    const __m512i order16 = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (; j0 + 16 <= count; j0 += 16) {
        __m512 h[2][NG];
        _Pragma("GCC unroll 2") for (int half = 0; half < 2; ++half) {
            __m512 t[2][NG];
            _Pragma("GCC unroll 2") for (int qd = 0; qd < 2; ++qd) {
                __m512 x[2][NG];
                _Pragma("GCC unroll 2") for (int pr = 0; pr < 2; ++pr) {
                    const int j = j0 + 8 * half + 4 * qd + 2 * pr;
                    __m512 kv[4], s0[NG];
                    load_row(k + static_cast<size_t>(j) * stride, kv);
                    _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) s0[g] = row16(g, kv);
                    load_row(k + static_cast<size_t>(j + 1) * stride, kv);
                    _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) x[pr][g] = pair_x(s0[g], row16(g, kv));
                }
                _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) t[qd][g] = quarter_t(x[0][g], x[1][g]);
            }
            _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) h[half][g] = pair_sums(t[0][g], t[1][g]);
        }
        _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) {
            const __m512 r = _mm512_permutexvar_ps(order16, pair_sums(h[0][g], h[1][g]));
            _mm512_storeu_ps(out + static_cast<size_t>(g) * out_stride + j0, _mm512_mul_ps(r, vscale16));
        }
    }
    for (; j0 + 4 <= count; j0 += 4) {
        __m256 x[NG][4];
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) {
            const uint16_t* kr = k + static_cast<size_t>(j0 + j) * stride;
            __m512 kv[4];
            load_row(kr, kv);
            _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) x[g][j] = row(kr, g, kv);
        }
        _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) {
            _mm_storeu_ps(out + static_cast<size_t>(g) * out_stride + j0,
                          _mm_mul_ps(reduce_four(x[g][0], x[g][1], x[g][2], x[g][3]), vscale));
        }
    }
    for (int j = j0; j < count; ++j) {
        const uint16_t* kr = k + static_cast<size_t>(j) * stride;
        __m512 kv[4];
        load_row(kr, kv);
        _Pragma("GCC unroll 4") for (int g = 0; g < NG; ++g) {
            out[static_cast<size_t>(g) * out_stride + j] = attn_x86::reduce_one(row(kr, g, kv)) * scale;
        }
    }
}

void dots_decode_group_avx512(const float* q, int n_q, const uint16_t* k, int stride, int count, int n, float scale,
                              float* out, int out_stride) {
    if (n != 64) {
        attn_f16_kernels_avx2()->dots_decode_group(q, n_q, k, stride, count, n, scale, out, out_stride);
        return;
    }
    for (int g0 = 0; g0 < n_q; g0 += 3) {
        const float* qg = q + static_cast<size_t>(g0) * 64;
        float* og = out + static_cast<size_t>(g0) * out_stride;
        switch (std::min(3, n_q - g0)) {
            case 1: dots_heads_64<1>(qg, k, stride, count, scale, og, out_stride); break;
            case 2: dots_heads_64<2>(qg, k, stride, count, scale, og, out_stride); break;
            default: dots_heads_64<3>(qg, k, stride, count, scale, og, out_stride); break;
        }
    }
}

// Decode P·V in 16-lane registers. The 8-lane kernel (attention_f16_decode_x86.h) keeps a
// (head, dimension)'s 32 partial rows in four accumulators a[k % 4] (vector k: positions 8k..);
// here positions 16K.. are one vector, whose lanes are those of vectors 2K and 2K + 1 side by
// side, so A[K % 2] = (a[2 (K % 2)] | a[2 (K % 2) + 1]) and every lane sees the same positions
// in the same order. At the end A0 + A1 = (a0 + a2 | a1 + a3) and its halves added are the
// 8-lane kernel's x, reduced as there (reduce_eight). Three heads by four dimensions per pass
// (24 accumulators): half the passes, V slices and weight loads of the 8-lane kernel, whose
// fixed cost per pass made up much of a short context's time.
template <int kG, int kDD, int M, bool kMask = false>
__attribute__((always_inline)) inline void pv16_step(__m512 (&a)[kG][kDD][2], const float* const* w, int i,
                                                     const uint16_t* col, size_t ds, __mmask16 keep = 0) {
    __m512 v[kDD];
    _Pragma("GCC unroll 8") for (int dd = 0; dd < kDD; ++dd) {
        const uint16_t* c = col + dd * ds;
        // The last, partial vector: its lanes from the end on are zero on both sides (slots
        // not yet written, weights not ours), so they add +0 to rows that are never -0.
        v[dd] = _mm512_cvtph_ps(kMask ? _mm256_maskz_loadu_epi16(keep, c)
                                      : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < kG; ++g) {
        __m512 pw = kMask ? _mm512_maskz_loadu_ps(keep, w[g] + i) : _mm512_loadu_ps(w[g] + i);
        if constexpr (kDD > 1) __asm__("" : "+v"(pw));  // one load for the pass's dimensions
        _Pragma("GCC unroll 8") for (int dd = 0; dd < kDD; ++dd) a[g][dd][M] = _mm512_fmadd_ps(v[dd], pw, a[g][dd][M]);
    }
}

// Dimensions [d, d + kDD) of kG heads over the vectors k0 .. k0 + n_full (vector k: positions
// 16k.. at vp[k - k0] + d * ds), then the first rem lanes of the next: x[g][dd].
template <int kG, int kDD>
inline void pv16_pass(const float* const* w, const uint16_t* const* vp, int k0, int n_full, int rem, size_t ds, int d,
                      __m256 (&x)[kG][kDD]) {
    __m512 a[kG][kDD][2];
    _Pragma("GCC unroll 4") for (int g = 0; g < kG; ++g)
        _Pragma("GCC unroll 8") for (int dd = 0; dd < kDD; ++dd) a[g][dd][0] = a[g][dd][1] = _mm512_setzero_ps();
    const size_t off = static_cast<size_t>(d) * ds;
    int k = k0;
    const int k_end = k0 + n_full;
    if (k % 2 == 1 && k < k_end) {
        pv16_step<kG, kDD, 1>(a, w, 16 * k, vp[k - k0] + off, ds);
        ++k;
    }
    for (; k + 2 <= k_end; k += 2) {
        pv16_step<kG, kDD, 0>(a, w, 16 * k, vp[k - k0] + off, ds);
        pv16_step<kG, kDD, 1>(a, w, 16 * (k + 1), vp[k + 1 - k0] + off, ds);
    }
    if (k < k_end) {
        pv16_step<kG, kDD, 0>(a, w, 16 * k, vp[k - k0] + off, ds);
        ++k;
    }
    if (rem > 0) {
        const auto keep = static_cast<__mmask16>((1u << rem) - 1);
        if (k % 2 == 0) {
            pv16_step<kG, kDD, 0, true>(a, w, 16 * k, vp[k - k0] + off, ds, keep);
        } else {
            pv16_step<kG, kDD, 1, true>(a, w, 16 * k, vp[k - k0] + off, ds, keep);
        }
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < kG; ++g) {
        _Pragma("GCC unroll 8") for (int dd = 0; dd < kDD; ++dd) {
            const __m512 s = _mm512_add_ps(a[g][dd][0], a[g][dd][1]);
            x[g][dd] = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
        }
    }
}

// kG heads, every dimension (n % 8 == 0), 8 at a time into reduce_eight.
template <int kG, int kDD>
void pv16_heads(const float* const* w, const uint16_t* const* vp, int k0, int n_full, int rem, size_t ds,
                float* const* out, int n) {
    static_assert(8 % kDD == 0);
    for (int d8 = 0; d8 < n; d8 += 8) {
        __m256 xs[kG][8];
        for (int dd0 = 0; dd0 < 8; dd0 += kDD) {
            __m256 x[kG][kDD];
            pv16_pass<kG, kDD>(w, vp, k0, n_full, rem, ds, d8 + dd0, x);
            for (int g = 0; g < kG; ++g)
                for (int dd = 0; dd < kDD; ++dd) xs[g][dd0 + dd] = x[g][dd];
        }
        for (int g = 0; g < kG; ++g) _mm256_storeu_ps(out[g] + d8, attn_x86::reduce_eight(xs[g]));
    }
}

// AttnF16Kernels::pv_decode_t: false (nothing done) unless the V tiles hold 16 slots or a
// multiple (bs % 16 == 0) and n % 8 == 0.
bool pv16_decode_t(const float* p, int p_stride, int n_q, const uint16_t* const* blocks, int bs, int p_begin,
                   int p_end, float* const* out, int n) {
    const int tile = kv_v_tile(bs);
    if (tile % 16 != 0 || n % 8 != 0) return false;
    const int k0 = p_begin / 16, n_full = (p_end - p_begin) / 16, rem = (p_end - p_begin) % 16;
    thread_local std::vector<const uint16_t*> vp_store;
    vp_store.resize(static_cast<size_t>(n_full) + 1);
    const uint16_t** vp = vp_store.data();
    for (int k = 0; k < n_full + (rem > 0 ? 1 : 0); ++k) {
        const int i = p_begin + 16 * k;
        vp[k] = blocks[(i - p_begin) / bs] + kv_v_offset(bs, n, i % bs, 0);
    }
    const auto ds = static_cast<size_t>(tile);
    for (int g0 = 0; g0 < n_q; g0 += 3) {
        const float* w[3];
        const int ng = std::min(3, n_q - g0);
        for (int g = 0; g < ng; ++g) w[g] = p + static_cast<size_t>(g0 + g) * p_stride;
        switch (ng) {
            case 1: pv16_heads<1, 8>(w, vp, k0, n_full, rem, ds, out + g0, n); break;
            case 2: pv16_heads<2, 4>(w, vp, k0, n_full, rem, ds, out + g0, n); break;
            default: pv16_heads<3, 4>(w, vp, k0, n_full, rem, ds, out + g0, n); break;
        }
    }
    return true;
}

void pv_decode_t_avx512(const float* p, int p_stride, int n_q, const uint16_t* const* blocks, int bs, int p_begin,
                        int p_end, float* const* out, int n) {
    if (pv16_decode_t(p, p_stride, n_q, blocks, bs, p_begin, p_end, out, n)) return;
    // Tiles of 8 slots: attention_f16_decode_x86.h, three heads and two dimensions per pass.
    if (!attn_x86::pv_decode_t<3, 2>(p, p_stride, n_q, blocks, bs, p_begin, p_end, out, n)) {
        attn_pv_decode_t_generic(p, p_stride, n_q, blocks, bs, p_begin, p_end, out, n);
    }
}

}  // namespace

const AttnF16Kernels* attn_f16_kernels_avx512() {
    static const AttnF16Kernels k = [] {
        AttnF16Kernels t = *attn_f16_kernels_avx2();
        t.dots_decode_group = dots_decode_group_avx512;
        t.dots_prefill_group = dots_prefill_group_avx512;
        t.pv_decode_t = pv_decode_t_avx512;
        return t;
    }();
    return &k;
}

}  // namespace ferrox
