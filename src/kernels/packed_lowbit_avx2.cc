// The low-bit formats of MoE downloads, Q2_K, Q3_K, IQ4_XS (x Q8_K) and IQ4_NL, MXFP4 (x Q8_0):
// their dot products (QuantKernels::vec_dot) and their packed layouts and matrix products
// (repack8, gemm_packed8; see quants.h). Compiled once per ISA variant (isa_variant.h) with
// -mavx2 -mfma -mf16c -ffp-contract=off (plus AVX-512 F/BW/DQ/VL/VNNI for the avx512 variant).
// See simd_avx2.h for why this file calls no inline function of external linkage (the format
// tables and scale helpers of quant_blocks.h are restated here).
//
// Every output, of vec_dot and of gemm_packed8 alike, is summed in vec_dot_ref's order (one
// exact integer sum per block, scaled and added in float with the operations quants_ref.cc
// writes), so the scalar reference is the oracle bit for bit on every level:
//   Q2_K:   acc += (y.d * d) * sumq - (y.d * dmin) * summ   (summ = sum_j m_j * bsums_j)
//   Q3_K, IQ4_XS: acc += (y.d * d) * sumq                    (signed sub-block scales in sumq)
//   IQ4_NL, MXFP4: acc = fma(dx * dy, s, acc)
//
// Packed layouts. A group is the same (super-)block of 8 consecutive rows and takes exactly 8
// times the bytes of one block; group g of block i sits at g * 8 * row_bytes + i * group bytes,
// so rows can be split at any multiple of 8. Quant vectors are 32 bytes whose 32-bit lane r
// holds 4 bytes of row r (gather4), so that one vector times the broadcast of the 4 matching
// activation bytes (maddubs, or VNNI's vpdpbusd) gives every row's partial sum in its lane.
// Per-row scale bytes are stored [index][row] (8 bytes per index), widened with vpmovzxbd.
//   Q2_K (672):   [0,16) d x8 | [16,32) dmin x8 | [32,160) scales[j] x8 (j = 0..15) |
//                 [160,672) vector 8h + k: row r's qs[32h + 4k .. + 3] (elements 128h + 32s +
//                 4k + b in bits 2s, 2s + 1 of byte b).
//   Q3_K (880):   [0,16) d x8 | [16,80) scales[b] x8, b = 0..7 (low nibbles) | [80,112)
//                 scales[8 + b] x8, b = 0..3 (high bits) | [112,368) vector k: row r's
//                 hmask[4k .. + 3] | [368,880) vector 8h + k: qs as Q2_K's.
//   IQ4_XS (1088): [0,16) d x8 | [16,32) scales_h x8 | [32,64) scales_l[b] x8 | [64,1088)
//                 vector 4j + k: row r's qs[16j + 4k .. + 3] (low nibbles elements 32j + 4k + b,
//                 high nibbles 32j + 16 + 4k + b).
//   IQ4_NL (144): [0,16) d x8 | [16,144) vector k: row r's qs[4k .. + 3] (low nibbles elements
//                 4k + b, high nibbles 16 + 4k + b).
//   MXFP4 (136):  [0,8) e x8 | [8,136) as IQ4_NL's.
//
// Integer products. AVX2: maddubs (u8 x s8, pairs to int16, saturating), kept in range: Q2_K's
// q <= 3 and Q3_K's q + 4 <= 7 sum 4 products of a 16-element sub-block in 16 bits (<= 4 * 2 *
// 7 * 127), then one madd with the sub-block's scale pair; the 4-bit non-linear levels (|v| <=
// 127) go through the sign trick (|v| times y with v's sign) and a madd per product pair.
// AVX-512: VNNI's vpdpbusd sums 4 products to int32 without saturation; a 16-element sub-block
// sum (|s| <= 16 * 7 * 127 < 2^15) is scaled with one madd against (scale, 0) int16 pairs, a
// 32-element IQ4_XS one with a 32-bit multiply. Q3_K multiplies q + 4 (unsigned) and takes
// 4 * sum_j sc_j * bsums_j off; IQ4_XS (VNNI) multiplies v + 128 and takes 128 * sum_j ls_j *
// (its two bsums) off; IQ4_NL and MXFP4 (VNNI, Q8_0 has no sums) multiply y + 128 (unsigned)
// by v and take 128 * sum(v) off, a product of the weights alone (shared by every column).
#include <cstddef>
#include <type_traits>

#include "core/check.h"
#include "kernels/isa_variant.h"
#include "kernels/kernels_internal.h"
#include "kernels/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kernels/simd_avx2.h"

namespace ferrox {
namespace {


constexpr int64_t kQ8KBytes = static_cast<int64_t>(sizeof(BlockQ8_K));
constexpr int64_t kQ80Bytes = static_cast<int64_t>(sizeof(BlockQ8_0));

// The formats' level tables (quant_blocks.h's, restated: see the file comment).
alignas(16) constexpr int8_t kNL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
alignas(16) constexpr int8_t kFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline __m256i ld256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i ld128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m128i ld64(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }
inline __m256i tbl256(const void* t) { return _mm256_broadcastsi128_si256(ld128(t)); }

inline float h2f(uint16_t h) { return f16_to_f32(h); }
inline float e8m0_half(uint8_t e) {  // mxfp4_scale
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
inline int q3_scale(const uint8_t* s, int j) {  // q3k_scale
    const int lo = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
    return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}
inline int xs_scale(uint16_t h, const uint8_t* l, int j) {  // iq4xs_scale
    return ((l[j / 2] >> (4 * (j % 2))) & 15) | (((h >> (2 * j)) & 3) << 4);
}

inline int hsum32(__m256i v) { return hsum_epi32(v); }

// ---- vec_dot: one row, the integer sums in 256-bit registers, the float steps as the reference ----

// sum(u * y) of 32 unsigned weight bytes (u <= 7) and 32 activation bytes, as int16 pairs.
inline __m256i mul_u8(__m256i u, const int8_t* y) { return _mm256_maddubs_epi16(u, ld256(y)); }
// Sums of 2 products of signed levels v (|v| <= 127) and y, as int16 pairs (sign trick).
inline __m256i mul_s8(__m256i v, const int8_t* y) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(ld256(y), v));
}
// 16 bytes of nibbles (a 32-element block of the 4-bit formats) -> 32 indices in element order.
inline __m256i nibbles32(const uint8_t* p) {
    const __m128i t = ld128(p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
}
// int16 lanes 0..7 = a, 8..15 = b.
inline __m256i pair16(int a, int b) {
    return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(b)), _mm_set1_epi16(static_cast<int16_t>(a)));
}

