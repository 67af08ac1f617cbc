// The grid formats of low-RAM MoE downloads, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
// IQ1_M (all x Q8_K): their dot products (QuantKernels::vec_dot). Compiled once per ISA variant
// (isa_variant.h) with -mavx2 -mfma -mf16c -ffp-contract=off (plus AVX-512 F/BW/DQ/VL/VNNI for
// the avx512 variant). See simd_avx2.h for why this file calls no inline function of external
// linkage (quant_blocks.h's helpers are restated; the grids, iq_grids.inc, are data with
// internal linkage).
//
// Every output is summed in vec_dot_ref's order, so the scalar reference is the oracle bit for
// bit on every level: one exact integer sum per super-block (the sub-block sums times the odd
// integer scales 2s + 1), then sum += (dx * dy) * float(block sum) and ggml's constant on the
// row's sum (IQ2: 0.125f, IQ3_XXS: 0.25f); IQ1: sum += (dx * dy) * (float(sumi) + 0.125f *
// float(sumd)), sumd the integer sum of the delta signs times the activations.
//
// Integer products: the grid magnitudes are unsigned bytes (<= 62) and go into maddubs as they
// are, the signs are put on the activations (AVX2: vpsignb with +-1 bytes expanded from the sign
// bits; AVX-512: a blend of y and -y, the 32 sign bits being the mask as they are stored);
// a pair sum is at most 2 * 62 * 127 < 2^15, so nothing saturates, and one madd with the int16
// scales of the two 16-byte halves gives int32 lanes. IQ1's grid values (-1, 0, 1) are signed:
// |g| times y with g's sign.
#include <cstddef>

#include "kernels/isa_variant.h"
#include "kernels/kernels_internal.h"
#include "kernels/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kernels/simd_avx2.h"

namespace ferrox {
namespace {


#include "kernels/iq_grids.inc"

inline __m256i ld256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline float h2f(uint16_t h) { return f16_to_f32(h); }
inline uint32_t le32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline uint16_t iq1m_scale(const uint8_t* scales) {  // quant_blocks.h's iq1m_d
    uint16_t sc[4];
    std::memcpy(sc, scales, 8);
    return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

// The 4 sign bytes of the 7-bit codes at bits 0, 7, 14, 21 of aux (element 8l + j negative where
// bit j of byte l is set).
inline uint32_t signs_of_codes(uint32_t aux) {
    return static_cast<uint32_t>(kIQSigns[aux & 127]) | static_cast<uint32_t>(kIQSigns[(aux >> 7) & 127]) << 8 |
           static_cast<uint32_t>(kIQSigns[(aux >> 14) & 127]) << 16 |
           static_cast<uint32_t>(kIQSigns[(aux >> 21) & 127]) << 24;
}

// y with element e negated where bit e of s is set (32 elements).
inline __m256i apply_signs(__m256i y, uint32_t s) {
#if FERROX_AVX512
    return _mm256_mask_blend_epi8(static_cast<__mmask32>(s), y, _mm256_sub_epi8(_mm256_setzero_si256(), y));
#else
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(s)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_sign_epi8(y, _mm256_or_si256(neg, _mm256_set1_epi8(1)));
#endif
}

// sum(g * ys) over 32 bytes (g unsigned <= 62), bytes 0..15 times lo and 16..31 times hi, as
// int32 lanes.
inline __m256i mul_scaled(__m256i g, __m256i ys, int lo, int hi) {
    const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(g, ys), sc);
}

inline __m256i grid64(const uint64_t* grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]),
                             static_cast<int64_t>(grid[i1]), static_cast<int64_t>(grid[i0]));
}

// ---- IQ2_XXS / IQ2_XS / IQ2_S / IQ3_XXS / IQ3_S: sum += (dx * dy) * block sum, times post ----
//
// Each format's sub(block, ib, ...) gives sub-block ib's 32 grid magnitudes g (bytes, in element
// order), its 32 sign bits s, and the odd scales of its two 16-element halves.

struct Iq2xxs {
    using Block = BlockIQ2_XXS;
    static constexpr float kPost = 0.125f;
    static void sub(const Block& b, int ib, __m256i* g, uint32_t* s, int* lo, int* hi) {
        const uint32_t idx = le32(b.qs + 4 * ib), aux = le32(b.qs + 4 * ib + 2);
        *g = grid64(kIQ2XXSGrid, idx & 255, (idx >> 8) & 255, (idx >> 16) & 255, idx >> 24);
        *s = signs_of_codes(aux);
        *lo = *hi = 2 * static_cast<int>(aux >> 28) + 1;
    }
};

