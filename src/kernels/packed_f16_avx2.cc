// Packed (8 rows interleaved) layouts and matrix products for f16: see QuantKernels::repack8
// and gemm_packed8 in quants.h. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off.
// See simd_avx2.h for why this file calls no inline function of external linkage.
//
// Layout: rows in groups of 8; group g (rows 8g..8g+7) starts at byte 8g * 2n and holds, for
// each column k in order, the 8 rows' halves at column k (16 bytes), so one _mm256_cvtph_ps
// gives the 8 rows' weights at column k, one row per lane.
//
// Activations: F32 rows holding values rounded to F16 (quantize_packed_act_row), so products
// are the same as with F16 activations and a prompt's rows are read as they are multiplied
// (converting each 64-row tile's chunk of every token again cost ~15% of a prompt).
//
// Order: every output is one float fused multiply-add chain over the elements in order,
// acc = 0; acc = fma(w[k], x[k], acc) for k = 0..n-1 (the f16 -> f32 conversions are exact),
// whatever n_rows and n_cols are. Lane j of a group's accumulator is row j's chain, so the
// kernels only choose how many chains run side by side, never their order.

#include "kernels/isa_variant.h"
#include "kernels/kernels_internal.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kernels/simd_avx2.h"

namespace ferrox {
namespace {

// The loops over groups and columns have compile-time bounds; without full unrolling GCC -O2
// kept the accumulators in memory (prompt kernel ~2.5x slower).
#define FERROX_UNROLL _Pragma("GCC unroll 8")

inline __m256 cvt8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// ---- repack ---------------------------------------------------------------------------------

void repack8_f16(const void* src, int64_t n, int64_t n_rows, void* dst) {
    const auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        const uint16_t* r = s + g * 8 * n;
        uint16_t* o = d + g * 8 * n;
        int64_t k = 0;
        for (; k + 8 <= n; k += 8) {
            // 8x8 transpose of 16-bit values: in row j, column k + i -> out (k + i) * 8 + j.
            __m128i v[8];
            for (int j = 0; j < 8; ++j) v[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j * n + k));
            const __m128i a0 = _mm_unpacklo_epi16(v[0], v[1]), a1 = _mm_unpackhi_epi16(v[0], v[1]);
            const __m128i a2 = _mm_unpacklo_epi16(v[2], v[3]), a3 = _mm_unpackhi_epi16(v[2], v[3]);
            const __m128i a4 = _mm_unpacklo_epi16(v[4], v[5]), a5 = _mm_unpackhi_epi16(v[4], v[5]);
            const __m128i a6 = _mm_unpacklo_epi16(v[6], v[7]), a7 = _mm_unpackhi_epi16(v[6], v[7]);
            const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
            const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
            const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
            const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
            __m128i* q = reinterpret_cast<__m128i*>(o + k * 8);
            _mm_storeu_si128(q + 0, _mm_unpacklo_epi64(b0, b4));
            _mm_storeu_si128(q + 1, _mm_unpackhi_epi64(b0, b4));
            _mm_storeu_si128(q + 2, _mm_unpacklo_epi64(b1, b5));
            _mm_storeu_si128(q + 3, _mm_unpackhi_epi64(b1, b5));
            _mm_storeu_si128(q + 4, _mm_unpacklo_epi64(b2, b6));
            _mm_storeu_si128(q + 5, _mm_unpackhi_epi64(b2, b6));
            _mm_storeu_si128(q + 6, _mm_unpacklo_epi64(b3, b7));
            _mm_storeu_si128(q + 7, _mm_unpackhi_epi64(b3, b7));
        }
        for (; k < n; ++k)
            for (int j = 0; j < 8; ++j) o[k * 8 + j] = r[j * n + k];
    }
}

// Activation row: floats rounded to F16 precision (round to nearest even, as act_type F16).
void quantize_packed_f16(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<float*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; ++i) y[i] = f16_to_f32(f32_to_f16(x[i]));
}

// ---- one activation row (decode) ------------------------------------------------------------

// One element for G groups: acc[g] = fma(group g's 8 weights at wk, b, acc[g]).
template <int G>
inline void step(__m256* acc, const uint16_t* wk, int64_t gstride, __m256 b) {
    FERROX_UNROLL
    for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(cvt8(wk + g * gstride), b, acc[g]);
}

