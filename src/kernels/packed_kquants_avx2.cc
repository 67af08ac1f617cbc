// Packed (8 rows interleaved) layouts and matrix products for kquants: see QuantKernels::repack8
// and gemm_packed8 in quants.h. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off.
//
// Every packed super-block group (the same super-block of 8 consecutive rows) takes exactly 8
// times the bytes of one block, and group g of super-block i sits at g * 8 * row_bytes +
// i * 8 * block_bytes, so rows can be split at any multiple of 8. Within a group the quants are
// arranged so that one 32-byte load holds 4 consecutive quant bytes of each of the 8 rows
// (row r in bytes 4r..4r+3 = 32-bit lane r): multiplied (maddubs) against the broadcast of the
// 4 matching activation bytes, each 32-bit lane collects the partial dot product of its row.
//
// Q4_K group (1152 bytes):
//   [0, 16)     d, fp16, rows 0..7
//   [16, 32)    dmin, fp16, rows 0..7
//   [32, 128)   the 6-bit scales and mins, re-encoded (see pack_q4k_scales): low nibbles of the
//               scales (32 bytes), low nibbles of the mins (32), the 2 high bits of all (32)
//   [128, 1152) qs: vector c * 8 + k (c = 0..3, k = 0..7) holds, for row r, the original bytes
//               qs[32c + 4k .. 32c + 4k + 3]: elements 64c + 4k + b (low nibbles, sub-block 2c)
//               and 64c + 32 + 4k + b (high nibbles, sub-block 2c + 1).
// Q6_K group (1680 bytes):
//   [0, 16)     d, fp16, rows 0..7
//   [16, 144)   the int8 scales: vector t (0..3) holds sub-blocks 4t..4t+3; its 128-bit half
//               h holds rows 4h..4h+3, byte 4 * (j % 4) + (r % 4)
//   [144, 1680) 16 steps (h = 0..1, m = 0..7) of 96 bytes: row r's 4 bytes of ql[64h + 4m..],
//               of ql[64h + 32 + 4m..] and of qh[32h + 4m..]: elements 128h + {0,32,64,96} +
//               4m + b.
// Q5_K group (1408 bytes): as Q4_K, then [1152, 1408) qh: vector k (0..7) holds row r's
//   qh[4k .. 4k + 3].
//
// Float order: each (row, activation row) output is vec_dot_ref's: per super-block an exact
// integer sum (any order), then y.d * d * sumq - y.d * dmin * summ (Q4_K/Q5_K) or
// y.d * d * sumq (Q6_K) in that order, added to the running sum block by block; one output per
// float lane, the operations written as separate mul/sub/add (no contraction).
#include <cstddef>
#include <type_traits>

#include "kernels/isa_variant.h"
#include "kernels/kernels_internal.h"
#include "kernels/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kernels/simd_avx2.h"