struct Iq2xs {
    using Block = BlockIQ2_XS;
    static constexpr float kPost = 0.125f;
    static void sub(const Block& b, int ib, __m256i* g, uint32_t* s, int* lo, int* hi) {
        const uint16_t* q = b.qs + 4 * ib;
        *g = grid64(kIQ2XSGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
        *s = static_cast<uint32_t>(kIQSigns[q[0] >> 9]) | static_cast<uint32_t>(kIQSigns[q[1] >> 9]) << 8 |
             static_cast<uint32_t>(kIQSigns[q[2] >> 9]) << 16 | static_cast<uint32_t>(kIQSigns[q[3] >> 9]) << 24;
        *lo = 2 * (b.scales[ib] & 15) + 1;
        *hi = 2 * (b.scales[ib] >> 4) + 1;
    }
};

struct Iq2s {
    using Block = BlockIQ2_S;
    static constexpr float kPost = 0.125f;
    static void sub(const Block& b, int ib, __m256i* g, uint32_t* s, int* lo, int* hi) {
        const uint8_t* q = b.qs + 4 * ib;
        const int h = b.qh[ib];
        *g = grid64(kIQ2SGrid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300), q[2] | (h << 4 & 0x300),
                    q[3] | (h << 2 & 0x300));
        *s = le32(b.qs + 32 + 4 * ib);
        *lo = 2 * (b.scales[ib] & 15) + 1;
        *hi = 2 * (b.scales[ib] >> 4) + 1;
    }
};

struct Iq3xxs {
    using Block = BlockIQ3_XXS;
    static constexpr float kPost = 0.25f;
    static void sub(const Block& b, int ib, __m256i* g, uint32_t* s, int* lo, int* hi) {
        const uint8_t* q = b.qs + 8 * ib;
        auto e = [&](int k) { return static_cast<int>(kIQ3XXSGrid[q[k]]); };
        *g = _mm256_set_epi32(e(7), e(6), e(5), e(4), e(3), e(2), e(1), e(0));
        const uint32_t aux = le32(b.qs + 64 + 4 * ib);
        *s = signs_of_codes(aux);
        *lo = *hi = 2 * static_cast<int>(aux >> 28) + 1;
    }
};

struct Iq3s {
    using Block = BlockIQ3_S;
    static constexpr float kPost = 1.0f;
    static void sub(const Block& b, int ib, __m256i* g, uint32_t* s, int* lo, int* hi) {
        const uint8_t* q = b.qs + 8 * ib;
        const int h = b.qh[ib];
        auto e = [&](int k) { return static_cast<int>(kIQ3SGrid[q[k] | ((h >> k) & 1) << 8]); };
        *g = _mm256_set_epi32(e(7), e(6), e(5), e(4), e(3), e(2), e(1), e(0));
        *s = le32(b.signs + 4 * ib);
        *lo = *hi = 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
    }
};

template <class T>
float dot_grid(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const typename T::Block*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        __m256i acc = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
            __m256i g;
            uint32_t s;
            int lo, hi;
            T::sub(x[i], ib, &g, &s, &lo, &hi);
            acc = _mm256_add_epi32(acc, mul_scaled(g, apply_signs(ld256(y[i].qs + 32 * ib), s), lo, hi));
        }
        const float d = h2f(x[i].d) * y[i].d;
        sum += d * static_cast<float>(hsum_epi32(acc));
    }
    return T::kPost == 1.0f ? sum : T::kPost * sum;
}

// The packed product's decoding: a block's 256 values v (signed, |v| <= 62) as v + 64 bytes, and
// its 16 odd scales.
template <class T>
void decode_grid(const void* blk, uint8_t* u, int* ls) {
    const auto& b = *static_cast<const typename T::Block*>(blk);
    for (int ib = 0; ib < 8; ++ib) {
        __m256i g;
        uint32_t s;
        T::sub(b, ib, &g, &s, &ls[2 * ib], &ls[2 * ib + 1]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(u + 32 * ib),
                           _mm256_add_epi8(apply_signs(g, s), _mm256_set1_epi8(64)));
    }
}
template <class T>
float grid_dx(const void* blk) {
    return h2f(static_cast<const typename T::Block*>(blk)->d);
}

// ---- IQ1_S / IQ1_M ----