float dot_q2_k(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ2_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    const __m256i m3 = _mm256_set1_epi8(3);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const __m128i sc = ld128(x[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
        const int sum_m = hsum32(_mm256_madd_epi16(mins, ld256(y[i].bsums)));
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i q = ld256(x[i].qs + 32 * h);
            for (int s = 0; s < 4; ++s) {
                const int j = 8 * h + 2 * s;
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
                const __m256i p = mul_u8(u, y[i].qs + 128 * h + 32 * s);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, pair16(x[i].scales[j] & 15, x[i].scales[j + 1] & 15)));
            }
        }
        const int sum_q = hsum32(acc);
        sum += y[i].d * h2f(x[i].d) * static_cast<float>(sum_q) - y[i].d * h2f(x[i].dmin) * static_cast<float>(sum_m);
    }
    return sum;
}

float dot_q3_k(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ3_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    const __m256i m3 = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        alignas(32) int16_t sc[16];
        for (int j = 0; j < 16; ++j) sc[j] = static_cast<int16_t>(q3_scale(x[i].scales, j) - 32);
        // sum sc_j * (u - 4) * y = sum sc_j * u * y - 4 * sum_j sc_j * bsums_j.
        const int corr = hsum32(_mm256_madd_epi16(ld256(sc), ld256(y[i].bsums)));
        const __m256i hm = ld256(x[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i q = ld256(x[i].qs + 32 * h);
            for (int s = 0; s < 4; ++s) {
                const int j = 8 * h + 2 * s, b = 4 * h + s;
                const __m256i hb = b >= 2 ? _mm256_srli_epi16(hm, b - 2) : _mm256_slli_epi16(hm, 2 - b);
                const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3),
                                                  _mm256_and_si256(hb, bit2));
                const __m256i p = mul_u8(u, y[i].qs + 128 * h + 32 * s);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, pair16(sc[j], sc[j + 1])));
            }
        }
        const int s = hsum32(acc) - 4 * corr;
        sum += y[i].d * h2f(x[i].d) * static_cast<float>(s);
    }
    return sum;
}

float dot_iq4_xs(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockIQ4_XS*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    const __m256i tbl = tbl256(kNL);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        __m256i acc = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            const __m256i v = _mm256_shuffle_epi8(tbl, nibbles32(x[i].qs + 16 * j));
            const int ls = xs_scale(x[i].scales_h, x[i].scales_l, j) - 32;
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(mul_s8(v, y[i].qs + 32 * j),
                                                          _mm256_set1_epi16(static_cast<int16_t>(ls))));
        }
        sum += y[i].d * h2f(x[i].d) * static_cast<float>(hsum32(acc));
    }
    return sum;
}

template <bool kFp4>
float dot_nl32(int64_t n, const void* w, const void* a) {
    using Block = std::conditional_t<kFp4, BlockMXFP4, BlockIQ4_NL>;
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    const __m256i tbl = tbl256(kFp4 ? kFP4 : kNL), ones = _mm256_set1_epi16(1);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK; ++i) {
        const __m256i v = _mm256_shuffle_epi8(tbl, nibbles32(x[i].qs));
        const int s = hsum32(_mm256_madd_epi16(mul_s8(v, y[i].qs), ones));
        float dx;
        if constexpr (kFp4) {
            dx = e8m0_half(x[i].e);
        } else {
            dx = h2f(x[i].d);
        }
        sum = __builtin_fmaf(dx * h2f(y[i].d), static_cast<float>(s), sum);
    }
    return sum;
}

// ---- packed layouts: register widths ----
//
// As packed_kquants_avx2.cc: the steps are written once for a lanes type, Lanes8 (one group,
// 8 rows in the 32-bit lanes of a 256-bit register) and, with AVX-512, Lanes16 (two adjacent
// groups in the halves of a 512-bit register). Every lane goes through the same operations at
// either width, so a row's output has the same bits.
struct Lanes8 {
    using I = __m256i;
    using F = __m256;
    static constexpr int kRows = 8;
    const uint8_t* w;
    static Lanes8 of(const uint8_t* g, int64_t) { return {g}; }
    I load(int64_t off) const { return ld256(w + off); }
    F f16(int64_t off) const { return _mm256_cvtph_ps(ld128(w + off)); }
    I u8(int64_t off) const { return _mm256_cvtepu8_epi32(ld64(w + off)); }    // 8 bytes -> lanes
    I u16(int64_t off) const { return _mm256_cvtepu16_epi32(ld128(w + off)); }  // 8 uint16 -> lanes
    Lanes8 at(int64_t off) const { return {w + off}; }
};

inline __m256i v_and(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
inline __m256i v_or(__m256i a, __m256i b) { return _mm256_or_si256(a, b); }
inline __m256i v_add32(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
inline __m256i v_sub32(__m256i a, __m256i b) { return _mm256_sub_epi32(a, b); }
inline __m256i v_mullo32(__m256i a, __m256i b) { return _mm256_mullo_epi32(a, b); }
inline __m256i v_madd16(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }
inline __m256i v_srli16(__m256i a, int n) { return _mm256_srli_epi16(a, n); }
inline __m256i v_slli16(__m256i a, int n) { return _mm256_slli_epi16(a, n); }
inline __m256i v_srli32(__m256i a, int n) { return _mm256_srli_epi32(a, n); }
inline __m256i v_slli32(__m256i a, int n) { return _mm256_slli_epi32(a, n); }
inline __m256i v_shuffle8(__m256i a, __m256i table) { return _mm256_shuffle_epi8(table, a); }
inline __m256 v_add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 v_sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
inline __m256 v_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
inline __m256 v_fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 v_cvt(__m256i a) { return _mm256_cvtepi32_ps(a); }
inline void v_store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
// 2^(e - 128) as float for the e in each lane, as e8m0_half.
inline __m256 v_e8m0_half(__m256i e) {
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i den = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(den, norm, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}
template <class I>
I v_set1_32(int32_t v);
template <>
inline __m256i v_set1_32<__m256i>(int32_t v) { return _mm256_set1_epi32(v); }
template <class I>
I v_set1_8(char v);
template <>
inline __m256i v_set1_8<__m256i>(char v) { return _mm256_set1_epi8(v); }
template <class F>
F v_set1_ps(float v);
template <>
inline __m256 v_set1_ps<__m256>(float v) { return _mm256_set1_ps(v); }

#if FERROX_AVX512
struct Lanes16 {
    using I = __m512i;
    using F = __m512;
    static constexpr int kRows = 16;
    const uint8_t* w0;
    const uint8_t* w1;
    static Lanes16 of(const uint8_t* p, int64_t group_bytes) { return {p, p + group_bytes}; }
    I load(int64_t off) const { return load2x256(w0 + off, w1 + off); }
    F f16(int64_t off) const { return cvt2x8_f16(w0 + off, w1 + off); }
    I u8(int64_t off) const {
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu8_epi32(ld64(w0 + off))),
                                  _mm256_cvtepu8_epi32(ld64(w1 + off)), 1);
    }
    I u16(int64_t off) const {
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu16_epi32(ld128(w0 + off))),
                                  _mm256_cvtepu16_epi32(ld128(w1 + off)), 1);
    }
    Lanes16 at(int64_t off) const { return {w0 + off, w1 + off}; }
};