namespace ferrox {
namespace {


constexpr int64_t kQ4KGroup = 8 * static_cast<int64_t>(sizeof(BlockQ4_K));  // 1152
constexpr int64_t kQ5KGroup = 8 * static_cast<int64_t>(sizeof(BlockQ5_K));  // 1408
constexpr int64_t kQ6KGroup = 8 * static_cast<int64_t>(sizeof(BlockQ6_K));  // 1680
constexpr int64_t kQ8KBytes = static_cast<int64_t>(sizeof(BlockQ8_K));

inline __m256i ld256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i ld128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline void st256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

// v, opaque to the optimiser: keeps GCC from reassociating a chain of integer adds into a tree
// that needs every product live at once (and spills them).
inline __m256i opaque(__m256i v) {
    asm("" : "+x"(v));
    return v;
}

// The 4 bytes at p, in every 32-bit lane.
inline __m256i bcast4(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Scale and min of sub-block j of a Q4_K/Q5_K block (as kquant_scale_min, which is an inline
// function of external linkage and so not callable from here).
inline void scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Byte index of (sub-block j % 4, row r) in a 32-byte vector whose 128-bit half h holds rows
// 4h..4h+3: the layout pshufb can spread into 32-bit row lanes.
constexpr int lane_index(int j4, int r) { return (r / 4) * 16 + j4 * 4 + (r % 4); }

// ---- Q4_K / Q5_K scales ----

// 8 rows' 6-bit scales and mins (sc[r][j], m[r][j]) -> 96 bytes: with A = scales of j < 4,
// B = scales of j >= 4, C, D the same for the mins, each a 32-byte vector in lane_index order:
// bytes 0..31 = A & 15 | (B & 15) << 4, 32..63 = C & 15 | (D & 15) << 4,
// 64..95 = A >> 4 | (B >> 4) << 2 | (C >> 4) << 4 | (D >> 4) << 6.
void pack_kq_scales(const uint8_t (*sc)[8], const uint8_t (*m)[8], uint8_t* out) {
    for (int r = 0; r < 8; ++r) {
        for (int j4 = 0; j4 < 4; ++j4) {
            const int p = lane_index(j4, r);
            const int a = sc[r][j4], b = sc[r][j4 + 4], c = m[r][j4], d = m[r][j4 + 4];
            out[p] = static_cast<uint8_t>((a & 15) | ((b & 15) << 4));
            out[32 + p] = static_cast<uint8_t>((c & 15) | ((d & 15) << 4));
            out[64 + p] = static_cast<uint8_t>((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((d >> 4) << 6));
        }
    }
}

// pshufb controls: 16-bit lanes (2r, 2r+1) of each half = bytes lo_idx + r and hi_idx + r, for
// r = 0..3, either zero-extended (kLow) or in the high byte (kHigh: an arithmetic shift right by 8
// then sign-extends them). Index p = lo_idx / 4 * 4 + hi_idx / 4 over (0..3) x (0..3).
struct PairMasks {
    alignas(32) int8_t low[16][32];
    alignas(32) int8_t high[16][32];
};
constexpr PairMasks make_pair_masks() {
    PairMasks m{};
    for (int p = 0; p < 16; ++p) {
        const int lo = 4 * (p / 4), hi = 4 * (p % 4);
            for (int h = 0; h < 2; ++h) {
            for (int r = 0; r < 4; ++r) {
                int8_t* z = m.low[p] + 16 * h + 4 * r;
                z[0] = static_cast<int8_t>(lo + r), z[1] = -128, z[2] = static_cast<int8_t>(hi + r), z[3] = -128;
                int8_t* x = m.high[p] + 16 * h + 4 * r;
                x[0] = -128, x[1] = static_cast<int8_t>(lo + r), x[2] = -128, x[3] = static_cast<int8_t>(hi + r);
            }
        }
    }
    return m;
}
constexpr PairMasks kPairMasks = make_pair_masks();

inline __m256i pair_mask(int lo_idx, int hi_idx) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairMasks.low[lo_idx + hi_idx / 4]));
}
inline __m256i pair_mask_hi(int lo_idx, int hi_idx) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairMasks.high[lo_idx + hi_idx / 4]));
}


