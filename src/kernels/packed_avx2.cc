// Q4_0 and Q8_0 repacked in groups of 8 rows, and their matrix product (decode, batches and
// prompts alike); see QuantKernels::repack8 / gemm_packed8 in quants.h. Also Q4_1's product in
// the same block order (QuantKernels::gemm_packed8_ref_order), on the layout of
// quants_avx2.cc's repack8_q4. Compiled with
// -mavx2 -mfma -mf16c -ffp-contract=off; see simd_avx2.h for why this file calls no inline
// function of external linkage.
//
// Layout, per group of 8 rows and per block of 32 elements: the 8 scales d (F16), then for each
// lane l the 4 quant bytes of lane l of each of the 8 rows (32 bytes, row r at 4r). Q4_0 has 4
// lanes: bytes qs[4l..4l+3], whose low nibbles are elements 4l..4l+3 and high nibbles elements
// 16+4l..; Q8_0 has 8 lanes, elements 4l..4l+3. Q4_1 is Q4_0's layout with the 8 minimums m
// (F16) after the 8 scales.
// One 32-byte load then serves 8 rows against a broadcast of 4 activation bytes.
//
// Order: every output is vec_dot_ref's, bit for bit. Per block the integer sum of products is
// exact (summed here in any order), then scaled and added in float with the reference's
// operations in the reference's order: Q4_0 sum = fma(dx * dy, s, sum), Q4_1 sum = fma(dx * dy,
// s, fma(m, ys, sum)) with the activation block's ys = d * sum(q) (quants_ref.cc's block_add),
// Q8_0 sum += (s * dx) * dy. Each of the 8 rows of a group is one float lane,
// so the order cannot depend on how many rows or activation rows a call covers.
//
// (Q4_1's gemm_packed8 keeps ggml's order instead, bit-identical to llama.cpp's x86 build:
// quants_avx2.cc.)
//
// Integer ranges: Q4 nibbles are unsigned (Q4_0's sum of (q - 8) * y is sum(q * y) - 8 sum(y)),
// so a maddubs pair is at most 2 * 15 * 127 and the 8 pair sums of a block add up to at most
// 30480 in 16 bits. Q8_0 uses the sign trick (|x| times y with x's sign); its pair sums go to
// 32 bits before they are added.

#include "kernels/isa_variant.h"
#include "kernels/kernels_internal.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <type_traits>

#include "kernels/prefetch_feed.h"
#include "kernels/quant_blocks.h"
#include "kernels/simd_avx2.h"

namespace ferrox {
namespace {

constexpr int64_t kMaxBlocks = 1024;  // rows of at most 32768 elements (repack_weights checks)
constexpr int kCols = 2;              // activation rows per pass

template <typename WB>
struct Fmt {
    static constexpr bool kQ8 = std::is_same_v<WB, BlockQ8_0>;
    static constexpr bool kMin = std::is_same_v<WB, BlockQ4_1>;  // minimums, and offsets m * ys
    static constexpr bool kSum = !kQ8 && !kMin;                   // Q4_0's - 8 * sum(y)
    using YB = std::conditional_t<kMin, BlockQ8_1, BlockQ8_0>;
    static constexpr int kLanes = kQ8 ? 8 : 4;
    static constexpr int64_t kHeader = kMin ? 32 : 16;
    static constexpr int64_t kBlockBytes = 8 * static_cast<int64_t>(sizeof(WB));
    static_assert(kHeader + 32 * kLanes == kBlockBytes);
};

template <typename WB>
void repack8(const void* src, int64_t n, int64_t n_rows, void* dst) {
    using F = Fmt<WB>;
    const int64_t nb = n / kQK;
    const auto* x = static_cast<const WB*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* o = out + (g * nb + b) * F::kBlockBytes;
            for (int r = 0; r < 8; ++r) {
                const WB& xb = x[(g * 8 + r) * nb + b];
                std::memcpy(o + 2 * r, &xb.d, 2);
                for (int l = 0; l < F::kLanes; ++l) std::memcpy(o + F::kHeader + 32 * l + 4 * r, xb.qs + 4 * l, 4);
            }
        }
    }
}

// What the float step needs of activation block b of column c, gathered once per pass.
struct ColBlock {
    float dy;       // y.d
    int32_t sum8;   // Q4_0: 8 * sum of the 32 activation bytes
    float sy;       // Q8_1 (Q4_1's activations): y.s
};