inline __m512i v_and(__m512i a, __m512i b) { return _mm512_and_si512(a, b); }
inline __m512i v_or(__m512i a, __m512i b) { return _mm512_or_si512(a, b); }
inline __m512i v_add32(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
inline __m512i v_sub32(__m512i a, __m512i b) { return _mm512_sub_epi32(a, b); }
inline __m512i v_mullo32(__m512i a, __m512i b) { return _mm512_mullo_epi32(a, b); }
inline __m512i v_madd16(__m512i a, __m512i b) { return _mm512_madd_epi16(a, b); }
inline __m512i v_srli16(__m512i a, int n) { return _mm512_srli_epi16(a, n); }
inline __m512i v_slli16(__m512i a, int n) { return _mm512_slli_epi16(a, n); }
inline __m512i v_srli32(__m512i a, int n) { return _mm512_srli_epi32(a, n); }
inline __m512i v_slli32(__m512i a, int n) { return _mm512_slli_epi32(a, n); }
// table: a 16-byte table in both 128-bit halves of a 256-bit register.
inline __m512i v_shuffle8(__m512i a, __m256i table) {
    return _mm512_shuffle_epi8(_mm512_broadcast_i64x4(table), a);
}
inline __m512 v_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 v_sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
inline __m512 v_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
inline __m512 v_fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline __m512 v_cvt(__m512i a) { return _mm512_cvtepi32_ps(a); }
inline void v_store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline __m512 v_e8m0_half(__m512i e) {
    const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i den = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), den, norm));
}
template <>
inline __m512i v_set1_32<__m512i>(int32_t v) { return _mm512_set1_epi32(v); }
template <>
inline __m512i v_set1_8<__m512i>(char v) { return _mm512_set1_epi8(v); }
template <>
inline __m512 v_set1_ps<__m512>(float v) { return _mm512_set1_ps(v); }
#endif

// The 4 bytes at p, in every 32-bit lane.
template <class I>
inline I v_bcast4(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v_set1_32<I>(v);
}

// v, opaque to the optimiser (keeps GCC from reassociating integer chains into trees that spill).
inline __m256i opaque(__m256i v) {
    asm("" : "+x"(v));
    return v;
}

// Row r's 4 bytes at src + off (rows row_bytes apart) -> dst[4r .. 4r + 3], r = 0..7.
inline void gather4(const uint8_t* src, int64_t row_bytes, int64_t off, uint8_t* dst) {
    for (int r = 0; r < 8; ++r) std::memcpy(dst + 4 * r, src + r * row_bytes + off, 4);
}
// Row r's byte at src + off -> dst[r].
inline void gather1(const uint8_t* src, int64_t row_bytes, int64_t off, uint8_t* dst) {
    for (int r = 0; r < 8; ++r) dst[r] = src[r * row_bytes + off];
}

// Repacks every group of 8 rows, block by block, with pack(rows, row_bytes, block offset, out).
template <int64_t kBlock, int kElems, typename Pack>
void repack_groups(const void* src, int64_t n, int64_t n_rows, void* dst, Pack pack) {
    const int64_t nb = n / kElems;
    const int64_t row_bytes = nb * kBlock;
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        const uint8_t* rows = s + g * 8 * row_bytes;
        uint8_t* out = d + g * 8 * row_bytes;
        for (int64_t i = 0; i < nb; ++i) pack(rows, row_bytes, i * kBlock, out + i * 8 * kBlock);
    }
}

// ---- Q2_K / Q3_K ----

void repack8_q2k(const void* src, int64_t n, int64_t n_rows, void* dst) {
    repack_groups<sizeof(BlockQ2_K), kQK_K>(src, n, n_rows, dst, [](const uint8_t* rows, int64_t rb, int64_t b, uint8_t* out) {
        for (int r = 0; r < 8; ++r) {
            std::memcpy(out + 2 * r, rows + r * rb + b + offsetof(BlockQ2_K, d), 2);
            std::memcpy(out + 16 + 2 * r, rows + r * rb + b + offsetof(BlockQ2_K, dmin), 2);
        }
        for (int j = 0; j < 16; ++j) gather1(rows, rb, b + offsetof(BlockQ2_K, scales) + j, out + 32 + 8 * j);
        for (int v = 0; v < 16; ++v)
            gather4(rows, rb, b + offsetof(BlockQ2_K, qs) + 32 * (v / 8) + 4 * (v % 8), out + 160 + 32 * v);
    });
}

void repack8_q3k(const void* src, int64_t n, int64_t n_rows, void* dst) {
    repack_groups<sizeof(BlockQ3_K), kQK_K>(src, n, n_rows, dst, [](const uint8_t* rows, int64_t rb, int64_t b, uint8_t* out) {
        for (int r = 0; r < 8; ++r) std::memcpy(out + 2 * r, rows + r * rb + b + offsetof(BlockQ3_K, d), 2);
        for (int k = 0; k < 12; ++k) gather1(rows, rb, b + offsetof(BlockQ3_K, scales) + k, out + 16 + 8 * k);
        for (int k = 0; k < 8; ++k) gather4(rows, rb, b + offsetof(BlockQ3_K, hmask) + 4 * k, out + 112 + 32 * k);
        for (int v = 0; v < 16; ++v)
            gather4(rows, rb, b + offsetof(BlockQ3_K, qs) + 32 * (v / 8) + 4 * (v % 8), out + 368 + 32 * v);
    });
}