// G groups (8G rows) against one activation row: G independent chains hide the FMA latency.
// w: group 0 of the G; gstride: elements between groups (8n). out: row 0's output.
template <int G>
void gemv_groups(int64_t n, const uint16_t* w, int64_t gstride, const float* x, float* out) {
    __m256 acc[G];
    FERROX_UNROLL
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
        const __m256 lo = _mm256_permute2f128_ps(xv, xv, 0x00);
        const __m256 hi = _mm256_permute2f128_ps(xv, xv, 0x11);
        const uint16_t* wk = w + k * 8;
        step<G>(acc, wk + 0 * 8, gstride, _mm256_shuffle_ps(lo, lo, 0x00));
        step<G>(acc, wk + 1 * 8, gstride, _mm256_shuffle_ps(lo, lo, 0x55));
        step<G>(acc, wk + 2 * 8, gstride, _mm256_shuffle_ps(lo, lo, 0xAA));
        step<G>(acc, wk + 3 * 8, gstride, _mm256_shuffle_ps(lo, lo, 0xFF));
        step<G>(acc, wk + 4 * 8, gstride, _mm256_shuffle_ps(hi, hi, 0x00));
        step<G>(acc, wk + 5 * 8, gstride, _mm256_shuffle_ps(hi, hi, 0x55));
        step<G>(acc, wk + 6 * 8, gstride, _mm256_shuffle_ps(hi, hi, 0xAA));
        step<G>(acc, wk + 7 * 8, gstride, _mm256_shuffle_ps(hi, hi, 0xFF));
    }
    for (; k < n; ++k) {
        const __m256 b = _mm256_set1_ps(x[k]);
        FERROX_UNROLL
        for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(cvt8(w + g * gstride + k * 8), b, acc[g]);
    }
    FERROX_UNROLL
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(out + 8 * g, acc[g]);
}

void gemv_packed(int64_t n, const uint16_t* w, int64_t n_rows, const float* x, float* out) {
    const int64_t gs = 8 * n;
    const int64_t ng = n_rows / 8;
    int64_t g = 0;
    for (; g + 8 <= ng; g += 8) gemv_groups<8>(n, w + g * gs, gs, x, out + 8 * g);
    switch (ng - g) {
        case 7: gemv_groups<7>(n, w + g * gs, gs, x, out + 8 * g); break;
        case 6: gemv_groups<6>(n, w + g * gs, gs, x, out + 8 * g); break;
        case 5: gemv_groups<5>(n, w + g * gs, gs, x, out + 8 * g); break;
        case 4: gemv_groups<4>(n, w + g * gs, gs, x, out + 8 * g); break;
        case 3: gemv_groups<3>(n, w + g * gs, gs, x, out + 8 * g); break;
        case 2: gemv_groups<2>(n, w + g * gs, gs, x, out + 8 * g); break;
        case 1: gemv_groups<1>(n, w + g * gs, gs, x, out + 8 * g); break;
        default: break;
    }
}

// ---- several activation rows (batches, prompts) ---------------------------------------------

// Register blocks of 2 groups (16 rows) x 6 columns: 12 chains, broadcasting each column's
// activations straight from its row. The elements are taken a chunk at a time; the chains carry
// over chunks through the outputs themselves (a float stored and loaded back is the same float,
// so the order is unchanged). Loops: row blocks of 64 rows, then chunks, then column tiles, so a
// chunk of the block's weights (128 KiB) stays in L2 while every column tile passes over it.
constexpr int kMaxCols = 6;
constexpr int64_t kChunk = 1024;
constexpr int64_t kBlockGroups = 8;

// G groups x C columns over one chunk of kc elements (2G conversions, C broadcasts and G * C
// FMAs per element; the conversions do not limit the FMA rate on Zen 3, converting the weights
// to a float buffer shared by the column tiles measured ~10% slower): group g's weights at
// element i are at w + g * gstride + 8 * i; column c's activation at element i is at byte
// c * a_row_bytes of x, plus 4i; output (row 8g + j, column c) at out[c * out_stride + 8g + j].
// first: the chains start at 0 (else they continue from out).
template <int G, int C>
void tile_kernel(const uint16_t* w, int64_t gstride, int64_t kc, const uint8_t* x, int64_t a_row_bytes, float* out,
                 int64_t out_stride, bool first) {
    __m256 acc[G][C];
    const float* xc[C];
    FERROX_UNROLL
    for (int c = 0; c < C; ++c) xc[c] = reinterpret_cast<const float*>(x + c * a_row_bytes);
    FERROX_UNROLL
    for (int g = 0; g < G; ++g)
        FERROX_UNROLL
        for (int c = 0; c < C; ++c)
            acc[g][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + c * out_stride + 8 * g);
    auto step = [&](int64_t i) {
        __m256 wv[G];
        FERROX_UNROLL
        for (int g = 0; g < G; ++g) wv[g] = cvt8(w + g * gstride + i * 8);
        FERROX_UNROLL
        for (int c = 0; c < C; ++c) {
            const __m256 b = _mm256_broadcast_ss(xc[c] + i);
            FERROX_UNROLL
            for (int g = 0; g < G; ++g) acc[g][c] = _mm256_fmadd_ps(wv[g], b, acc[g][c]);
        }
    };
    // Every 16 elements, the lines 64 elements ahead in each of the G + C streams are fetched
    // (a call's streams are too short for the hardware prefetcher to ramp up: ~+7 % measured).
    int64_t i = 0;
    for (; i + 16 <= kc; i += 16) {
        FERROX_UNROLL
        for (int c = 0; c < C; ++c) prefetch_lines<0, 64, _MM_HINT_T0>(reinterpret_cast<const char*>(xc[c] + i + 64));
        FERROX_UNROLL
        for (int g = 0; g < G; ++g)
            prefetch_lines<0, 256, _MM_HINT_T0>(reinterpret_cast<const char*>(w + g * gstride + (i + 64) * 8));
        for (int64_t j = i; j < i + 16; ++j) step(j);
    }
    for (; i < kc; ++i) step(i);
    FERROX_UNROLL
    for (int g = 0; g < G; ++g)
        FERROX_UNROLL
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + c * out_stride + 8 * g, acc[g][c]);
}