// The table entry of one activation block; Q8_0 and Q4_1 weights need no activation sum.
template <bool kSum, typename YB>
inline ColBlock col_block(const YB& y) {
    ColBlock e;
    e.dy = f16_to_f32(y.d);
    e.sum8 = 0;
    e.sy = 0;
    if constexpr (std::is_same_v<YB, BlockQ8_1>) e.sy = f16_to_f32(y.s);
    if constexpr (kSum) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs));
        e.sum8 = 8 * hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)));
    }
    return e;
}

inline int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// The float step of one block for 8 rows: the running sums acc, advanced by the reference's
// step (quants_ref.cc's block_add) for integer sums s (as floats), row scales dx and (Q4_1)
// minimums mx.
template <typename WB>
inline __m256 block_step(__m256 acc, __m256 s, __m256 dx, [[maybe_unused]] __m256 mx, const ColBlock& e) {
    if constexpr (Fmt<WB>::kQ8) return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(s, dx), _mm256_set1_ps(e.dy)));
    if constexpr (Fmt<WB>::kMin) acc = _mm256_fmadd_ps(mx, _mm256_set1_ps(e.sy), acc);
    return _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(e.dy)), s, acc);
}

// The minimums of the group's block at p (Q4_1), else unused.
template <typename WB>
inline __m256 load_mins(const uint8_t* p) {
    if constexpr (Fmt<WB>::kMin) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
    return _mm256_setzero_ps();
}

// Rows g*8..g*8+7 (the group at p) against NC activation columns; acc[c] holds the 8 rows'
// running sums for column c.
template <typename WB, int NC>
inline void group_pass(const uint8_t* p, int64_t nb, const typename Fmt<WB>::YB* const* y,
                       const ColBlock* cb, __m256* acc) {
    using F = Fmt<WB>;
    const __m256i low = _mm256_set1_epi8(15);
    [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; ++b, p += F::kBlockBytes, cb += NC) {
        prefetch_ahead<F::kBlockBytes>(p);
        __m256i isum[NC];
        if constexpr (F::kQ8) {
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; ++l) {
                const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + F::kHeader + 32 * l));
                const __m256i aw = _mm256_sign_epi8(w, w);
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                    const __m256i sy = _mm256_sign_epi8(bcast4(y[c][b].qs + 4 * l), w);
#if FERROX_AVX512
                    isum[c] = dpbusd(isum[c], aw, sy);
#else
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones));
#endif
                }
            }
        } else {
#if FERROX_AVX512
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) isum[c] = _mm256_set1_epi32(-cb[c].sum8);
            _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + F::kHeader + 32 * l));
                const __m256i lo = _mm256_and_si256(q, low);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                    isum[c] = dpbusd(isum[c], lo, bcast4(y[c][b].qs + 4 * l));
                    isum[c] = dpbusd(isum[c], hi, bcast4(y[c][b].qs + 16 + 4 * l));
                }
            }
#else
            __m256i p16[NC];
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) p16[c] = _mm256_setzero_si256();
            _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + F::kHeader + 32 * l));
                const __m256i lo = _mm256_and_si256(q, low);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                    p16[c] = _mm256_add_epi16(p16[c], _mm256_maddubs_epi16(lo, bcast4(y[c][b].qs + 4 * l)));
                    p16[c] = _mm256_add_epi16(p16[c], _mm256_maddubs_epi16(hi, bcast4(y[c][b].qs + 16 + 4 * l)));
                }
            }
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                isum[c] = _mm256_madd_epi16(p16[c], ones);
                isum[c] = _mm256_sub_epi32(isum[c], _mm256_set1_epi32(cb[c].sum8));
            }
#endif
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        const __m256 mx = load_mins<WB>(p);
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c)
            acc[c] = block_step<WB>(acc[c], _mm256_cvtepi32_ps(isum[c]), dx, mx, cb[c]);
    }
}

template <typename WB, int NC>
void columns_pass(int64_t nb, const uint8_t* w, int64_t n_rows, const uint8_t* a, int64_t a_row_bytes,
                  float* out, int64_t out_stride) {
    using F = Fmt<WB>;
    using YB = typename F::YB;
    const YB* y[NC];
    _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const YB*>(a + c * a_row_bytes);
    ColBlock cb[kMaxBlocks * NC];
    for (int64_t b = 0; b < nb; ++b) {
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) cb[b * NC + c] = col_block<F::kSum>(y[c][b]);
    }
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        __m256 acc[NC];
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
        group_pass<WB, NC>(w + g * nb * F::kBlockBytes, nb, y, cb, acc);
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out + c * out_stride + 8 * g, acc[c]);
    }
}