// Quant vector (h, s, k) of a packed Q2_K / Q3_K group: in lane r, row r's quants (Q3_K: q + 4)
// of elements 128h + 32s + 4k .. + 3, one byte each.
template <bool kQ3, class L>
inline typename L::I q23_quants(const L& g, int h, int s, int k) {
    using I = typename L::I;
    const I raw = g.load((kQ3 ? 368 : 160) + 32 * (8 * h + k));
    const I q = v_and(v_srli16(raw, 2 * s), v_set1_8<I>(3));
    if constexpr (!kQ3) {
        return q;
    } else {
        // Bit 4h + s of each hmask byte -> bit 2.
        const I hm = g.load(112 + 32 * k);
        const int b = 4 * h + s;
        const I hb = b >= 2 ? v_srli16(hm, b - 2) : v_slli16(hm, 2 - b);
        return v_or(q, v_and(hb, v_set1_8<I>(4)));
    }
}

// A Q2_K / Q3_K super-block's per-row scales. sc[j]: sub-block j's scale as the int16 pair
// (sc, 0) (VNNI: one madd scales a 32-bit sub-block sum) or (sc, sc) (AVX2: one madd scales a
// pair of 16-bit sums); mp[k]: the pairs (c_2k, c_2k+1) of the bsums coefficients (Q2_K's mins,
// Q3_K's scales).
template <class L>
struct Q23Scales {
    typename L::I sc[16];
    typename L::I mp[8];
};

template <class I>
inline I pair_of(I lo, I hi) {  // int16 pair (lo, hi) from two 32-bit lanes of small values
    return v_or(v_and(lo, v_set1_32<I>(0xffff)), v_slli32(hi, 16));
}

template <bool kQ3, class L>
inline void q23_scales(const L& g, Q23Scales<L>* s) {
    using I = typename L::I;
    I c[16];
    FX_UNROLL
    for (int j = 0; j < 16; ++j) {
        I sc;
        if constexpr (!kQ3) {
            const I raw = g.u8(32 + 8 * j);
            sc = v_and(raw, v_set1_32<I>(15));
            c[j] = v_srli32(raw, 4);
        } else {
            const I lo = v_and(v_srli32(g.u8(16 + 8 * (j % 8)), 4 * (j / 8)), v_set1_32<I>(15));
            const I hi = v_and(v_srli32(g.u8(80 + 8 * (j % 4)), 2 * (j / 4)), v_set1_32<I>(3));
            sc = v_sub32(v_or(lo, v_slli32(hi, 4)), v_set1_32<I>(32));
            c[j] = sc;
        }
#if FERROX_AVX512
        s->sc[j] = v_and(sc, v_set1_32<I>(0xffff));
#else
        s->sc[j] = pair_of(sc, sc);
#endif
    }
    FX_UNROLL
    for (int k = 0; k < 8; ++k) s->mp[k] = pair_of(c[2 * k], c[2 * k + 1]);
}

// sum_j c_j[r] * bsums_j in lane r.
template <class L>
inline typename L::I bsums_term(const typename L::I* mp, const int16_t* bsums) {
    using I = typename L::I;
    I t = v_madd16(mp[0], v_bcast4<I>(bsums));
    FX_UNROLL
    for (int k = 1; k < 8; ++k) t = v_add32(t, v_madd16(mp[k], v_bcast4<I>(bsums + 2 * k)));
    return t;
}

// One super-block of a Q2_K / Q3_K group (or pair) against NC activation blocks: acc[c] += the
// block's term. quants(h, s, k) gives the quant vectors.
template <bool kQ3, int NC, class L, typename Quants>
inline void q23_superblock(Quants quants, const Q23Scales<L>& s, typename L::F d, typename L::F dmin,
                           const BlockQ8_K* const* y, typename L::F* acc) {
    using I = typename L::I;
    using F = typename L::F;
    I sumq[NC];
    FX_UNROLL
    for (int c = 0; c < NC; ++c) {
        // Q3_K: sum sc_j * (u - 4) * y = sum sc_j * u * y - 4 * sum_j sc_j * bsums_j.
        sumq[c] = kQ3 ? v_sub32(v_set1_32<I>(0), v_slli32(bsums_term<L>(s.mp, y[c]->bsums), 2)) : v_set1_32<I>(0);
    }
    FX_UNROLL
    for (int h = 0; h < 2; ++h) {
        FX_UNROLL
        for (int t = 0; t < 4; ++t) {
            FX_UNROLL
            for (int half = 0; half < 2; ++half) {
                const int j = 8 * h + 2 * t + half;  // the sub-block: elements 16j .. 16j + 15
                I sub[NC];
                FX_UNROLL
                for (int c = 0; c < NC; ++c) sub[c] = v_set1_32<I>(0);
                FX_UNROLL
                for (int k = 4 * half; k < 4 * half + 4; ++k) {
                    const I q = quants(h, t, k);
                    FX_UNROLL
                    for (int c = 0; c < NC; ++c) {
                        const I yb = v_bcast4<I>(y[c]->qs + 128 * h + 32 * t + 4 * k);
#if FERROX_AVX512
                        sub[c] = dpbusd(sub[c], q, yb);
#else
                        sub[c] = _mm256_add_epi16(sub[c], _mm256_maddubs_epi16(q, yb));
#endif
                    }
                }
                FX_UNROLL
                for (int c = 0; c < NC; ++c) sumq[c] = v_add32(sumq[c], v_madd16(sub[c], s.sc[j]));
            }
        }
    }
    FX_UNROLL
    for (int c = 0; c < NC; ++c) {
        const F yd = v_set1_ps<F>(y[c]->d);
        const F t1 = v_mul(v_mul(yd, d), v_cvt(sumq[c]));
        if constexpr (kQ3) {
            acc[c] = v_add(acc[c], t1);
        } else {
            const F t2 = v_mul(v_mul(yd, dmin), v_cvt(bsums_term<L>(s.mp, y[c]->bsums)));
            acc[c] = v_add(acc[c], v_sub(t1, t2));
        }
    }
}

template <class L>
struct Q23Unpacked {
    typename L::I q[64];  // q[32h + 8t + k] = quants(h, t, k)
    Q23Scales<L> s;
    typename L::F d, dmin;
};