// sum(g * y) for signed g in {-1, 0, 1}, bytes 0..15 times lo and 16..31 times hi.
inline __m256i mul_scaled_signed(__m256i g, __m256i y, int lo, int hi) {
    return mul_scaled(_mm256_sign_epi8(g, g), _mm256_sign_epi8(y, g), lo, hi);
}

float dot_iq1_s(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockIQ1_S*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        __m256i acc = _mm256_setzero_si256();
        int sumd = 0;
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* q = x[i].qs + 4 * ib;
            const int h = x[i].qh[ib];
            const __m256i g = grid64(kIQ1SGrid, q[0] | (h << 8 & 0x700), q[1] | (h << 5 & 0x700), q[2] | (h << 2 & 0x700),
                                     q[3] | (h >> 1 & 0x700));
            const int ls = 2 * ((h >> 12) & 7) + 1;
            acc = _mm256_add_epi32(acc, mul_scaled_signed(g, ld256(y[i].qs + 32 * ib), ls, ls));
            const int ys = y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1];
            sumd += (ls - 2 * ls * (h >> 15)) * ys;
        }
        const float d = h2f(x[i].d) * y[i].d;
        sum += d * (static_cast<float>(hsum_epi32(acc)) + 0.125f * static_cast<float>(sumd));
    }
    return sum;
}

float dot_iq1_m(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockIQ1_M*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    const __m256i ones8 = _mm256_set1_epi8(1);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        uint16_t sc[4];
        std::memcpy(sc, x[i].scales, 8);
        __m256i acc = _mm256_setzero_si256(), accd = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* q = x[i].qs + 4 * ib;
            const int h0 = x[i].qh[2 * ib], h1 = x[i].qh[2 * ib + 1];
            const __m256i g = grid64(kIQ1SGrid, q[0] | (h0 << 8 & 0x700), q[1] | (h0 << 4 & 0x700),
                                     q[2] | (h1 << 8 & 0x700), q[3] | (h1 << 4 & 0x700));
            const int ls1 = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
            const int ls2 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
            const __m256i yv = ld256(y[i].qs + 32 * ib);
            acc = _mm256_add_epi32(acc, mul_scaled_signed(g, yv, ls1, ls2));
            // sum(y) per 8 times (2s + 1) * delta sign: int16 pair sums of y, one coefficient per group.
            // Branch-free (the delta bits are data, a branch on them mispredicts half the time).
            auto c = [](int ls, int nibble) {
                const int v = ls - 2 * ls * ((nibble >> 3) & 1);
                return static_cast<int64_t>(static_cast<uint16_t>(v) * 0x0001000100010001ull);
            };
            const __m256i coef = _mm256_set_epi64x(c(ls2, h1 >> 4), c(ls2, h1), c(ls1, h0 >> 4), c(ls1, h0));
            accd = _mm256_add_epi32(accd, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, yv), coef));
        }
        const float d = h2f(iq1m_scale(x[i].scales)) * y[i].d;
        sum += d * (static_cast<float>(hsum_epi32(acc)) + 0.125f * static_cast<float>(hsum_epi32(accd)));
    }
    return sum;
}


// IQ1: the value (grid + delta / 8) * 8 = 8 g + delta in [-9, 9], as v + 64 bytes, and the 16
// odd scales: the block's integer sum is then 8 sumi + sumd, and (dx dy) * (sumi + 0.125f sumd)
// = (dx dy) * (float(8 sumi + sumd) * 0.125f) exactly (every term is a multiple of 1/8 below
// 2^20 in magnitude, so neither side rounds).
inline __m256i iq1_values(__m256i g, int d0, int d1, int d2, int d3) {
    auto bytes = [](int neg) {  // 8 bytes of +1, or of -1 where neg
        const uint64_t m = 0 - static_cast<uint64_t>(neg & 1);
        return static_cast<int64_t>((m & 0xffffffffffffffffull) | (~m & 0x0101010101010101ull));
    };
    const __m256i delta = _mm256_set_epi64x(bytes(d3), bytes(d2), bytes(d1), bytes(d0));
    return _mm256_add_epi8(_mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), delta), _mm256_set1_epi8(64));
}