// Q4_0 with many activation rows (prompts, large batches): each block of a group is unpacked
// once into registers and every column passes over it, so the per-column work is only the products and
// the float step. Columns in tiles of kManyCols, blocks in chunks of kChunkBlocks (the
// per-(block, column) table and the group's running sums stay in L1; a running sum is stored
// and loaded back between chunks, which does not change it).
constexpr int kManyCols = 64;
constexpr int kManyColsFrom = 3;
constexpr int64_t kChunkBlocks = 32;

template <typename WB>  // BlockQ4_0 or BlockQ4_1 (Q8_0's sign trick needs the weights again per
                        // column: its 2-column passes measured as fast)
void gemm_many_columns(int64_t nb, const uint8_t* w, int64_t n_rows, const uint8_t* a, int64_t a_row_bytes,
                       int64_t n_cols, float* out, int64_t out_stride) {
    using F = Fmt<WB>;
    using YB = typename F::YB;
    static_assert(!F::kQ8);
    ColBlock cb[kChunkBlocks * kManyCols];
    alignas(32) float acc[kManyCols * 8];
    PrefetchFeed* feed = t_prefetch_feed != nullptr && !t_prefetch_feed->done() ? t_prefetch_feed : nullptr;
    const __m256i low = _mm256_set1_epi8(15);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t c0 = 0; c0 < n_cols; c0 += kManyCols) {
        const int nc = static_cast<int>(n_cols - c0 < kManyCols ? n_cols - c0 : kManyCols);
        const uint8_t* ac = a + c0 * a_row_bytes;
        const int64_t chunk = kChunkBlocks * kManyCols / nc;  // as gemm_many_columns_512
        for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
            const int64_t nbk = nb - b0 < chunk ? nb - b0 : chunk;
            for (int64_t b = 0; b < nbk; ++b) {
                for (int c = 0; c < nc; ++c)
                    cb[b * nc + c] = col_block<F::kSum>(reinterpret_cast<const YB*>(ac + c * a_row_bytes)[b0 + b]);
            }
            for (int64_t g = 0; g < n_rows / 8; ++g) {
                float* og = out + c0 * out_stride + 8 * g;
                for (int c = 0; c < nc; ++c) {
                    _mm256_store_ps(acc + 8 * c, b0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(og + c * out_stride));
                }
                const uint8_t* p = w + (g * nb + b0) * F::kBlockBytes;
                for (int64_t b = 0; b < nbk; ++b, p += F::kBlockBytes) {
                    if (feed) feed->step();
                    prefetch_ahead<F::kBlockBytes>(p);
                    const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
                    const __m256 mx = load_mins<WB>(p);
                    const ColBlock* e = cb + b * nc;
                    const int8_t* yq = reinterpret_cast<const YB*>(ac)[b0 + b].qs;
                    __m256i lo[4], hi[4];
                    _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
                        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + F::kHeader + 32 * l));
                        lo[l] = _mm256_and_si256(q, low);
                        hi[l] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
                    }
                    const auto column = [&](int c, const int8_t* yc) __attribute__((always_inline)) {
                        __m256i p16 = _mm256_maddubs_epi16(lo[0], bcast4(yc));
                        p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(hi[0], bcast4(yc + 16)));
                        _Pragma("GCC unroll 4") for (int l = 1; l < 4; ++l) {
                            p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(lo[l], bcast4(yc + 4 * l)));
                            p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(hi[l], bcast4(yc + 16 + 4 * l)));
                        }
                        __m256i isum = _mm256_madd_epi16(p16, ones);
                        if constexpr (F::kSum) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(e[c].sum8));
                        _mm256_store_ps(acc + 8 * c, block_step<WB>(_mm256_load_ps(acc + 8 * c),
                                                                    _mm256_cvtepi32_ps(isum), dx, mx, e[c]));
                    };
                    int c = 0;
                    for (; c + 2 <= nc; c += 2, yq += 2 * a_row_bytes) {
                        column(c, yq);
                        column(c + 1, yq + a_row_bytes);
                    }
                    if (c < nc) column(c, yq);
                }
                for (int c = 0; c < nc; ++c) _mm256_storeu_ps(og + c * out_stride, _mm256_load_ps(acc + 8 * c));
            }
        }
    }
}