template <bool kQ3, class L>
struct Q23Traits {
    static constexpr int64_t kGroup = 8 * static_cast<int64_t>(kQ3 ? sizeof(BlockQ3_K) : sizeof(BlockQ2_K));
    static constexpr int kElems = kQK_K;
    using Act = BlockQ8_K;
    using Unpacked = Q23Unpacked<L>;
    static constexpr bool kYSum = false;
    template <int NC>
    static void direct(const L& g, const Act* const* y, typename L::F* acc, const int32_t* = nullptr) {
        Q23Scales<L> s;
        q23_scales<kQ3>(g, &s);
        const typename L::F dmin = kQ3 ? g.f16(0) : g.f16(16);
        q23_superblock<kQ3, NC>([&g](int h, int t, int k) { return q23_quants<kQ3>(g, h, t, k); }, s, g.f16(0), dmin, y,
                                acc);
    }
    static void unpack(const L& g, Unpacked* u) {
        FX_UNROLL
        for (int h = 0; h < 2; ++h) {
            FX_UNROLL
            for (int t = 0; t < 4; ++t) {
                FX_UNROLL
                for (int k = 0; k < 8; ++k) u->q[32 * h + 8 * t + k] = q23_quants<kQ3>(g, h, t, k);
            }
        }
        q23_scales<kQ3>(g, &u->s);
        u->d = g.f16(0);
        u->dmin = kQ3 ? g.f16(0) : g.f16(16);
    }
    template <int NC>
    static void unpacked(const Unpacked& u, const Act* const* y, typename L::F* acc, const int32_t* = nullptr) {
        q23_superblock<kQ3, NC>([&u](int h, int t, int k) { return u.q[32 * h + 8 * t + k]; }, u.s, u.d, u.dmin, y, acc);
    }
};
template <class L>
using Q2KTraits = Q23Traits<false, L>;
template <class L>
using Q3KTraits = Q23Traits<true, L>;

// ---- IQ4_XS ----

void repack8_iq4xs(const void* src, int64_t n, int64_t n_rows, void* dst) {
    repack_groups<sizeof(BlockIQ4_XS), kQK_K>(src, n, n_rows, dst, [](const uint8_t* rows, int64_t rb, int64_t b, uint8_t* out) {
        for (int r = 0; r < 8; ++r) {
            std::memcpy(out + 2 * r, rows + r * rb + b + offsetof(BlockIQ4_XS, d), 2);
            std::memcpy(out + 16 + 2 * r, rows + r * rb + b + offsetof(BlockIQ4_XS, scales_h), 2);
        }
        for (int k = 0; k < 4; ++k) gather1(rows, rb, b + offsetof(BlockIQ4_XS, scales_l) + k, out + 32 + 8 * k);
        for (int v = 0; v < 32; ++v) gather4(rows, rb, b + offsetof(BlockIQ4_XS, qs) + 4 * v, out + 64 + 32 * v);
    });
}

// Sub-block j's scales (ls_j - 32) per row: (ls, 0) int16 pairs for AVX2's madd, plain int32 for
// VNNI's mullo; lp[k] = the pairs (ls_2k, ls_2k+1) for the bsums correction (VNNI).
template <class L>
struct XsScales {
    typename L::I ls[8];
    typename L::I lp[4];
};

template <class L>
inline void xs_scales(const L& g, XsScales<L>* s) {
    using I = typename L::I;
    const I h = g.u16(16);
    I v[8];
    FX_UNROLL
    for (int j = 0; j < 8; ++j) {
        const I lo = v_and(v_srli32(g.u8(32 + 8 * (j / 2)), 4 * (j % 2)), v_set1_32<I>(15));
        const I hi = v_and(v_srli32(h, 2 * j), v_set1_32<I>(3));
        v[j] = v_sub32(v_or(lo, v_slli32(hi, 4)), v_set1_32<I>(32));
#if FERROX_AVX512
        s->ls[j] = v[j];
#else
        s->ls[j] = pair_of(v[j], v[j]);
#endif
    }
    FX_UNROLL
    for (int k = 0; k < 4; ++k) s->lp[k] = pair_of(v[2 * k], v[2 * k + 1]);
}

// Quant vector m (0..7) of sub-block j: lane r = row r's level indices (nibbles) of elements
// 32j + 4(m % 4) + b (+ 16 for m >= 4).
template <class L>
inline typename L::I xs_nibbles(const L& g, int j, int m) {
    using I = typename L::I;
    const I raw = g.load(64 + 32 * (4 * j + m % 4));
    return m < 4 ? v_and(raw, v_set1_8<I>(15)) : v_and(v_srli16(raw, 4), v_set1_8<I>(15));
}
inline int xs_offset(int j, int m) { return 32 * j + 16 * (m / 4) + 4 * (m % 4); }