// ---- register widths ----
//
// The K-quant steps below are written once for a lanes type: Lanes8 reads one packed group (8
// rows, the 32-bit lanes of a 256-bit register) and, with AVX-512, Lanes16 a pair of adjacent
// groups (16 rows: the same 32-byte vector of each group in the halves of a 512-bit register).
// Every lane goes through the same operations at either width (the pshufb controls act per
// 128-bit lane, alike in every lane), so a row's output has the same bits. The 16-row form is
// for many activation rows: the VNNI chains cost the same per multiply-add in either width,
// while the scale multiplies, the minimums' sums, the float step and the loads halve per row
// (`bench_quants batch 16`, AVX-512: q4_K 117 -> 149, q6_K 101-104 -> 121-128 G mul-add/s).
struct Lanes8 {
    using I = __m256i;
    using F = __m256;
    static constexpr int kRows = 8;
    const uint8_t* w;
    static Lanes8 of(const uint8_t* g, int64_t) { return {g}; }
    I load(int64_t off) const { return ld256(w + off); }
    F f16(int64_t off) const { return _mm256_cvtph_ps(ld128(w + off)); }
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
inline __m256i v_srai16(__m256i a, int n) { return _mm256_srai_epi16(a, n); }
inline __m256i v_srli32(__m256i a, int n) { return _mm256_srli_epi32(a, n); }
inline __m256i v_srai32(__m256i a, int n) { return _mm256_srai_epi32(a, n); }
inline __m256i v_slli32(__m256i a, int n) { return _mm256_slli_epi32(a, n); }
inline __m256i v_shuffle8(__m256i a, __m256i control) { return _mm256_shuffle_epi8(a, control); }
inline __m256i v_blend_odd16(__m256i a, __m256i b) { return _mm256_blend_epi16(a, b, 0xAA); }
inline __m256 v_add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 v_sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
inline __m256 v_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
inline __m256 v_cvt(__m256i a) { return _mm256_cvtepi32_ps(a); }
inline void v_store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
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
    // Groups g (at p) and g + 1 (group_bytes on).
    static Lanes16 of(const uint8_t* p, int64_t group_bytes) { return {p, p + group_bytes}; }
    I load(int64_t off) const { return load2x256(w0 + off, w1 + off); }
    F f16(int64_t off) const { return cvt2x8_f16(w0 + off, w1 + off); }
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
inline __m512i v_srai16(__m512i a, int n) { return _mm512_srai_epi16(a, n); }
inline __m512i v_srli32(__m512i a, int n) { return _mm512_srli_epi32(a, n); }
inline __m512i v_srai32(__m512i a, int n) { return _mm512_srai_epi32(a, n); }
inline __m512i v_slli32(__m512i a, int n) { return _mm512_slli_epi32(a, n); }
// control: a 256-bit pshufb control (two equal 128-bit halves), the same for both groups.
inline __m512i v_shuffle8(__m512i a, __m256i control) {
    return _mm512_shuffle_epi8(a, _mm512_broadcast_i64x4(control));
}
inline __m512i v_blend_odd16(__m512i a, __m512i b) { return _mm512_mask_blend_epi16(0xAAAAAAAAu, a, b); }
inline __m512 v_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 v_sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
inline __m512 v_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
inline __m512 v_cvt(__m512i a) { return _mm512_cvtepi32_ps(a); }
inline void v_store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
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

// The unpacked scales of a Q4_K/Q5_K group: sc[j] = int16 pairs (sc_j[r], sc_j[r]) in 32-bit lane
// r; mp[k] = pairs (m_2k[r], m_2k+1[r]).
template <class L>
struct KqScales {
    typename L::I sc[8];
    typename L::I mp[4];
};

// From the 96 bytes of pack_kq_scales at g.
template <class L>
inline void unpack_kq_scales(const L& g, KqScales<L>* s) {
    using I = typename L::I;
    const I low4 = v_set1_8<I>(15), hi2 = v_set1_8<I>(0x30);
    const I l = g.load(0), mm = g.load(32), h = g.load(64);
    const I a = v_or(v_and(l, low4), v_and(v_slli16(h, 4), hi2));
    const I b = v_or(v_and(v_srli16(l, 4), low4), v_and(v_slli16(h, 2), hi2));
    const I c = v_or(v_and(mm, low4), v_and(h, hi2));
    const I d = v_or(v_and(v_srli16(mm, 4), low4), v_and(v_srli16(h, 2), hi2));
    FX_UNROLL
    for (int j4 = 0; j4 < 4; ++j4) {
        const __m256i mask = pair_mask(4 * j4, 4 * j4);
        s->sc[j4] = v_shuffle8(a, mask);
        s->sc[j4 + 4] = v_shuffle8(b, mask);
    }
    const __m256i m01 = pair_mask(0, 4), m23 = pair_mask(8, 12);
    s->mp[0] = v_shuffle8(c, m01);
    s->mp[1] = v_shuffle8(c, m23);
    s->mp[2] = v_shuffle8(d, m01);
    s->mp[3] = v_shuffle8(d, m23);
}

// sum_j m_j[r] * (bsums[2j] + bsums[2j+1]) in lane r.
template <class L>
inline typename L::I kq_min_sum(const KqScales<L>& s, const int16_t* bsums) {
    using I = typename L::I;
    const __m256i bs = ld256(bsums);
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    alignas(16) int32_t pr[4];  // the four pairs of sub-block sums, each broadcast below
    _mm_store_si128(reinterpret_cast<__m128i*>(pr), pairs);
    const I s0 = v_madd16(s.mp[0], v_set1_32<I>(pr[0]));
    const I s1 = v_madd16(s.mp[1], v_set1_32<I>(pr[1]));
    const I s2 = v_madd16(s.mp[2], v_set1_32<I>(pr[2]));
    const I s3 = v_madd16(s.mp[3], v_set1_32<I>(pr[3]));
    return v_add32(v_add32(s0, s1), v_add32(s2, s3));
}

// Row r's 4 bytes at src + off (for r = 0..7, rows row_bytes apart) -> dst[4r..4r+3].
inline void gather4(const uint8_t* src, int64_t row_bytes, int64_t off, uint8_t* dst) {
    for (int r = 0; r < 8; ++r) std::memcpy(dst + 4 * r, src + r * row_bytes + off, 4);
}

// ---- Q4_K / Q5_K ----

template <bool kQ5>
void repack8_kq(const void* src, int64_t n, int64_t n_rows, void* dst) {
    using Block = std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>;
    constexpr int64_t kBlock = static_cast<int64_t>(sizeof(Block));
    constexpr int64_t kGroup = 8 * kBlock;
    constexpr int64_t kQsOff = offsetof(Block, qs);
    const int64_t nb = n / kQK_K;
    const int64_t row_bytes = nb * kBlock;
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        const uint8_t* rows = s + g * 8 * row_bytes;
        uint8_t* out = d + g * 8 * row_bytes;
        for (int64_t i = 0; i < nb; ++i, out += kGroup) {
            const int64_t base = i * kBlock;
            uint8_t sc[8][8], m[8][8];
            for (int r = 0; r < 8; ++r) {
                const uint8_t* b = rows + r * row_bytes + base;
                std::memcpy(out + 2 * r, b + offsetof(Block, d), 2);
                std::memcpy(out + 16 + 2 * r, b + offsetof(Block, dmin), 2);
                for (int j = 0; j < 8; ++j) scale_min(b + offsetof(Block, scales), j, &sc[r][j], &m[r][j]);
            }
            pack_kq_scales(sc, m, out + 32);
            for (int v = 0; v < 32; ++v)
                gather4(rows, row_bytes, base + kQsOff + 32 * (v / 8) + 4 * (v % 8), out + 128 + 32 * v);
            if constexpr (kQ5) {
                for (int k = 0; k < 8; ++k)
                    gather4(rows, row_bytes, base + offsetof(Block, qh) + 4 * k, out + 1152 + 32 * k);
            }
        }
    }
}