#if FERROX_AVX512
// ---- AVX-512: many activation rows, 16 weight rows per pass -------------------------------------
// Groups g and g + 1 (rows 8g..8g+15, adjacent in the output) go through together: one 512-bit
// register holds the same 32-byte lane of both groups (g in the low half), so every broadcast
// activation chunk and every instruction serves 16 rows. Per block the group pair is unpacked
// once into 8 vectors of unsigned bytes, u[j], each against 4 activation bytes at kYOff[j], and
// a column costs 8 broadcast loads and 8 vpdpbusd (exact 32-bit sums, no saturation).
//  - Q4_0: u = the nibbles; the sum of q * y minus 8 * sum(y) per column, as on AVX2. Q4_1:
//    the nibbles and their plain sum of q * y.
//  - Q8_0: vpdpbusd multiplies unsigned by signed bytes, so the activations are the unsigned
//    ones, y + 128 (y ^ 0x80, built once per chunk of columns and blocks), and the signed
//    weights the other operand; 128 * sum(w) per row, shared by every column, is subtracted.
// The float step is the AVX2 kernels' (block_step), so each output keeps vec_dot_ref's bits.
constexpr int64_t kChunkBlocks512 = 16;  // Q8_0's shifted activations: 16 * 64 * 32 B = 32 KiB
// From 3 columns on (one and two columns keep columns_pass: decode streams the weights once,
// and the 8-row passes with prefetch were faster there: `ferrox bench -np 2` 615-627 through
// this kernel against 691-733). Small batches and speculative verification (3 to 7 rows) were
// 2-column passes that unpacked every block again per pair: `bench_quants cols`, Q4_1 block
// order, 3 / 4 / 7 columns 2.48 / 2.95 / 5.27 -> 1.74 / 2.18 / 3.38 one-column times; `ferrox
// bench -np 3 / 4 / 8 / 16` 708-716 / 711-754 / 873-879 / 1186-1203 -> 803-827 / 889-903 /
// 1146 / 1355-1378 t/s (with the prefetch and longer chunks below).
constexpr int kManyColsFrom512 = 3;

template <typename WB>
struct Wide {
    static constexpr bool kQ8 = Fmt<WB>::kQ8;
    // Activation byte offset, within a block, of the 4 bytes that u[j] multiplies.
    static constexpr int kYOff[8] = {0, kQ8 ? 4 : 16, kQ8 ? 8 : 4, kQ8 ? 12 : 20,
                                     kQ8 ? 16 : 8, kQ8 ? 20 : 24, kQ8 ? 24 : 12, 28};
    // The 8 vectors of the group pair's block at p0 (group g) and p1 (group g + 1), in kYOff
    // order; for Q8_0 also the per-row correction 128 * sum(w).
    static void unpack(const uint8_t* p0, const uint8_t* p1, __m512i* u, __m512i* corr) {
        constexpr int64_t h = Fmt<WB>::kHeader;
        if constexpr (kQ8) {
            __m512i c = _mm512_setzero_si512();
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; ++l) {
                u[l] = load2x256(p0 + h + 32 * l, p1 + h + 32 * l);
                c = dpbusd(c, _mm512_set1_epi8(static_cast<char>(0x80)), u[l]);
            }
            *corr = c;
        } else {
            const __m512i low = _mm512_set1_epi8(15);
            _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
                const __m512i q = load2x256(p0 + h + 32 * l, p1 + h + 32 * l);
                u[2 * l] = _mm512_and_si512(q, low);
                u[2 * l + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low);
            }
            *corr = _mm512_setzero_si512();
        }
    }
};

// One block of a group pair, unpacked for every column: scales (and Q4_1's minimums), the 8
// vectors u and Q8_0's correction.
template <typename WB>
struct PairBlock {
    __m512 dx, mx;
    __m512i u[8], corr;
};