// IQ4's levels plus 128, unsigned (VNNI multiplies them by the signed activations).
alignas(16) constexpr uint8_t kNLU[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
// MXFP4's plus 128.
alignas(16) constexpr uint8_t kFP4U[16] = {128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116};

// One super-block of an IQ4_XS group (or pair) against NC activation blocks: acc[c] += the
// block's term. quants(8j + m): VNNI: levels + 128; AVX2: |levels|, signs(8j + m) the levels.
template <int NC, class L, typename Quants, typename Signs>
inline void xs_superblock(Quants quants, [[maybe_unused]] Signs signs, const XsScales<L>& s, typename L::F d,
                          const BlockQ8_K* const* y, typename L::F* acc) {
    using I = typename L::I;
    using F = typename L::F;
    I sumq[NC];
#if FERROX_AVX512
    // sum ls_j * (v + 128) * y = sum ls_j * v * y + 128 * sum_j ls_j * (bsums_2j + bsums_2j+1).
    FX_UNROLL
    for (int c = 0; c < NC; ++c) {
        const __m256i bs = ld256(y[c]->bsums);
        const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        alignas(16) int32_t pr[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(pr), pairs);
        I corr = v_madd16(s.lp[0], v_set1_32<I>(pr[0]));
        FX_UNROLL
        for (int k = 1; k < 4; ++k) corr = v_add32(corr, v_madd16(s.lp[k], v_set1_32<I>(pr[k])));
        sumq[c] = v_sub32(v_set1_32<I>(0), v_slli32(corr, 7));
    }
    FX_UNROLL
    for (int j = 0; j < 8; ++j) {
        I sub[NC];
        FX_UNROLL
        for (int c = 0; c < NC; ++c) sub[c] = v_set1_32<I>(0);
        FX_UNROLL
        for (int m = 0; m < 8; ++m) {
            FX_UNROLL
            for (int c = 0; c < NC; ++c)
                sub[c] = dpbusd(sub[c], quants(8 * j + m), v_bcast4<I>(y[c]->qs + xs_offset(j, m)));
        }
        FX_UNROLL
        for (int c = 0; c < NC; ++c) sumq[c] = v_add32(sumq[c], v_mullo32(sub[c], s.ls[j]));
    }
#else
    FX_UNROLL
    for (int c = 0; c < NC; ++c) sumq[c] = _mm256_setzero_si256();
    FX_UNROLL
    for (int j = 0; j < 8; ++j) {
        FX_UNROLL
        for (int m = 0; m < 8; ++m) {
            FX_UNROLL
            for (int c = 0; c < NC; ++c) {
                const __m256i yb = _mm256_sign_epi8(v_bcast4<__m256i>(y[c]->qs + xs_offset(j, m)), signs(8 * j + m));
                const __m256i p = _mm256_maddubs_epi16(quants(8 * j + m), yb);
                sumq[c] = opaque(_mm256_add_epi32(sumq[c], _mm256_madd_epi16(p, s.ls[j])));
            }
        }
    }
#endif
    FX_UNROLL
    for (int c = 0; c < NC; ++c) {
        const F yd = v_set1_ps<F>(y[c]->d);
        acc[c] = v_add(acc[c], v_mul(v_mul(yd, d), v_cvt(sumq[c])));
    }
}

template <class L>
struct XsUnpacked {
    typename L::I q[64];  // q[8j + m]: VNNI: levels + 128; AVX2: |levels|
#if !FERROX_AVX512
    __m256i sgn[64];  // AVX2: the levels (their signs)
#endif
    XsScales<L> s;
    typename L::F d;
};

template <class L>
struct XsTraits {
    static constexpr int64_t kGroup = 8 * static_cast<int64_t>(sizeof(BlockIQ4_XS));
    static constexpr int kElems = kQK_K;
    using Act = BlockQ8_K;
    using Unpacked = XsUnpacked<L>;
    static constexpr bool kYSum = false;
    static void unpack(const L& g, Unpacked* u) {
#if FERROX_AVX512
        const __m256i tbl = tbl256(kNLU);
        FX_UNROLL
        for (int i = 0; i < 64; ++i) u->q[i] = v_shuffle8(xs_nibbles(g, i / 8, i % 8), tbl);
#else
        const __m256i tbl = tbl256(kNL);
        FX_UNROLL
        for (int i = 0; i < 64; ++i) {
            const __m256i v = _mm256_shuffle_epi8(tbl, xs_nibbles(g, i / 8, i % 8));
            u->sgn[i] = v;
            u->q[i] = _mm256_sign_epi8(v, v);
        }
#endif
        xs_scales(g, &u->s);
        u->d = g.f16(0);
    }
    template <int NC>
    static void unpacked(const Unpacked& u, const Act* const* y, typename L::F* acc, const int32_t* = nullptr) {
#if FERROX_AVX512
        xs_superblock<NC, L>([&u](int i) { return u.q[i]; }, [](int) { return 0; }, u.s, u.d, y, acc);
#else
        xs_superblock<NC, L>([&u](int i) { return u.q[i]; }, [&u](int i) { return u.sgn[i]; }, u.s, u.d, y, acc);
#endif
    }
    template <int NC>
    static void direct(const L& g, const Act* const* y, typename L::F* acc, const int32_t* = nullptr) {
#if FERROX_AVX512
        // VNNI: the levels decoded in registers as the products take them.
        XsScales<L> s;
        xs_scales(g, &s);
        const __m256i tbl = tbl256(kNLU);
        xs_superblock<NC, L>([&g, tbl](int i) { return v_shuffle8(xs_nibbles(g, i / 8, i % 8), tbl); }, [](int) { return 0; },
                             s, g.f16(0), y, acc);
#else
        Unpacked u;
        unpack(g, &u);
        unpacked<NC>(u, y, acc);
#endif
    }
};

// ---- IQ4_NL / MXFP4 ----

template <bool kFp4>
void repack8_nl32(const void* src, int64_t n, int64_t n_rows, void* dst) {
    using Block = std::conditional_t<kFp4, BlockMXFP4, BlockIQ4_NL>;
    constexpr int64_t kHead = kFp4 ? 8 : 16;
    repack_groups<sizeof(Block), kQK>(src, n, n_rows, dst, [](const uint8_t* rows, int64_t rb, int64_t b, uint8_t* out) {
        if constexpr (kFp4) {
            gather1(rows, rb, b + offsetof(BlockMXFP4, e), out);
        } else {
            for (int r = 0; r < 8; ++r) std::memcpy(out + 2 * r, rows + r * rb + b + offsetof(BlockIQ4_NL, d), 2);
        }
        for (int k = 0; k < 4; ++k) gather4(rows, rb, b + offsetof(Block, qs) + 4 * k, out + kHead + 32 * k);
    });
}

template <bool kFp4, class L>
struct Nl32Unpacked {
    typename L::I q[8];  // q[m]: elements 16 (m / 4) + 4 (m % 4) + b; VNNI: levels; AVX2: |levels|
#if FERROX_AVX512
    typename L::I corr;  // 128 * sum of the row's levels
#else
    __m256i sgn[8];
#endif
    typename L::F dx;
};

template <bool kFp4, class L>
struct Nl32Traits {
    static constexpr int64_t kGroup = 8 * static_cast<int64_t>(kFp4 ? sizeof(BlockMXFP4) : sizeof(BlockIQ4_NL));
    static constexpr int64_t kHead = kFp4 ? 8 : 16;
    static constexpr int kElems = kQK;
    using Act = BlockQ8_0;
    using Unpacked = Nl32Unpacked<kFp4, L>;
    // VNNI decode and small batches: 128 * sum(y) of each activation block, from the caller.
    static constexpr bool kYSum = FERROX_AVX512 != 0;
    static void unpack(const L& g, Unpacked* u) {
        using I = typename L::I;
        const __m256i tbl = tbl256(kFp4 ? kFP4 : kNL);
#if FERROX_AVX512
        I corr = v_set1_32<I>(0);
#endif
        FX_UNROLL
        for (int m = 0; m < 8; ++m) {
            const I raw = g.load(kHead + 32 * (m % 4));
            const I nib = m < 4 ? v_and(raw, v_set1_8<I>(15)) : v_and(v_srli16(raw, 4), v_set1_8<I>(15));
            const I v = v_shuffle8(nib, tbl);
#if FERROX_AVX512
            u->q[m] = v;
            corr = dpbusd(corr, v_set1_8<I>(static_cast<char>(0x80)), v);
#else
            u->sgn[m] = v;
            u->q[m] = _mm256_sign_epi8(v, v);
#endif
        }
#if FERROX_AVX512
        u->corr = corr;
#endif
        if constexpr (kFp4) {
            u->dx = v_e8m0_half(g.u8(0));
        } else {
            u->dx = g.f16(0);
        }
    }
    template <int NC>
    static void unpacked(const Unpacked& u, const Act* const* y, typename L::F* acc, const int32_t* = nullptr) {
        using I = typename L::I;
        I s[NC];
#if FERROX_AVX512
        // (y + 128) * v summed, less 128 * sum(v): y's bytes with the top bit flipped, unsigned.
        alignas(32) uint8_t yx[NC][32];
        FX_UNROLL
        for (int c = 0; c < NC; ++c) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(yx[c]),
                               _mm256_xor_si256(ld256(y[c]->qs), _mm256_set1_epi8(static_cast<char>(0x80))));
            s[c] = v_set1_32<I>(0);
        }
        FX_UNROLL
        for (int m = 0; m < 8; ++m) {
            FX_UNROLL
            for (int c = 0; c < NC; ++c) s[c] = dpbusd(s[c], v_bcast4<I>(yx[c] + 16 * (m / 4) + 4 * (m % 4)), u.q[m]);
        }
        FX_UNROLL
        for (int c = 0; c < NC; ++c) s[c] = v_sub32(s[c], u.corr);
#else
        const __m256i ones = _mm256_set1_epi16(1);
        FX_UNROLL
        for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
        FX_UNROLL
        for (int m = 0; m < 8; ++m) {
            FX_UNROLL
            for (int c = 0; c < NC; ++c) {
                const __m256i yb = _mm256_sign_epi8(v_bcast4<__m256i>(y[c]->qs + 16 * (m / 4) + 4 * (m % 4)), u.sgn[m]);
                s[c] = opaque(_mm256_add_epi32(s[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u.q[m], yb), ones)));
            }
        }