// ng groups against C columns over one chunk: G groups at a time, G chosen so that the G * C
// chains, G weight vectors and a broadcast fit the 16 registers.
template <int C>
void tile_groups(const uint16_t* w, int64_t gstride, int64_t ng, int64_t kc, const uint8_t* x, int64_t a_row_bytes,
                 float* out, int64_t out_stride, bool first) {
    constexpr int G = C >= 4 ? 2 : (C == 3 ? 3 : 4);
    int64_t g = 0;
    for (; g + G <= ng; g += G)
        tile_kernel<G, C>(w + g * gstride, gstride, kc, x, a_row_bytes, out + 8 * g, out_stride, first);
    for (; g < ng; ++g) tile_kernel<1, C>(w + g * gstride, gstride, kc, x, a_row_bytes, out + 8 * g, out_stride, first);
}

void tile_groups_n(int nc, const uint16_t* w, int64_t gstride, int64_t ng, int64_t kc, const uint8_t* x,
                   int64_t a_row_bytes, float* out, int64_t out_stride, bool first) {
    switch (nc) {
        case 6: tile_groups<6>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 5: tile_groups<5>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 4: tile_groups<4>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 3: tile_groups<3>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 2: tile_groups<2>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        default: tile_groups<1>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
    }
}

#if FERROX_AVX512
// ---- AVX-512: 16 rows per register ----------------------------------------------------------
// Groups g and g + 1 share one 512-bit register (group g in lanes 0..7, g + 1 in 8..15, the
// order of their outputs), so a block of P group pairs x C columns keeps P * C chains of 16
// rows in the 32 registers: 2 pairs x 8 columns is 16 chains, 2 weight vectors and a
// broadcast, against 12 for AVX2's 2 groups x 6 columns in 16 registers. The chains are the
// AVX2 kernels' (one fused multiply-add per element, in order), so the bits are the same.
constexpr int kMaxCols512 = 8;

template <int P, int C>
void tile_kernel_512(const uint16_t* w, int64_t gstride, int64_t kc, const uint8_t* x, int64_t a_row_bytes,
                     float* out, int64_t out_stride, bool first) {
    __m512 acc[P][C];
    const float* xc[C];
    FERROX_UNROLL
    for (int c = 0; c < C; ++c) xc[c] = reinterpret_cast<const float*>(x + c * a_row_bytes);
    FERROX_UNROLL
    for (int p = 0; p < P; ++p)
        FERROX_UNROLL
        for (int c = 0; c < C; ++c)
            acc[p][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + c * out_stride + 16 * p);
    auto step = [&](int64_t i) {
        __m512 wv[P];
        FERROX_UNROLL
        for (int p = 0; p < P; ++p) wv[p] = cvt2x8_f16(w + 2 * p * gstride + i * 8, w + (2 * p + 1) * gstride + i * 8);
        FERROX_UNROLL
        for (int c = 0; c < C; ++c) {
            const __m512 b = _mm512_set1_ps(xc[c][i]);
            FERROX_UNROLL
            for (int p = 0; p < P; ++p) acc[p][c] = _mm512_fmadd_ps(wv[p], b, acc[p][c]);
        }
    };
    int64_t i = 0;
    for (; i + 16 <= kc; i += 16) {
        FERROX_UNROLL
        for (int c = 0; c < C; ++c) prefetch_lines<0, 64, _MM_HINT_T0>(reinterpret_cast<const char*>(xc[c] + i + 64));
        FERROX_UNROLL
        for (int g = 0; g < 2 * P; ++g)
            prefetch_lines<0, 256, _MM_HINT_T0>(reinterpret_cast<const char*>(w + g * gstride + (i + 64) * 8));
        for (int64_t j = i; j < i + 16; ++j) step(j);
    }
    for (; i < kc; ++i) step(i);
    FERROX_UNROLL
    for (int p = 0; p < P; ++p)
        FERROX_UNROLL
        for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + c * out_stride + 16 * p, acc[p][c]);
}