// The block is the current pair's; the same block of the pair `ahead` bytes on is prefetched.
// A pair reads two streams at once, its two groups (nb blocks each, one after the other), so a
// fixed distance (prefetch_ahead's 4 KiB) from each lands mostly in what the other stream is
// reading now: the second group of every pair arrived unprefetched. The vocabulary product of
// the default model (49152 x 576 Q8_0, 9.8 KB pairs, streamed from memory) ran at 115-126 G
// multiply-adds/s per thread with it and 149-151 one pair ahead (`bench_quants batch 16`; the
// matrices that stay in L2 and the 1B model's longer rows unchanged); `ferrox bench -np 16`
// 1421 -> 1514 t/s, tg x4 773 -> 822, pp512 1487 -> 1547 (medians of 4-6 alternating runs).
template <typename WB>
__attribute__((always_inline)) inline PairBlock<WB> load_pair_block(const uint8_t* p0, const uint8_t* p1,
                                                                    int64_t ahead) {
    PairBlock<WB> k;
    prefetch_lines<0, Fmt<WB>::kBlockBytes, _MM_HINT_T0>(reinterpret_cast<const char*>(p0) + ahead);
    prefetch_lines<0, Fmt<WB>::kBlockBytes, _MM_HINT_T0>(reinterpret_cast<const char*>(p1) + ahead);
    k.dx = cvt2x8_f16(p0, p1);
    k.mx = Fmt<WB>::kMin ? cvt2x8_f16(p0 + 16, p1 + 16) : _mm512_setzero_ps();
    Wide<WB>::unpack(p0, p1, k.u, &k.corr);
    return k;
}

// One column's running sums acc (its 32 activation bytes at yc, its table entry e) advanced
// by the block: the exact integer sum, then the AVX2 kernels' float step.
template <typename WB>
__attribute__((always_inline)) inline __m512 pair_block_step(__m512 acc, const PairBlock<WB>& k, const uint8_t* yc,
                                                             const ColBlock& e) {
    using F = Fmt<WB>;
    using W = Wide<WB>;
    // One chain per column (the columns' chains are independent, so the core overlaps them; a
    // second chain would cost an add per column).
    __m512i isum = _mm512_setzero_si512();
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) {
        if constexpr (W::kQ8) {
            isum = dpbusd(isum, _mm512_set1_epi32(load_i32(yc + W::kYOff[j])), k.u[j]);
        } else {
            isum = dpbusd(isum, k.u[j], _mm512_set1_epi32(load_i32(yc + W::kYOff[j])));
        }
    }
    if constexpr (W::kQ8) isum = _mm512_sub_epi32(isum, k.corr);
    if constexpr (F::kSum) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(e.sum8));
    const __m512 sf = _mm512_cvtepi32_ps(isum);
    if constexpr (W::kQ8) return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(sf, k.dx), _mm512_set1_ps(e.dy)));
    if constexpr (F::kMin) acc = _mm512_fmadd_ps(k.mx, _mm512_set1_ps(e.sy), acc);
    return _mm512_fmadd_ps(_mm512_mul_ps(k.dx, _mm512_set1_ps(e.dy)), sf, acc);
}