void decode_iq1s(const void* blk, uint8_t* u, int* ls) {
    const auto& b = *static_cast<const BlockIQ1_S*>(blk);
    for (int ib = 0; ib < 8; ++ib) {
        const uint8_t* q = b.qs + 4 * ib;
        const int h = b.qh[ib];
        const __m256i g = grid64(kIQ1SGrid, q[0] | (h << 8 & 0x700), q[1] | (h << 5 & 0x700), q[2] | (h << 2 & 0x700),
                                 q[3] | (h >> 1 & 0x700));
        const int neg = h >> 15;
        _mm256_store_si256(reinterpret_cast<__m256i*>(u + 32 * ib), iq1_values(g, neg, neg, neg, neg));
        ls[2 * ib] = ls[2 * ib + 1] = 2 * ((h >> 12) & 7) + 1;
    }
}
float iq1s_dx(const void* blk) { return h2f(static_cast<const BlockIQ1_S*>(blk)->d); }

void decode_iq1m(const void* blk, uint8_t* u, int* ls) {
    const auto& b = *static_cast<const BlockIQ1_M*>(blk);
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    for (int ib = 0; ib < 8; ++ib) {
        const uint8_t* q = b.qs + 4 * ib;
        const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
        const __m256i g = grid64(kIQ1SGrid, q[0] | (h0 << 8 & 0x700), q[1] | (h0 << 4 & 0x700), q[2] | (h1 << 8 & 0x700),
                                 q[3] | (h1 << 4 & 0x700));
        _mm256_store_si256(reinterpret_cast<__m256i*>(u + 32 * ib), iq1_values(g, h0 >> 3, h0 >> 7, h1 >> 3, h1 >> 7));
        ls[2 * ib] = 2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1;
        ls[2 * ib + 1] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
    }
}
float iq1m_dx(const void* blk) { return h2f(iq1m_scale(static_cast<const BlockIQ1_M*>(blk)->scales)); }

// ---- the packed product (gemm_packed8) ----
//
// Layout: the rows as they are (repack8 copies): every format here is decoded through its grid
// tables whatever the layout, so interleaving rows would save nothing. gemm_packed8 takes, for 1
// to 3 activation rows (decode), vec_dot row by row; from 4 on, per group of 8 rows and block, the
// 8 blocks decoded once (values + 64 as bytes, the 16 scales, d) into lanes, chunk k's 32-bit lane
// r holding row r's elements 4k .. 4k + 3, reused for up to 64 activation rows: per 16-element
// sub-block j the 4 chunk products (VNNI: vpdpbusd from -64 * bsums_j, so the lane sums
// sum(v * y) exactly, then times the scale; AVX2: maddubs (at most 2 * 126 * 127 < 2^15) and one
// madd with the scale pair, less 64 * sum_j scale_j * bsums_j), one exact integer per row and
// block, then the reference's float steps in every lane: vec_dot_ref's bits.

// Per format: its block, the row's dot product (decode), the decoder and d, ggml's final
// constant (in eighths: 1 -> 0.125f, 2 -> 0.25f, 8 -> 1), and whether the block sum is IQ1's
// 8 sumi + sumd.
template <class Block, float (*Dot)(int64_t, const void*, const void*), void (*Decode)(const void*, uint8_t*, int*),
          float (*Dx)(const void*), int kPostEighths, bool kIq1_>
struct Packed {
    static constexpr int64_t kBytes = static_cast<int64_t>(sizeof(Block));
    static constexpr float kPost = static_cast<float>(kPostEighths) / 8.0f;
    static constexpr bool kIq1 = kIq1_;
    static float dot(int64_t n, const void* w, const void* a) { return Dot(n, w, a); }
    static void decode(const void* b, uint8_t* u, int* ls) { Decode(b, u, ls); }
    static float dx(const void* b) { return Dx(b); }
};
using Iq2xxsP = Packed<BlockIQ2_XXS, dot_grid<Iq2xxs>, decode_grid<Iq2xxs>, grid_dx<Iq2xxs>, 1, false>;
using Iq2xsP = Packed<BlockIQ2_XS, dot_grid<Iq2xs>, decode_grid<Iq2xs>, grid_dx<Iq2xs>, 1, false>;
using Iq2sP = Packed<BlockIQ2_S, dot_grid<Iq2s>, decode_grid<Iq2s>, grid_dx<Iq2s>, 1, false>;
using Iq3xxsP = Packed<BlockIQ3_XXS, dot_grid<Iq3xxs>, decode_grid<Iq3xxs>, grid_dx<Iq3xxs>, 2, false>;
using Iq3sP = Packed<BlockIQ3_S, dot_grid<Iq3s>, decode_grid<Iq3s>, grid_dx<Iq3s>, 8, false>;
using Iq1sP = Packed<BlockIQ1_S, dot_iq1_s, decode_iq1s, iq1s_dx, 8, true>;
using Iq1mP = Packed<BlockIQ1_M, dot_iq1_m, decode_iq1m, iq1m_dx, 8, true>;