#endif
        finish<NC>(u.dx, s, y, acc);
    }
    // acc[c] = fma(dx * dy, s, acc[c]), block_add's step.
    template <int NC>
    static void finish(typename L::F dx, const typename L::I* s, const Act* const* y, typename L::F* acc) {
        using F = typename L::F;
        FX_UNROLL
        for (int c = 0; c < NC; ++c) {
            const F dxdy = v_mul(dx, v_set1_ps<F>(f16_to_f32(y[c]->d)));
            acc[c] = v_fma(dxdy, v_cvt(s[c]), acc[c]);
        }
    }
    template <int NC>
    static void direct(const L& g, const Act* const* y, typename L::F* acc, [[maybe_unused]] const int32_t* ysum) {
#if FERROX_AVX512
        // VNNI: the levels plus 128 (unsigned) times y, less 128 * sum(y): no weight sums, no
        // flipped copy of y.
        using I = typename L::I;
        const __m256i tbl = tbl256(kFp4 ? kFP4U : kNLU);
        I s[NC];
        FX_UNROLL
        for (int c = 0; c < NC; ++c) s[c] = v_set1_32<I>(0);
        FX_UNROLL
        for (int m = 0; m < 8; ++m) {
            const I raw = g.load(kHead + 32 * (m % 4));
            const I u = v_shuffle8(m < 4 ? v_and(raw, v_set1_8<I>(15)) : v_and(v_srli16(raw, 4), v_set1_8<I>(15)), tbl);
            FX_UNROLL
            for (int c = 0; c < NC; ++c) s[c] = dpbusd(s[c], u, v_bcast4<I>(y[c]->qs + 16 * (m / 4) + 4 * (m % 4)));
        }
        FX_UNROLL
        for (int c = 0; c < NC; ++c) s[c] = v_sub32(s[c], v_set1_32<I>(ysum[c]));
        if constexpr (kFp4) {
            finish<NC>(v_e8m0_half(g.u8(0)), s, y, acc);
        } else {
            finish<NC>(g.f16(0), s, y, acc);
        }
#else
        Unpacked u;
        unpack(g, &u);
        unpacked<NC>(u, y, acc);
#endif
    }
};
template <class L>
using NlTraits = Nl32Traits<false, L>;
template <class L>
using Fp4Traits = Nl32Traits<true, L>;

// ---- drivers ----

// NC activation rows against one 8-row group, each block unpacked in registers (decode and
// small batches): out[c * out_stride + r].
// ysum (T::kYSum): 128 * sum of the activation bytes of block i of column c at ysum[c * kMaxBlocks + i].
constexpr int64_t kMaxBlocks = 1024;

template <class T, int NC>
void gemm_group_direct(int64_t nb, const uint8_t* w, const uint8_t* a, int64_t a_row_bytes, float* out,
                       int64_t out_stride, const int32_t* ysum) {
    using Act = typename T::Act;
    __m256 acc[NC];
    FX_UNROLL
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const Act* y[NC];
        FX_UNROLL
        for (int c = 0; c < NC; ++c)
            y[c] = reinterpret_cast<const Act*>(a + c * a_row_bytes + i * static_cast<int64_t>(sizeof(Act)));
        int32_t ys[NC] = {};
        if constexpr (T::kYSum) {
            FX_UNROLL
            for (int c = 0; c < NC; ++c) ys[c] = ysum[c * kMaxBlocks + i];
        }
        prefetch_ahead<T::kGroup, _MM_HINT_NTA>(w + i * T::kGroup);
        T::template direct<NC>(Lanes8{w + i * T::kGroup}, y, acc, ys);
    }
    FX_UNROLL
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out + c * out_stride, acc[c]);
}

template <class T, int NC, class F>
inline void unpacked_cols(const typename T::Unpacked& u, const uint8_t* a, int64_t a_row_bytes, F* acc) {
    using Act = typename T::Act;
    const Act* y[NC];
    FX_UNROLL
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const Act*>(a + c * a_row_bytes);
    T::template unpacked<NC>(u, y, acc);
}

// From this many activation rows on, each block of a group is unpacked once to memory and
// reused for up to kColBlock activation rows, 4 at a time.
constexpr int64_t kUnpackMinCols = 4;
constexpr int64_t kColBlock = 64;