// Quant vector (j, k) of a packed Q4_K/Q5_K group: in lane r, row r's quants of elements
// 32j + 4k .. 32j + 4k + 3, one byte each.
template <bool kQ5, class L>
inline typename L::I kq_quants(const L& g, int j, int k) {
    using I = typename L::I;
    const I low4 = v_set1_8<I>(15);
    const I raw = g.load(128 + 32 * (8 * (j / 2) + k));
    const I q = (j & 1) ? v_and(v_srli16(raw, 4), low4) : v_and(raw, low4);
    if constexpr (!kQ5) {
        return q;
    } else {
        // Bit j of each qh byte -> bit 4 (the 16-bit shifts move the high bytes' bit j alike).
        const I qh = g.load(1152 + 32 * k);
        const I h = j <= 4 ? v_slli16(qh, 4 - j) : v_srli16(qh, j - 4);
        return v_or(q, v_and(h, v_set1_8<I>(16)));
    }
}

#if FERROX_AVX512
// One sub-block with VNNI, for the NC activation blocks y[c]: the exact 32-bit sum over its K
// quant vectors of quant(k) . (the 4 activation bytes at offset(k)), per row, in one vpdpbusd
// chain, times the sub-block's scale sc (32-bit, per row), added to sumq[c].
template <int NC, int K, class L, typename Quant, typename Offset>
inline void add_vnni_subblock(Quant quant, Offset offset, typename L::I sc, const BlockQ8_K* const* y,
                              typename L::I* sumq) {
    using I = typename L::I;
    I sub[NC];
    FX_UNROLL
    for (int c = 0; c < NC; ++c) sub[c] = v_set1_32<I>(0);
    FX_UNROLL
    for (int k = 0; k < K; ++k) {
        const I q = quant(k);
        FX_UNROLL
        for (int c = 0; c < NC; ++c) sub[c] = dpbusd(sub[c], q, v_bcast4<I>(y[c]->qs + offset(k)));
    }
    FX_UNROLL
    for (int c = 0; c < NC; ++c) sumq[c] = v_add32(sumq[c], v_mullo32(sub[c], sc));
}
#endif