// One group pair over a chunk of blocks for a compile-time NC columns, the accumulators in
// registers (16 + the 8 unpacked vectors + a few fit the 32 zmm) where the general loop below
// loads and stores them per block and column; the same operations per output, so the same
// bits. Calls of 16 columns or more go in tiles of 16, 8 columns alone here too: `ferrox bench
// -p 512 -n 64 -np 1,8,16`, three rounds interleaved with the general loop, pp512 1395-1491 ->
// 1547-1563, tg64x8 1220-1248 -> 1287-1331, tg64x16 1454-1473 -> 1531-1565 t/s, one sequence
// unchanged.
constexpr int kRegCols = 16;
template <typename WB, int NC>
__attribute__((always_inline)) inline void pair_chunk_regs(const uint8_t* p0, const uint8_t* p1, int64_t nbk,
                                                           const ColBlock* cb, const uint8_t* yu, const uint8_t* ac,
                                                           int64_t b0, int64_t a_row_bytes, float* og,
                                                           int64_t out_stride, bool first, int64_t ahead,
                                                           PrefetchFeed* feed) {
    using F = Fmt<WB>;
    using YB = typename F::YB;
    using W = Wide<WB>;
    __m512 acc[NC];
    _Pragma("GCC unroll 16") for (int c = 0; c < NC; ++c) acc[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(og + c * out_stride);
    for (int64_t b = 0; b < nbk; ++b, p0 += F::kBlockBytes, p1 += F::kBlockBytes) {
        if (feed) feed->step();
        const PairBlock<WB> k = load_pair_block<WB>(p0, p1, ahead);
        const uint8_t* yq = W::kQ8 ? yu + b * NC * kQK
                                   : reinterpret_cast<const uint8_t*>(reinterpret_cast<const YB*>(ac)[b0 + b].qs);
        const int64_t ystep = W::kQ8 ? kQK : a_row_bytes;
        _Pragma("GCC unroll 16") for (int c = 0; c < NC; ++c) {
            acc[c] = pair_block_step<WB>(acc[c], k, yq + c * ystep, cb[b * NC + c]);
        }
    }
    _Pragma("GCC unroll 16") for (int c = 0; c < NC; ++c) _mm512_storeu_ps(og + c * out_stride, acc[c]);
}

template <typename WB>
void gemm_many_columns_512(int64_t nb, const uint8_t* w, int64_t n_rows, const uint8_t* a, int64_t a_row_bytes,
                           int64_t n_cols, float* out, int64_t out_stride) {
    using F = Fmt<WB>;
    using YB = typename F::YB;
    using W = Wide<WB>;
    ColBlock cb[kChunkBlocks512 * kManyCols];
    // Q8_0: the chunk's activation bytes + 128, [block][column][32].
    alignas(64) uint8_t yu[W::kQ8 ? kChunkBlocks512 * kManyCols * kQK : 1];
    alignas(64) float acc[kManyCols * 16];
    const int64_t pairs = n_rows / 16;
    const int64_t tile = n_cols >= kRegCols ? kRegCols : kManyCols;
    const int64_t ahead = 2 * nb * F::kBlockBytes;  // the next pair (load_pair_block)
    PrefetchFeed* feed = t_prefetch_feed != nullptr && !t_prefetch_feed->done() ? t_prefetch_feed : nullptr;
    for (int64_t c0 = 0; c0 < n_cols; c0 += tile) {
        const int nc = static_cast<int>(n_cols - c0 < tile ? n_cols - c0 : tile);
        const uint8_t* ac = a + c0 * a_row_bytes;
        // Fewer columns, longer chunks (the tables hold the same kChunkBlocks512 * kManyCols
        // entries): a few columns stream each group's blocks in one run, as decode does.
        const int64_t chunk = kChunkBlocks512 * kManyCols / nc;
        for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
            const int64_t nbk = nb - b0 < chunk ? nb - b0 : chunk;
            for (int64_t b = 0; b < nbk; ++b) {
                for (int c = 0; c < nc; ++c) {
                    const YB& yb = reinterpret_cast<const YB*>(ac + c * a_row_bytes)[b0 + b];
                    cb[b * nc + c] = col_block<F::kSum>(yb);
                    if constexpr (W::kQ8) {
                        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.qs));
                        _mm256_store_si256(reinterpret_cast<__m256i*>(yu + (b * nc + c) * kQK),
                                           _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))));
                    }
                }
            }
            if (nc == kRegCols || nc == kRegCols / 2) {
                for (int64_t gp = 0; gp < pairs; ++gp) {
                    const uint8_t* p0 = w + (2 * gp * nb + b0) * F::kBlockBytes;
                    float* og = out + c0 * out_stride + 16 * gp;
                    if (nc == kRegCols) {
                        pair_chunk_regs<WB, kRegCols>(p0, p0 + nb * F::kBlockBytes, nbk, cb, yu, ac, b0, a_row_bytes,
                                                      og, out_stride, b0 == 0, ahead, feed);
                    } else {
                        pair_chunk_regs<WB, kRegCols / 2>(p0, p0 + nb * F::kBlockBytes, nbk, cb, yu, ac, b0,
                                                          a_row_bytes, og, out_stride, b0 == 0, ahead, feed);
                    }
                }
                continue;
            }
            for (int64_t gp = 0; gp < pairs; ++gp) {
                float* og = out + c0 * out_stride + 16 * gp;
                for (int c = 0; c < nc; ++c) {
                    _mm512_store_ps(acc + 16 * c, b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(og + c * out_stride));
                }
                const uint8_t* p0 = w + (2 * gp * nb + b0) * F::kBlockBytes;
                const uint8_t* p1 = p0 + nb * F::kBlockBytes;
                for (int64_t b = 0; b < nbk; ++b, p0 += F::kBlockBytes, p1 += F::kBlockBytes) {
                    if (feed) feed->step();
                    const PairBlock<WB> k = load_pair_block<WB>(p0, p1, ahead);
                    const uint8_t* yq = W::kQ8 ? yu + b * nc * kQK
                                               : reinterpret_cast<const uint8_t*>(reinterpret_cast<const YB*>(ac)[b0 + b].qs);
                    const int64_t ystep = W::kQ8 ? kQK : a_row_bytes;
                    for (int c = 0; c < nc; ++c, yq += ystep) {
                        _mm512_store_ps(acc + 16 * c, pair_block_step<WB>(_mm512_load_ps(acc + 16 * c), k, yq, cb[b * nc + c]));
                    }
                }
                for (int c = 0; c < nc; ++c) _mm512_storeu_ps(og + c * out_stride, _mm512_load_ps(acc + 16 * c));
            }
        }
    }
}
#endif  // FERROX_AVX512