template <class P>
void repack8_copy(const void* src, int64_t n, int64_t n_rows, void* dst) {
    std::memcpy(dst, src, static_cast<size_t>(n / kQK_K * n_rows * P::kBytes));
}

// A block of 8 rows in lanes.
struct Lanes {
    __m256i u[64];   // chunk k: lane r = row r's v + 64 of elements 4k .. 4k + 3
    __m256i ls[16];  // VNNI: scale j per lane (int32); AVX2: (scale j, scale j) int16 pairs
    __m256i mp[8];   // AVX2: (scale 2k, scale 2k + 1) int16 pairs, for the bsums term
    __m256 dx;
};

template <class P>
void decode_lanes(const uint8_t* rows, int64_t row_bytes, int64_t i, Lanes* l) {
    alignas(32) uint8_t u[8][kQK_K];
    alignas(32) int ls[8][16];
    alignas(32) float dx[8];
    for (int r = 0; r < 8; ++r) {
        const uint8_t* blk = rows + r * row_bytes + i * P::kBytes;
        P::decode(blk, u[r], ls[r]);
        dx[r] = P::dx(blk);
    }
    const __m256i rows_u = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);  // u[r] in ints
    FX_UNROLL
    for (int k = 0; k < 64; ++k)
        l->u[k] = _mm256_i32gather_epi32(reinterpret_cast<const int*>(&u[0][0]) + k, rows_u, 4);
    const __m256i rows_ls = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    __m256i sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = _mm256_i32gather_epi32(&ls[0][0] + j, rows_ls, 4);
    for (int j = 0; j < 16; ++j) {
#if FERROX_AVX512
        l->ls[j] = sc[j];
#else
        l->ls[j] = _mm256_or_si256(sc[j], _mm256_slli_epi32(sc[j], 16));
#endif
    }
    for (int k = 0; k < 8; ++k) l->mp[k] = _mm256_or_si256(sc[2 * k], _mm256_slli_epi32(sc[2 * k + 1], 16));
    l->dx = _mm256_load_ps(dx);
}

inline __m256i bcast4(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// acc += the block's term of 8 rows against one activation block, in vec_dot_ref's float steps.
template <class P>
inline void lanes_column(const Lanes& l, const BlockQ8_K* y, __m256* acc) {
    __m256i tot;
#if FERROX_AVX512
    // Two sums of sub-block terms (even, odd j): shorter dependency chains.
    __m256i t2[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    FX_UNROLL
    for (int j = 0; j < 16; ++j) {
        __m256i s = _mm256_set1_epi32(-64 * y->bsums[j]);
        FX_UNROLL
        for (int q = 0; q < 4; ++q) s = _mm256_dpbusd_epi32(s, l.u[4 * j + q], bcast4(y->qs + 16 * j + 4 * q));
        t2[j % 2] = _mm256_add_epi32(t2[j % 2], _mm256_mullo_epi32(s, l.ls[j]));
    }
    tot = _mm256_add_epi32(t2[0], t2[1]);
#else
    __m256i corr = _mm256_madd_epi16(l.mp[0], bcast4(y->bsums));
    FX_UNROLL
    for (int k = 1; k < 8; ++k) corr = _mm256_add_epi32(corr, _mm256_madd_epi16(l.mp[k], bcast4(y->bsums + 2 * k)));
    __m256i t2[2] = {_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 6)), _mm256_setzero_si256()};
    FX_UNROLL
    for (int j = 0; j < 16; ++j) {
        FX_UNROLL
        for (int q = 0; q < 4; ++q)
            t2[q % 2] = _mm256_add_epi32(
                t2[q % 2], _mm256_madd_epi16(_mm256_maddubs_epi16(l.u[4 * j + q], bcast4(y->qs + 16 * j + 4 * q)), l.ls[j]));
    }
    tot = _mm256_add_epi32(t2[0], t2[1]);
#endif
    const __m256 d = _mm256_mul_ps(l.dx, _mm256_set1_ps(y->d));
    __m256 x = _mm256_cvtepi32_ps(tot);
    if constexpr (P::kIq1) x = _mm256_mul_ps(x, _mm256_set1_ps(0.125f));
    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(d, x));
}