// One super-block of a Q4_K/Q5_K group (or pair) against NC activation blocks y[c]: acc[c] +=
// the block's term, lane r for row r. quants(j, k) gives the quant vectors (see kq_quants).
template <bool kQ5, int NC, class L, typename Quants>
inline void kq_superblock(Quants quants, const KqScales<L>& s, typename L::F d, typename L::F dmin,
                          const BlockQ8_K* const* y, typename L::F* acc) {
    using I = typename L::I;
    using F = typename L::F;
    I sumq[NC];
    FX_UNROLL
    for (int c = 0; c < NC; ++c) sumq[c] = v_set1_32<I>(0);
#if FERROX_AVX512
    // VNNI: the sub-block's exact 32-bit sum of q * y per row in one chain of vpdpbusd, then
    // times the sub-block's scale (unsigned 6 bits: the high half of its int16 pair).
    FX_UNROLL
    for (int j = 0; j < 8; ++j) {
        add_vnni_subblock<NC, 8, L>([&](int k) { return quants(j, k); }, [j](int k) { return 32 * j + 4 * k; },
                                 v_srli32(s.sc[j], 16), y, sumq);
    }
#else
    // 16-bit sums of maddubs results (2 products each): q <= 15 allows 8 (8 * 2 * 15 * 128 <
    // 32768), q <= 31 allows 4. (8 rows only: there is no 16-row form without AVX-512.)
    constexpr int kRun = kQ5 ? 4 : 8;
    FX_UNROLL
    for (int j = 0; j < 8; ++j) {
        FX_UNROLL
        for (int k0 = 0; k0 < 8; k0 += kRun) {
            __m256i s16[NC];
            FX_UNROLL
            for (int c = 0; c < NC; ++c) s16[c] = _mm256_setzero_si256();
            FX_UNROLL
            for (int k = k0; k < k0 + kRun; ++k) {
                const __m256i q = quants(j, k);
                FX_UNROLL
                for (int c = 0; c < NC; ++c) {
                    const __m256i p = _mm256_maddubs_epi16(q, bcast4(y[c]->qs + 32 * j + 4 * k));
                    s16[c] = opaque(_mm256_add_epi16(s16[c], p));
                }
            }
            FX_UNROLL
            for (int c = 0; c < NC; ++c)
                sumq[c] = opaque(_mm256_add_epi32(sumq[c], _mm256_madd_epi16(s16[c], s.sc[j])));
        }
    }
#endif
    FX_UNROLL
    for (int c = 0; c < NC; ++c) {
        const I summ = kq_min_sum(s, y[c]->bsums);
        const F yd = v_set1_ps<F>(y[c]->d);
        const F t1 = v_mul(v_mul(yd, d), v_cvt(sumq[c]));
        const F t2 = v_mul(v_mul(yd, dmin), v_cvt(summ));
        acc[c] = v_add(acc[c], v_sub(t1, t2));
    }
}

// A super-block of a group (or pair) unpacked once for many activation rows (prompts, batches).
template <class L>
struct KqUnpacked {
    typename L::I q[64];  // q[8j + k] = kq_quants(j, k)
    KqScales<L> s;
    typename L::F d, dmin;
};

