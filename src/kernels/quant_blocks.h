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
// All structs have 2-byte alignment at most (Q8_K: 4), so a row of blocks needs no padding and
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

}  // namespace ferrox