constexpr int64_t kLanesMinCols = 4;
constexpr int64_t kColBlock = 64;

template <class P>
void gemm_grid(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes, int64_t n_cols, float* out,
               int64_t out_stride) {
    const int64_t nb = n / kQK_K, row_bytes = nb * P::kBytes;
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* ap = static_cast<const uint8_t*>(a);
    if (n_cols < kLanesMinCols) {
        for (int64_t c = 0; c < n_cols; ++c)
            for (int64_t r = 0; r < n_rows; ++r) out[c * out_stride + r] = P::dot(n, wp + r * row_bytes, ap + c * a_row_bytes);
        return;
    }
    Lanes l;
    __m256 acc[kColBlock];
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        const uint8_t* rows = wp + g * 8 * row_bytes;
        for (int64_t c0 = 0; c0 < n_cols; c0 += kColBlock) {
            const int64_t nc = n_cols - c0 < kColBlock ? n_cols - c0 : kColBlock;
            for (int64_t c = 0; c < nc; ++c) acc[c] = _mm256_setzero_ps();
            for (int64_t i = 0; i < nb; ++i) {
                decode_lanes<P>(rows, row_bytes, i, &l);
                const uint8_t* ai = ap + c0 * a_row_bytes + i * static_cast<int64_t>(sizeof(BlockQ8_K));
                for (int64_t c = 0; c < nc; ++c)
                    lanes_column<P>(l, reinterpret_cast<const BlockQ8_K*>(ai + c * a_row_bytes), &acc[c]);
            }
            for (int64_t c = 0; c < nc; ++c) {
                if constexpr (P::kPost != 1.0f) acc[c] = _mm256_mul_ps(_mm256_set1_ps(P::kPost), acc[c]);
                _mm256_storeu_ps(out + (c0 + c) * out_stride + 8 * g, acc[c]);
            }
        }
    }
}

}  // namespace

namespace detail::FERROX_ISA_NS {
void override_packed_iq(QuantKernels* table) {
    // Q8_K's activation quantizer of this level (quants_avx2.cc's, set before).
    const auto act_q8_k = table[kernel_index(DType::kQ4_K)].quantize_act_row;
    auto set = [&](DType t, float (*dot)(int64_t, const void*, const void*),
                   void (*rows)(int64_t, const void*, int64_t, int64_t, const void*, float*),
                   void (*repack)(const void*, int64_t, int64_t, void*),
                   void (*gemm)(int64_t, const void*, int64_t, const void*, int64_t, int64_t, float*, int64_t)) {
        QuantKernels& k = table[kernel_index(t)];
        k.vec_dot = dot;
        k.vec_dot_rows = rows;
        k.quantize_act_row = act_q8_k;
        k.repack8 = repack;
        k.gemm_packed8 = gemm;
    };
    set(DType::kIQ2_XXS, dot_grid<Iq2xxs>, vec_dot_rows_loop<dot_grid<Iq2xxs>>, repack8_copy<Iq2xxsP>, gemm_grid<Iq2xxsP>);
    set(DType::kIQ2_XS, dot_grid<Iq2xs>, vec_dot_rows_loop<dot_grid<Iq2xs>>, repack8_copy<Iq2xsP>, gemm_grid<Iq2xsP>);
    set(DType::kIQ2_S, dot_grid<Iq2s>, vec_dot_rows_loop<dot_grid<Iq2s>>, repack8_copy<Iq2sP>, gemm_grid<Iq2sP>);
    set(DType::kIQ3_XXS, dot_grid<Iq3xxs>, vec_dot_rows_loop<dot_grid<Iq3xxs>>, repack8_copy<Iq3xxsP>, gemm_grid<Iq3xxsP>);
    set(DType::kIQ3_S, dot_grid<Iq3s>, vec_dot_rows_loop<dot_grid<Iq3s>>, repack8_copy<Iq3sP>, gemm_grid<Iq3sP>);
    set(DType::kIQ1_S, dot_iq1_s, vec_dot_rows_loop<dot_iq1_s>, repack8_copy<Iq1sP>, gemm_grid<Iq1sP>);
    set(DType::kIQ1_M, dot_iq1_m, vec_dot_rows_loop<dot_iq1_m>, repack8_copy<Iq1mP>, gemm_grid<Iq1mP>);
}
}  // namespace detail::FERROX_ISA_NS
}  // namespace ferrox

#else
namespace ferrox::detail::FERROX_ISA_NS {
void override_packed_iq(QuantKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