template <bool kQ5, class L>
struct KqTraits {
    static constexpr int64_t kGroup = kQ5 ? kQ5KGroup : kQ4KGroup;
    using Unpacked = KqUnpacked<L>;
    template <int NC>
    static void direct(const L& g, const BlockQ8_K* const* y, typename L::F* acc) {
        KqScales<L> s;
        unpack_kq_scales(g.at(32), &s);
        kq_superblock<kQ5, NC>([&g](int j, int k) { return kq_quants<kQ5>(g, j, k); }, s, g.f16(0), g.f16(16), y,
                               acc);
    }
    static void unpack(const L& g, Unpacked* u) {
        FX_UNROLL
        for (int j = 0; j < 8; ++j) {
            FX_UNROLL
            for (int k = 0; k < 8; ++k) u->q[8 * j + k] = kq_quants<kQ5>(g, j, k);
        }
        unpack_kq_scales(g.at(32), &u->s);
        u->d = g.f16(0);
        u->dmin = g.f16(16);
    }
    template <int NC>
    static void unpacked(const Unpacked& u, const BlockQ8_K* const* y, typename L::F* acc) {
        kq_superblock<kQ5, NC>([&u](int j, int k) { return u.q[8 * j + k]; }, u.s, u.d, u.dmin, y, acc);
    }
};
template <class L>
using Q4KTraits = KqTraits<false, L>;
template <class L>
using Q5KTraits = KqTraits<true, L>;

// ---- Q6_K ----

void repack8_q6k(const void* src, int64_t n, int64_t n_rows, void* dst) {
    constexpr int64_t kBlock = static_cast<int64_t>(sizeof(BlockQ6_K));
    const int64_t nb = n / kQK_K;
    const int64_t row_bytes = nb * kBlock;
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        const uint8_t* rows = s + g * 8 * row_bytes;
        uint8_t* out = d + g * 8 * row_bytes;
        for (int64_t i = 0; i < nb; ++i, out += kQ6KGroup) {
            const int64_t base = i * kBlock;
            for (int r = 0; r < 8; ++r) {
                const uint8_t* b = rows + r * row_bytes + base;
                std::memcpy(out + 2 * r, b + offsetof(BlockQ6_K, d), 2);
                for (int j = 0; j < 16; ++j)
                    out[16 + 32 * (j / 4) + lane_index(j % 4, r)] = b[offsetof(BlockQ6_K, scales) + j];
            }
            for (int h = 0; h < 2; ++h) {
                for (int m = 0; m < 8; ++m) {
                    uint8_t* o = out + 144 + 96 * (8 * h + m);
                    gather4(rows, row_bytes, base + offsetof(BlockQ6_K, ql) + 64 * h + 4 * m, o);
                    gather4(rows, row_bytes, base + offsetof(BlockQ6_K, ql) + 64 * h + 32 + 4 * m, o + 32);
                    gather4(rows, row_bytes, base + offsetof(BlockQ6_K, qh) + 32 * h + 4 * m, o + 64);
                }
            }
        }
    }
}


// sc[j]: int16 pairs (sc_j[r], sc_j[r]) in lane r; sp[k]: pairs (sc_2k[r], sc_2k+1[r]).
template <class L>
struct Q6Scales {
    typename L::I sc[16];
    typename L::I sp[8];
};

// From the 128 scale bytes at g.
template <class L>
inline void unpack_q6_scales(const L& g, Q6Scales<L>* s) {
    using I = typename L::I;
    FX_UNROLL
    for (int t = 0; t < 4; ++t) {
        const I v = g.load(32 * t);
        FX_UNROLL
        for (int j4 = 0; j4 < 4; ++j4) s->sc[4 * t + j4] = v_srai16(v_shuffle8(v, pair_mask_hi(4 * j4, 4 * j4)), 8);
    }
    FX_UNROLL
    for (int k = 0; k < 8; ++k) s->sp[k] = v_blend_odd16(s->sc[2 * k], s->sc[2 * k + 1]);
}

// Quant vector (h, m, t) of a packed Q6_K group: in lane r, row r's 6-bit quants of elements
// 128h + 32t + 4m .. + 3, one byte each.
template <class L>
inline typename L::I q6_quants(const L& g, int h, int m, int t) {
    using I = typename L::I;
    const I low4 = v_set1_8<I>(15), bits45 = v_set1_8<I>(0x30);
    const int64_t st = 144 + 96 * (8 * h + m);
    const I l = g.load(st + 32 * (t & 1)), qh = g.load(st + 64);
    const I lo = (t < 2) ? v_and(l, low4) : v_and(v_srli16(l, 4), low4);
    const I hi = t == 0 ? v_slli16(qh, 4) : t == 1 ? v_slli16(qh, 2) : t == 2 ? qh : v_srli16(qh, 2);
    return v_or(lo, v_and(hi, bits45));
}