// ng groups against C columns: pairs two at a time, then a last pair, then an odd group with
// the AVX2 kernel (same chains).
template <int C>
void tile_groups_512(const uint16_t* w, int64_t gstride, int64_t ng, int64_t kc, const uint8_t* x,
                     int64_t a_row_bytes, float* out, int64_t out_stride, bool first) {
    int64_t g = 0;
    for (; g + 4 <= ng; g += 4)
        tile_kernel_512<2, C>(w + g * gstride, gstride, kc, x, a_row_bytes, out + 8 * g, out_stride, first);
    for (; g + 2 <= ng; g += 2)
        tile_kernel_512<1, C>(w + g * gstride, gstride, kc, x, a_row_bytes, out + 8 * g, out_stride, first);
    if (g < ng) {
        constexpr int C2 = C < kMaxCols ? C : kMaxCols;
        for (int c0 = 0; c0 < C; c0 += C2) {
            const int nc = C - c0 < C2 ? C - c0 : C2;
            tile_groups_n(nc, w + g * gstride, gstride, 1, kc, x + c0 * a_row_bytes, a_row_bytes,
                          out + c0 * out_stride + 8 * g, out_stride, first);
        }
    }
}

void tile_groups_n_512(int nc, const uint16_t* w, int64_t gstride, int64_t ng, int64_t kc, const uint8_t* x,
                       int64_t a_row_bytes, float* out, int64_t out_stride, bool first) {
    switch (nc) {
        case 8: tile_groups_512<8>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 7: tile_groups_512<7>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 6: tile_groups_512<6>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 5: tile_groups_512<5>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 4: tile_groups_512<4>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 3: tile_groups_512<3>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        case 2: tile_groups_512<2>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
        default: tile_groups_512<1>(w, gstride, ng, kc, x, a_row_bytes, out, out_stride, first); break;
    }
}
#endif  // FERROX_AVX512

void gemm_packed8_f16(int64_t n, const void* wv, int64_t n_rows, const void* av, int64_t a_row_bytes,
                      int64_t n_cols, float* out, int64_t out_stride) {
    const auto* w = static_cast<const uint16_t*>(wv);
    const auto* a = static_cast<const uint8_t*>(av);
    if (n_cols == 1) {
        gemv_packed(n, w, n_rows, reinterpret_cast<const float*>(a), out);
        return;
    }
    const int64_t gs = 8 * n;
    for (int64_t g0 = 0; g0 < n_rows / 8; g0 += kBlockGroups) {
        const int64_t ng = n_rows / 8 - g0 < kBlockGroups ? n_rows / 8 - g0 : kBlockGroups;
        const uint16_t* wblk = w + g0 * gs;
        for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
            const int64_t kc = n - k0 < kChunk ? n - k0 : kChunk;
#if FERROX_AVX512
            constexpr int kTileCols = kMaxCols512;
#else
            constexpr int kTileCols = kMaxCols;
#endif
            for (int64_t c0 = 0; c0 < n_cols; c0 += kTileCols) {
                const int nc = static_cast<int>(n_cols - c0 < kTileCols ? n_cols - c0 : kTileCols);
                float* o = out + c0 * out_stride + 8 * g0;
#if FERROX_AVX512
                tile_groups_n_512(nc, wblk + k0 * 8, gs, ng, kc, a + c0 * a_row_bytes + k0 * 4, a_row_bytes, o,
                                  out_stride, k0 == 0);
#else
                tile_groups_n(nc, wblk + k0 * 8, gs, ng, kc, a + c0 * a_row_bytes + k0 * 4, a_row_bytes, o, out_stride,
                              k0 == 0);
#endif
            }
        }
    }
}

}  // namespace

namespace detail::FERROX_ISA_NS {

void override_packed_f16(QuantKernels* table) {
    table[kernel_index(DType::kF16)].repack8 = repack8_f16;
    table[kernel_index(DType::kF16)].gemm_packed8 = gemm_packed8_f16;
    table[kernel_index(DType::kF16)].packed_act_type = DType::kF32;
    table[kernel_index(DType::kF16)].quantize_packed_act_row = quantize_packed_f16;
}

}  // namespace detail::FERROX_ISA_NS
}  // namespace ferrox

#else  // not built for AVX2 (a non-x86 target): dispatch never selects it.
namespace ferrox::detail::FERROX_ISA_NS {
void override_packed_f16(QuantKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
