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

template <class Block, class Sub>
inline float dot_signed_grid(int64_t n, const void* w, const void* a, float post, Sub sub) {
    const auto* x = static_cast<const Block*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float sum = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        __m256i acc = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) acc = _mm256_add_epi32(acc, sub(x[i], ib, ld256(y[i].qs + 32 * ib)));
        const float d = h2f(x[i].d) * y[i].d;
        sum += d * static_cast<float>(hsum_epi32(acc));
    }
    return post == 1.0f ? sum : post * sum;
}

float dot_iq2_xxs(int64_t n, const void* w, const void* a) {
    return dot_signed_grid<BlockIQ2_XXS>(n, w, a, 0.125f, [](const BlockIQ2_XXS& b, int ib, __m256i y) {
        const uint32_t idx = le32(b.qs + 4 * ib), aux = le32(b.qs + 4 * ib + 2);
        const __m256i g = grid64(kIQ2XXSGrid, idx & 255, (idx >> 8) & 255, (idx >> 16) & 255, idx >> 24);
        const int ls = 2 * static_cast<int>(aux >> 28) + 1;
        return mul_scaled(g, apply_signs(y, signs_of_codes(aux)), ls, ls);
    });
}

float dot_iq2_xs(int64_t n, const void* w, const void* a) {
    return dot_signed_grid<BlockIQ2_XS>(n, w, a, 0.125f, [](const BlockIQ2_XS& b, int ib, __m256i y) {
        const uint16_t* q = b.qs + 4 * ib;
        const __m256i g = grid64(kIQ2XSGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
        const uint32_t s = static_cast<uint32_t>(kIQSigns[q[0] >> 9]) | static_cast<uint32_t>(kIQSigns[q[1] >> 9]) << 8 |
                           static_cast<uint32_t>(kIQSigns[q[2] >> 9]) << 16 |
                           static_cast<uint32_t>(kIQSigns[q[3] >> 9]) << 24;
        return mul_scaled(g, apply_signs(y, s), 2 * (b.scales[ib] & 15) + 1, 2 * (b.scales[ib] >> 4) + 1);
    });
}

float dot_iq2_s(int64_t n, const void* w, const void* a) {
    return dot_signed_grid<BlockIQ2_S>(n, w, a, 0.125f, [](const BlockIQ2_S& b, int ib, __m256i y) {
        const uint8_t* q = b.qs + 4 * ib;
        const int h = b.qh[ib];
        const __m256i g = grid64(kIQ2SGrid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300), q[2] | (h << 4 & 0x300),
                                 q[3] | (h << 2 & 0x300));
        return mul_scaled(g, apply_signs(y, le32(b.qs + 32 + 4 * ib)), 2 * (b.scales[ib] & 15) + 1,
                          2 * (b.scales[ib] >> 4) + 1);
    });
}

float dot_iq3_xxs(int64_t n, const void* w, const void* a) {
    return dot_signed_grid<BlockIQ3_XXS>(n, w, a, 0.25f, [](const BlockIQ3_XXS& b, int ib, __m256i y) {
        const uint8_t* q = b.qs + 8 * ib;
        const __m256i g = _mm256_set_epi32(
            static_cast<int>(kIQ3XXSGrid[q[7]]), static_cast<int>(kIQ3XXSGrid[q[6]]), static_cast<int>(kIQ3XXSGrid[q[5]]),
            static_cast<int>(kIQ3XXSGrid[q[4]]), static_cast<int>(kIQ3XXSGrid[q[3]]), static_cast<int>(kIQ3XXSGrid[q[2]]),
            static_cast<int>(kIQ3XXSGrid[q[1]]), static_cast<int>(kIQ3XXSGrid[q[0]]));
        const uint32_t aux = le32(b.qs + 64 + 4 * ib);
        const int ls = 2 * static_cast<int>(aux >> 28) + 1;
        return mul_scaled(g, apply_signs(y, signs_of_codes(aux)), ls, ls);
    });
}

float dot_iq3_s(int64_t n, const void* w, const void* a) {
    return dot_signed_grid<BlockIQ3_S>(n, w, a, 1.0f, [](const BlockIQ3_S& b, int ib, __m256i y) {
        const uint8_t* q = b.qs + 8 * ib;
        const int h = b.qh[ib];
        auto e = [&](int k) { return static_cast<int>(kIQ3SGrid[q[k] | ((h >> k) & 1) << 8]); };
        const __m256i g = _mm256_set_epi32(e(7), e(6), e(5), e(4), e(3), e(2), e(1), e(0));
        const int ls = 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
        return mul_scaled(g, apply_signs(y, le32(b.signs + 4 * ib)), ls, ls);
    });
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

}  // namespace

namespace detail::FERROX_ISA_NS {
void override_packed_iq(QuantKernels* table) {
    // Q8_K's activation quantizer of this level (quants_avx2.cc's, set before).
    const auto act_q8_k = table[kernel_index(DType::kQ4_K)].quantize_act_row;
    auto set = [&](DType t, float (*dot)(int64_t, const void*, const void*),
                   void (*rows)(int64_t, const void*, int64_t, int64_t, const void*, float*)) {
        QuantKernels& k = table[kernel_index(t)];
        k.vec_dot = dot;
        k.vec_dot_rows = rows;
        k.quantize_act_row = act_q8_k;
    };
    set(DType::kIQ2_XXS, dot_iq2_xxs, vec_dot_rows_loop<dot_iq2_xxs>);
    set(DType::kIQ2_XS, dot_iq2_xs, vec_dot_rows_loop<dot_iq2_xs>);
    set(DType::kIQ2_S, dot_iq2_s, vec_dot_rows_loop<dot_iq2_s>);
    set(DType::kIQ3_XXS, dot_iq3_xxs, vec_dot_rows_loop<dot_iq3_xxs>);
    set(DType::kIQ3_S, dot_iq3_s, vec_dot_rows_loop<dot_iq3_s>);
    set(DType::kIQ1_S, dot_iq1_s, vec_dot_rows_loop<dot_iq1_s>);
    set(DType::kIQ1_M, dot_iq1_m, vec_dot_rows_loop<dot_iq1_m>);
}
}  // namespace detail::FERROX_ISA_NS
}  // namespace ferrox

#else
namespace ferrox::detail::FERROX_ISA_NS {
void override_packed_iq(QuantKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