// One super-block of a Q6_K group (or pair) against NC activation blocks: acc[c] += the
// block's term.
template <int NC, class L, typename Quants>
inline void q6_superblock(Quants quants, const Q6Scales<L>& s, typename L::F d, const BlockQ8_K* const* y,
                          typename L::F* acc) {
    using I = typename L::I;
    using F = typename L::F;
    I sumq[NC];
    // sum sc_j * (q - 32) * y = sum sc_j * q * y - 32 * sum_j sc_j * bsums_j.
    FX_UNROLL
    for (int c = 0; c < NC; ++c) {
        I corr = v_set1_32<I>(0);
        FX_UNROLL
        for (int k = 0; k < 8; ++k) corr = v_add32(corr, v_madd16(s.sp[k], v_bcast4<I>(y[c]->bsums + 2 * k)));
        sumq[c] = v_sub32(v_set1_32<I>(0), v_slli32(corr, 5));
    }
#if FERROX_AVX512
    // VNNI: each 16-element sub-block (4 steps m) summed exactly in one vpdpbusd chain per row,
    // then times its signed scale (the high half of its int16 pair, shifted arithmetically).
    FX_UNROLL
    for (int h = 0; h < 2; ++h) {
        FX_UNROLL
        for (int t = 0; t < 4; ++t) {
            FX_UNROLL
            for (int mh = 0; mh < 2; ++mh) {
                add_vnni_subblock<NC, 4, L>([&](int k) { return quants(h, 4 * mh + k, t); },
                                         [=](int k) { return 128 * h + 32 * t + 4 * (4 * mh + k); },
                                         v_srai32(s.sc[8 * h + 2 * t + mh], 16), y, sumq);
            }
        }
    }
#else
    FX_UNROLL
    for (int h = 0; h < 2; ++h) {
        FX_UNROLL
        for (int m = 0; m < 8; m += 2) {
            FX_UNROLL
            for (int t = 0; t < 4; ++t) {
                // Steps m and m + 1: elements 128h + 32t + 4m + b and + 4, sub-block 8h + 2t + m/4.
                const __m256i qa = quants(h, m, t), qb = quants(h, m + 1, t);
                const int e = 128 * h + 32 * t + 4 * m;
                const __m256i sc = s.sc[8 * h + 2 * t + m / 4];
                FX_UNROLL
                for (int c = 0; c < NC; ++c) {
                    // q <= 63: two maddubs results sum to at most 2 * 2 * 63 * 128 < 32768.
                    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(qa, bcast4(y[c]->qs + e)),
                                                       _mm256_maddubs_epi16(qb, bcast4(y[c]->qs + e + 4)));
                    sumq[c] = opaque(_mm256_add_epi32(sumq[c], _mm256_madd_epi16(p, sc)));
                }
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
struct Q6Unpacked {
    typename L::I q[64];  // q[4 * (8h + m) + t] = q6_quants(h, m, t)
    Q6Scales<L> s;
    typename L::F d;
};

template <class L>
struct Q6Traits {
    static constexpr int64_t kGroup = kQ6KGroup;
    using Unpacked = Q6Unpacked<L>;
    template <int NC>
    static void direct(const L& g, const BlockQ8_K* const* y, typename L::F* acc) {
        Q6Scales<L> s;
        unpack_q6_scales(g.at(16), &s);
        q6_superblock<NC>([&g](int h, int m, int t) { return q6_quants(g, h, m, t); }, s, g.f16(0), y, acc);
    }
    static void unpack(const L& g, Unpacked* u) {
        FX_UNROLL
        for (int hm = 0; hm < 16; ++hm) {
            FX_UNROLL
            for (int t = 0; t < 4; ++t) u->q[4 * hm + t] = q6_quants(g, hm / 8, hm % 8, t);
        }
        unpack_q6_scales(g.at(16), &u->s);
        u->d = g.f16(0);
    }
    template <int NC>
    static void unpacked(const Unpacked& u, const BlockQ8_K* const* y, typename L::F* acc) {
        q6_superblock<NC>([&u](int h, int m, int t) { return u.q[4 * (8 * h + m) + t]; }, u.s, u.d, y, acc);
    }
};

// ---- drivers ----

// NC activation rows against one 8-row group, unpacking each super-block in registers (decode
// and small batches): out[c * out_stride + r].
template <class T, int NC>
void gemm_group_direct(int64_t nb, const uint8_t* w, const uint8_t* a, int64_t a_row_bytes, float* out,
                       int64_t out_stride) {
    __m256 acc[NC];
    FX_UNROLL
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const BlockQ8_K* y[NC];
        FX_UNROLL
        for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const BlockQ8_K*>(a + c * a_row_bytes + i * kQ8KBytes);
        prefetch_ahead<T::kGroup, _MM_HINT_NTA>(w + i * T::kGroup);
        T::template direct<NC>(Lanes8{w + i * T::kGroup}, y, acc);
    }
    FX_UNROLL
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out + c * out_stride, acc[c]);
}

template <class T, int NC, class F>
inline void unpacked_cols(const typename T::Unpacked& u, const uint8_t* a, int64_t a_row_bytes, F* acc) {
    const BlockQ8_K* y[NC];
    FX_UNROLL
    for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const BlockQ8_K*>(a + c * a_row_bytes);
    T::template unpacked<NC>(u, y, acc);
}

// From this many activation rows on, each super-block of a group is unpacked once to memory and
// reused for up to kColBlock activation rows, 4 at a time.
constexpr int64_t kUnpackMinCols = 8;
constexpr int64_t kColBlock = 64;

// n_units units of L::kRows rows (groups, or group pairs) from w against n_cols activation rows,
// each super-block unpacked once per kColBlock of them.
template <template <class> class Tr, class L>
void gemm_unpacked(int64_t nb, const uint8_t* w, int64_t n_units, const uint8_t* a, int64_t a_row_bytes,
                   int64_t n_cols, float* out, int64_t out_stride) {
    using T = Tr<L>;
    using F = typename L::F;
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
                const uint8_t* ai = a + c0 * a_row_bytes + i * kQ8KBytes;
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
void gemm_packed8_kq(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes, int64_t n_cols,
                     float* out, int64_t out_stride) {
    using T = Tr<Lanes8>;
    const int64_t nb = n / kQK_K;
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* ap = static_cast<const uint8_t*>(a);
    if (n_cols < kUnpackMinCols) {
        for (int64_t g = 0; g < n_rows / 8; ++g) {
            const uint8_t* wg = wp + g * nb * T::kGroup;
            float* o = out + 8 * g;
            int64_t c = 0;
            for (; c + 4 <= n_cols; c += 4)
                gemm_group_direct<T, 4>(nb, wg, ap + c * a_row_bytes, a_row_bytes, o + c * out_stride, out_stride);
            switch (n_cols - c) {
                case 3:
                    gemm_group_direct<T, 3>(nb, wg, ap + c * a_row_bytes, a_row_bytes, o + c * out_stride, out_stride);
                    break;
                case 2:
                    gemm_group_direct<T, 2>(nb, wg, ap + c * a_row_bytes, a_row_bytes, o + c * out_stride, out_stride);
                    break;
                case 1:
                    gemm_group_direct<T, 1>(nb, wg, ap + c * a_row_bytes, a_row_bytes, o + c * out_stride, out_stride);
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
void override_packed_kquants(QuantKernels* table) {
    table[kernel_index(DType::kQ4_K)].repack8 = repack8_kq<false>;
    table[kernel_index(DType::kQ4_K)].gemm_packed8 = gemm_packed8_kq<Q4KTraits>;
    table[kernel_index(DType::kQ5_K)].repack8 = repack8_kq<true>;
    table[kernel_index(DType::kQ5_K)].gemm_packed8 = gemm_packed8_kq<Q5KTraits>;
    table[kernel_index(DType::kQ6_K)].repack8 = repack8_q6k;
    table[kernel_index(DType::kQ6_K)].gemm_packed8 = gemm_packed8_kq<Q6Traits>;
}
}  // namespace detail::FERROX_ISA_NS
}  // namespace ferrox

#else
namespace ferrox::detail::FERROX_ISA_NS {
void override_packed_kquants(QuantKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