template <template <class> class Tr, class L>
void gemm_unpacked(int64_t nb, const uint8_t* w, int64_t n_units, const uint8_t* a, int64_t a_row_bytes,
                   int64_t n_cols, float* out, int64_t out_stride) {
    using T = Tr<L>;
    using F = typename L::F;
    constexpr int64_t kAct = static_cast<int64_t>(sizeof(typename T::Act));
    typename T::Unpacked u;
    F acc[kColBlock];
    const int64_t group_bytes = nb * T::kGroup;
    for (int64_t g = 0; g < n_units; ++g) {
        const L lanes = L::of(w + g * (L::kRows / 8) * group_bytes, group_bytes);
        for (int64_t c0 = 0; c0 < n_cols; c0 += kColBlock) {
            const int64_t nc = n_cols - c0 < kColBlock ? n_cols - c0 : kColBlock;
            for (int64_t c = 0; c < nc; ++c) acc[c] = v_set1_ps<F>(0.0f);
            for (int64_t i = 0; i < nb; ++i) {
                T::unpack(lanes.at(i * T::kGroup), &u);
                const uint8_t* ai = a + c0 * a_row_bytes + i * kAct;
                int64_t c = 0;
                for (; c + 4 <= nc; c += 4) unpacked_cols<T, 4>(u, ai + c * a_row_bytes, a_row_bytes, acc + c);
                switch (nc - c) {
                    case 3:
                        unpacked_cols<T, 3>(u, ai + c * a_row_bytes, a_row_bytes, acc + c);
                        break;
                    case 2:
                        unpacked_cols<T, 2>(u, ai + c * a_row_bytes, a_row_bytes, acc + c);
                        break;
                    case 1:
                        unpacked_cols<T, 1>(u, ai + c * a_row_bytes, a_row_bytes, acc + c);
                        break;
                    default:
                        break;
                }
            }
            for (int64_t c = 0; c < nc; ++c) v_store(out + (c0 + c) * out_stride + L::kRows * g, acc[c]);
        }
    }
}

template <template <class> class Tr>
void gemm_packed8_lowbit(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                         int64_t n_cols, float* out, int64_t out_stride) {
    using T = Tr<Lanes8>;
    const int64_t nb = n / T::kElems;
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* ap = static_cast<const uint8_t*>(a);
    if (n_cols < kUnpackMinCols) {
        int32_t ysum[kUnpackMinCols - 1][kMaxBlocks];
        if constexpr (T::kYSum) {
            CHECK_MSG(nb <= kMaxBlocks, "gemm_packed8: more than 1024 blocks in a row");
            for (int64_t c = 0; c < n_cols; ++c) {
                for (int64_t i = 0; i < nb; ++i) {
                    const __m256i q = ld256(ap + c * a_row_bytes + i * kQ80Bytes + offsetof(BlockQ8_0, qs));
                    ysum[c][i] = 128 * hsum32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                                                _mm256_set1_epi16(1)));
                }
            }
        }
        for (int64_t g = 0; g < n_rows / 8; ++g) {
            const uint8_t* wg = wp + g * nb * T::kGroup;
            float* o = out + 8 * g;
            switch (n_cols) {
                case 3:
                    gemm_group_direct<T, 3>(nb, wg, ap, a_row_bytes, o, out_stride, &ysum[0][0]);
                    break;
                case 2:
                    gemm_group_direct<T, 2>(nb, wg, ap, a_row_bytes, o, out_stride, &ysum[0][0]);
                    break;
                case 1:
                    gemm_group_direct<T, 1>(nb, wg, ap, a_row_bytes, o, out_stride, &ysum[0][0]);
                    break;
                default:
                    break;
            }
        }
        return;
    }
    int64_t g = 0;  // the first group the 8-row form takes
#if FERROX_AVX512
    gemm_unpacked<Tr, Lanes16>(nb, wp, n_rows / 16, ap, a_row_bytes, n_cols, out, out_stride);
    g = n_rows / 16 * 2;
#endif
    gemm_unpacked<Tr, Lanes8>(nb, wp + g * nb * T::kGroup, n_rows / 8 - g, ap, a_row_bytes, n_cols, out + 8 * g,
                              out_stride);
}

}  // namespace

namespace detail::FERROX_ISA_NS {
void override_packed_lowbit(QuantKernels* table) {
    // The activation quantizers of the types with the same partner (quants_avx2.cc's, set before).
    const auto act_q8_0 = table[kernel_index(DType::kQ8_0)].quantize_act_row;
    const auto act_q8_k = table[kernel_index(DType::kQ4_K)].quantize_act_row;
    auto set = [&](DType t, float (*dot)(int64_t, const void*, const void*),
                   void (*rows)(int64_t, const void*, int64_t, int64_t, const void*, float*),
                   void (*repack)(const void*, int64_t, int64_t, void*),
                   void (*gemm)(int64_t, const void*, int64_t, const void*, int64_t, int64_t, float*, int64_t)) {
        QuantKernels& k = table[kernel_index(t)];
        k.vec_dot = dot;
        k.vec_dot_rows = rows;
        k.repack8 = repack;
        k.gemm_packed8 = gemm;
        k.quantize_act_row = k.act_type == DType::kQ8_0 ? act_q8_0 : act_q8_k;
    };
    set(DType::kQ2_K, dot_q2_k, vec_dot_rows_loop<dot_q2_k>, repack8_q2k, gemm_packed8_lowbit<Q2KTraits>);
    set(DType::kQ3_K, dot_q3_k, vec_dot_rows_loop<dot_q3_k>, repack8_q3k, gemm_packed8_lowbit<Q3KTraits>);
    set(DType::kIQ4_XS, dot_iq4_xs, vec_dot_rows_loop<dot_iq4_xs>, repack8_iq4xs, gemm_packed8_lowbit<XsTraits>);
    set(DType::kIQ4_NL, dot_nl32<false>, vec_dot_rows_loop<dot_nl32<false>>, repack8_nl32<false>,
        gemm_packed8_lowbit<NlTraits>);
    set(DType::kMXFP4, dot_nl32<true>, vec_dot_rows_loop<dot_nl32<true>>, repack8_nl32<true>,
        gemm_packed8_lowbit<Fp4Traits>);
}
}  // namespace detail::FERROX_ISA_NS
}  // namespace ferrox

#else
namespace ferrox::detail::FERROX_ISA_NS {
void override_packed_lowbit(QuantKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
