#pragma once
// GGUF/ggml quantization block layouts, byte for byte as they sit in a GGUF file.
// Written from the format description; every struct has exactly the size ggml gives it
// (checked below against the numbers, and in tests against dtype_info()).
//
// Conventions shared by the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1):
//   qs[j] holds element j in its low nibble and element j + 16 in its high nibble.
//   The 5th bit of element j (Q5_*) is bit j of the little-endian uint32 qh.
// fp16 fields are IEEE half bit patterns (convert with fp16_to_fp32).
//
// All structs have 2-byte alignment at most (Q8_K: 4; MXFP4, IQ1_M: 1), so a row of blocks needs no padding and
// a pointer into a GGUF tensor (32-byte aligned data section) is always suitably aligned.

#include <cstdint>

namespace ferrox {

constexpr int kQK = 32;     // elements per block of the 32-formats
constexpr int kQK_K = 256;  // elements per super-block of the K-formats

// value = (q - 8) * d, q in [0, 15]
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[kQK / 2];
};

// value = q * d + m, q in [0, 15]
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[kQK / 2];
};

// value = (q - 16) * d, q in [0, 31]; qh: 32 high bits
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};

// value = q * d + m, q in [0, 31]
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[kQK / 2];
};

// value = q * d; also the activation partner of Q4_0, Q5_0, Q8_0
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[kQK];
};

// Activation partner of Q4_1/Q5_1: s = d * sum(qs) (as fp16) lets the dot product fold the
// weight block's offset m in with one multiply: sum((q*dx + m) * qy*dy) = dx*dy*sum(q*qy) + m*s.
struct BlockQ8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[kQK];
};

// 256 elements in 8 sub-blocks of 32. Sub-block j has a 6-bit scale sc_j and a 6-bit min m_j:
//   value = d * sc_j * q - dmin * m_j, q in [0, 15].
// scales[12] packing (bytes s0..s11):
//   j < 4 : sc_j = s[j] & 63,                          m_j = s[j + 4] & 63
//   j >= 4: sc_j = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,
//           m_j  = (s[j + 4] >> 4) | (s[j] >> 6) << 4
// qs: four chunks of 32 bytes; chunk c holds element 64c + l in the low nibble of byte l and
// element 64c + 32 + l in the high nibble (so sub-block 2c is low nibbles, 2c + 1 high ones).
struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[kQK_K / 2];
};

// As Q4_K with a 5th bit: q in [0, 31]. The 5th bit of element 64c + l is bit 2c of qh[l],
// that of element 64c + 32 + l is bit 2c + 1 of qh[l].
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[kQK_K / 8];
    uint8_t qs[kQK_K / 2];
};

// 256 elements in 16 sub-blocks of 16, value = d * scales[e / 16] * (q - 32), q in [0, 63].
// Two halves of 128 elements; half h uses ql[64h .. 64h+63], qh[32h .. 32h+31]. Within a half,
// for l in [0, 32):
//   element l      : low nibble of ql[l],      bits 0-1 of qh[l]
//   element l + 32 : low nibble of ql[l + 32], bits 2-3 of qh[l]
//   element l + 64 : high nibble of ql[l],     bits 4-5 of qh[l]
//   element l + 96 : high nibble of ql[l + 32], bits 6-7 of qh[l]
// Note d comes last, and the scales are signed 8-bit.
struct BlockQ6_K {
    uint8_t ql[kQK_K / 2];
    uint8_t qh[kQK_K / 4];
    int8_t scales[kQK_K / 16];
    uint16_t d;
};

// 2-bit K-format: 256 elements in 16 sub-blocks of 16. Sub-block j has a 4-bit scale and a
// 4-bit min in scales[j] (scale in the low nibble, min in the high one):
//   value = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in [0, 3].
// qs: two halves of 128 elements; element 128h + 32s + l (s, l: 0..3, 0..31) is bits 2s, 2s+1
// of qs[32h + l]. So sub-block j = e / 16 = 8h + 2s + l / 16. Note d and dmin come last.
struct BlockQ2_K {
    uint8_t scales[kQK_K / 16];
    uint8_t qs[kQK_K / 4];
    uint16_t d;
    uint16_t dmin;
};