template <typename WB>
void gemm_packed8(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes, int64_t n_cols,
                  float* out, int64_t out_stride) {
    const int64_t nb = n / kQK;
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* ap = static_cast<const uint8_t*>(a);
    if (nb > kMaxBlocks) {
        for (int64_t c = 0; c < n_cols; ++c)
            for (int64_t r = 0; r < n_rows; ++r) out[c * out_stride + r] = __builtin_nanf("");
        return;
    }
#if FERROX_AVX512
    if (n_cols >= kManyColsFrom512 && n_rows >= 16) {
        const int64_t rows16 = n_rows / 16 * 16;
        gemm_many_columns_512<WB>(nb, wp, rows16, ap, a_row_bytes, n_cols, out, out_stride);
        if (rows16 == n_rows) return;
        // An odd last group: the 8-row kernels below.
        wp += rows16 / 8 * nb * Fmt<WB>::kBlockBytes;
        out += rows16;
        n_rows -= rows16;
    }
#endif
    if constexpr (!Fmt<WB>::kQ8) {
        if (n_cols >= kManyColsFrom) return gemm_many_columns<WB>(nb, wp, n_rows, ap, a_row_bytes, n_cols, out, out_stride);
    }
    int64_t c = 0;
    // Q8_0 (no many-column kernel on AVX2) four activation rows a pass: the weight loads and
    // |w| serve twice as many columns (`bench_quants batch 16`, avx2 q8_0 59-60 -> 61-62 G
    // mul-add/s; FERROX_KERNELS_ISA=avx2 `ferrox bench -np 4` 740 -> 798 t/s, -np 16 +1 %).
    if constexpr (Fmt<WB>::kQ8) {
        for (; c + 4 <= n_cols; c += 4)
            columns_pass<WB, 4>(nb, wp, n_rows, ap + c * a_row_bytes, a_row_bytes, out + c * out_stride, out_stride);
    }
    for (; c + kCols <= n_cols; c += kCols)
        columns_pass<WB, kCols>(nb, wp, n_rows, ap + c * a_row_bytes, a_row_bytes, out + c * out_stride, out_stride);
    const uint8_t* ac = ap + c * a_row_bytes;
    float* oc = out + c * out_stride;
    switch (n_cols - c) {
        case 1: columns_pass<WB, 1>(nb, wp, n_rows, ac, a_row_bytes, oc, out_stride); break;
        case 2: columns_pass<WB, 2>(nb, wp, n_rows, ac, a_row_bytes, oc, out_stride); break;
        case 3: columns_pass<WB, 3>(nb, wp, n_rows, ac, a_row_bytes, oc, out_stride); break;
        default: break;
    }
}

}  // namespace

namespace detail::FERROX_ISA_NS {

void override_packed(QuantKernels* table) {
    table[kernel_index(DType::kQ4_0)].repack8 = repack8<BlockQ4_0>;
    table[kernel_index(DType::kQ4_0)].gemm_packed8 = gemm_packed8<BlockQ4_0>;
    table[kernel_index(DType::kQ8_0)].repack8 = repack8<BlockQ8_0>;
    table[kernel_index(DType::kQ8_0)].gemm_packed8 = gemm_packed8<BlockQ8_0>;
    table[kernel_index(DType::kQ4_1)].gemm_packed8_ref_order = gemm_packed8<BlockQ4_1>;
}

}  // namespace detail::FERROX_ISA_NS
}  // namespace ferrox

#else  // not built for AVX2 (a non-x86 target): dispatch never selects it.
namespace ferrox::detail::FERROX_ISA_NS {
void override_packed(QuantKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