// 3-bit K-format: 256 elements in 16 sub-blocks of 16, value = d * (sc_j - 32) * q,
// q in [-4, 3]: q = (2 low bits) - (high bit clear ? 4 : 0).
// Element 128h + 32s + l (h 0..1, s 0..3, l 0..31): low bits = bits 2s, 2s+1 of qs[32h + l]
// (as Q2_K), high bit = bit 4h + s of hmask[l].
// scales[12]: 16 6-bit scales sc_j (stored with +32, so sc_j - 32 in [-32, 31]):
//   low 4 bits:  j < 8 ? s[j] & 15 : s[j - 8] >> 4
//   high 2 bits: (s[8 + j % 4] >> (2 * (j / 4))) & 3
struct BlockQ3_K {
    uint8_t hmask[kQK_K / 8];
    uint8_t qs[kQK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};

// Non-linear 4-bit: value = d * kIQ4NLValues[q], q in [0, 15]; qs as Q4_0 (element j in the
// low nibble of qs[j], element j + 16 in the high nibble).
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[kQK / 2];
};

// Non-linear 4-bit with 256-element super-blocks: 8 sub-blocks of 32, sub-block j with a 6-bit
// scale ls_j (stored with +32): ls_j = (scales_l[j / 2] >> (4 * (j % 2))) & 15 |
// ((scales_h >> 2j) & 3) << 4, value = d * (ls_j - 32) * kIQ4NLValues[q].
// qs[16j .. 16j + 15] hold sub-block j as IQ4_NL's qs (element 32j + l low nibble of
// qs[16j + l], element 32j + 16 + l its high nibble).
struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[kQK_K / 64];
    uint8_t qs[kQK_K / 2];
};

// OCP microscaling FP4: 32 E2M1 values sharing an E8M0 exponent e. With the E2M1 values
// doubled to integers (kMXFP4Values), value = kMXFP4Values[q] * 2^(e - 128) (half the E8M0
// scale 2^(e - 127); e < 2 gives the float32 denormals 2^-128, 2^-127 as ggml computes them).
// qs as Q4_0. One byte of scale: 17-byte blocks, alignment 1.
struct BlockMXFP4 {
    uint8_t e;
    uint8_t qs[kQK / 2];
};

// ---- the grid formats: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M ----
// 256 elements per super-block, 8 sub-blocks of 32 (ib = e / 32). Elements come in groups of 8
// (IQ3: index groups of 4) whose magnitudes are one entry of a fixed grid (iq_grids.inc: entry k,
// byte j = element j's magnitude), so a group costs a grid index instead of 8 quants. The signs
// (IQ2/IQ3) are 8 bits per group of 8 (bit j set: element j negative); the XXS/XS formats store
// only 7 of them, the 8th being their parity (kIQSigns[7 bits] restores the byte). Scales are
// odd integers 2s + 1 of a 3- or 4-bit s. fp16 d first, except IQ1_M.
//
// IQ2_XXS (2.06 bits): sub-block ib is qs[4ib .. 4ib + 3] read as two little-endian uint32:
//   the first holds 4 bytes, the grid indices (kIQ2XXSGrid) of groups l = 0..3;
//   the second holds sign codes (bits 7l .. 7l + 6 for group l) and s in bits 28..31;
//   value = d * (0.5 + s) * 0.25 * grid * sign   (= d * (2s + 1) / 8 * grid * sign).
struct BlockIQ2_XXS {
    uint16_t d;
    uint16_t qs[kQK_K / 8];
};

// IQ2_XS (2.31 bits): group g = 4ib + l is qs[g]: grid index (kIQ2XSGrid) in bits 0..8, sign
// code in bits 9..15. scales[ib]: s of groups 0, 1 in the low nibble, of groups 2, 3 in the high
// one; value = d * (0.5 + s) * 0.25 * grid * sign.
struct BlockIQ2_XS {
    uint16_t d;
    uint16_t qs[kQK_K / 8];
    uint8_t scales[kQK_K / 32];
};

// IQ2_S (2.56 bits): group g = 4ib + l: grid index (kIQ2SGrid, 10 bits) = qs[g] | bits 2l, 2l + 1
// of qh[ib] << 8; its 8 sign bits are the whole byte qs[32 + g] (no parity rule). scales as
// IQ2_XS's; value = d * (0.5 + s) * 0.25 * grid * sign.
struct BlockIQ2_S {
    uint16_t d;
    uint8_t qs[kQK_K / 4];  // [0, 32) grid index low bytes, [32, 64) signs
    uint8_t qh[kQK_K / 32];
    uint8_t scales[kQK_K / 32];
};

// IQ3_XXS (3.06 bits): elements 4k .. 4k + 3 are grid entry qs[k] (kIQ3XXSGrid, 4 magnitudes),
// k < 64. Sub-block ib's sign codes and scale: the little-endian uint32 at qs[64 + 4ib]: code of
// the group of 8 elements l (= index groups 2l, 2l + 1) in bits 7l .. 7l + 6, s in bits 28..31;
// value = d * (0.5 + s) * 0.5 * grid * sign   (= d * (2s + 1) / 4 * grid * sign).
struct BlockIQ3_XXS {
    uint16_t d;
    uint8_t qs[3 * kQK_K / 8];
};

// IQ3_S (3.44 bits): elements 4k .. 4k + 3 are grid entry qs[k] | ((qh[k / 8] >> (k % 8)) & 1) << 8
// (kIQ3SGrid, 9 bits); signs[e / 8] bit e % 8 is element e's sign; scales[ib / 2] holds s of
// sub-block ib in nibble ib % 2; value = d * (2s + 1) * grid * sign.
struct BlockIQ3_S {
    uint16_t d;
    uint8_t qs[kQK_K / 4];
    uint8_t qh[kQK_K / 32];
    uint8_t signs[kQK_K / 8];
    uint8_t scales[kQK_K / 64];
};

// IQ1_S (1.56 bits): group g = 4ib + l: grid index (kIQ1SGrid, values -1, 0, 1) = qs[g] |
// bits 3l .. 3l + 2 of qh[ib] << 8; qh[ib] bits 12..14: s, bit 15: the sign of the shift delta;
// value = d * (2s + 1) * (grid + delta), delta = +-0.125 (no sign bits).
struct BlockIQ1_S {
    uint16_t d;
    uint8_t qs[kQK_K / 8];
    uint16_t qh[kQK_K / 32];
};

// IQ1_M (1.75 bits): group g = 4ib + l: grid index = qs[g] | (nibble of qh[2ib + l / 2], low for
// even l, high for odd) & 7 << 8; that nibble's bit 3: delta negative. Per 16 elements a 3-bit
// s: with sc[k] the 4 little-endian uint16 of scales, s of elements 32ib + 16h .. + 15 (h = l / 2)
// is bits 6 (ib % 2) + 3h .. + 2 of sc[ib / 2]. The fp16 d has no field of its own: its 16 bits
// are the top nibbles of sc[0..3] (sc[0] >> 12 the lowest). value = d * (2s + 1) * (grid + delta).
struct BlockIQ1_M {
    uint8_t qs[kQK_K / 8];
    uint8_t qh[kQK_K / 16];
    uint8_t scales[kQK_K / 32];
};

// IQ4_NL's and IQ4_XS's 16 levels (the format's table, ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1's 16 values times 2 (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives): MXFP4's levels.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Activation partner of the K-formats: value = d * q (d is a float32, not fp16);
// bsums[j] = sum of qs[16j .. 16j+15], used to apply the K-formats' mins and offsets cheaply.
struct BlockQ8_K {
    float d;
    int8_t qs[kQK_K];
    int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
inline void kquant_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Q3_K's scale j (0..15) as stored, in [0, 63] (subtract 32 for the signed scale).
inline int q3k_scale(const uint8_t* s, int j) {
    const int lo = j < 8 ? (s[j] & 15) : (s[j - 8] >> 4);
    return lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// IQ4_XS's scale j (0..7) as stored, in [0, 63] (subtract 32 for the signed scale).
inline int iq4xs_scale(uint16_t scales_h, const uint8_t* scales_l, int j) {
    return ((scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((scales_h >> (2 * j)) & 3) << 4);
}

// IQ1_M's fp16 d, gathered from the top nibbles of its 4 scale words.
inline uint16_t iq1m_d(const uint8_t* scales) {
    uint16_t sc[4];
    __builtin_memcpy(sc, scales, 8);
    return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

// MXFP4's block scale 2^(e - 128) as ggml's ggml_e8m0_to_fp32_half computes it.
inline float mxfp4_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

}  // namespace ferrox
