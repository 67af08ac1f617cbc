// AVX2 + FMA + F16C dot products and activation quantizers. Compiled with -mavx2 -mfma
// -mf16c; reached only through the table that dispatch.cc builds after CPUID said yes.
// See simd_avx2.h for why this file calls no inline function of external linkage.
//
// Integer products use _mm256_maddubs_epi16 (unsigned 8-bit x signed 8-bit, pairs summed to
// 16 bits with saturation). Every use stays in range: weights are unsigned <= 63, or signed
// and made unsigned with the sign trick (|-128| = 128 still fits as unsigned); activations are
// in [-127, 127] (no quantizer makes -128), so a pair sum is at most 2 * 128 * 127 = 32512.

#include <algorithm>
#include <type_traits>

#include "core/check.h"
#include "kernels/isa_variant.h"
#include "kernels/kernels_internal.h"
#include "kernels/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kernels/simd_avx2.h"

namespace ferrox {
namespace {

// 16 bytes of packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high ones in 16..31 (the
// element order of the 32-formats).
inline __m256i unpack_nibbles(const uint8_t* p) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
}

// 32 bits (little-endian) -> 32 bytes, 0xFF where the bit is set.
inline __m256i expand_bits(const uint8_t* p) {
    uint32_t b;
    std::memcpy(&b, p, 4);
    // Byte k of the result takes byte k / 8 of b, then keeps bit k % 8.
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                            0x0202020202020202, 0x0303030303030303);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(b)), shuf);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// Sums of 4 adjacent products of unsigned x and signed y bytes, as 8 int32.
inline __m256i dot_u8i8(__m256i x, __m256i y) {
#if FERROX_AVX512
    return dpbusd(_mm256_setzero_si256(), x, y);  // the same sums (no pair saturates, above)
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
#endif
}

// As dot_u8i8 for signed x: |x| times y with x's sign moved onto y.
inline __m256i dot_i8i8(__m256i x, __m256i y) {
    return dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ---- 32-element formats ----

// Sums block(i, acc, &offset) over nb blocks.
template <typename F>
inline float sum_blocks(int64_t nb, F block) {
    // One accumulator and one offset sum, in block order, then the lanes summed as
    // (hi + lo), pairs, halves: exactly ggml's x86 order. Several accumulators would hide FMA
    // latency, but decode is bound by memory, not by this chain, and the single order keeps
    // results bit-identical to llama.cpp's (which deep models need for greedy agreement).
    __m256 acc = _mm256_setzero_ps();
    float off = 0;
    for (int64_t i = 0; i < nb; ++i) acc = block(i, acc, &off);
    return hsum_ps(acc) + off;
}

// One block of a row against one activation block, accumulated as ggml does.
inline __m256 blk_q4_0(const BlockQ4_0& x, const BlockQ8_0& y, __m256 acc, float*) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(x.d) * f16_to_f32(y.d));
    const __m256i qx = _mm256_sub_epi8(unpack_nibbles(x.qs), _mm256_set1_epi8(8));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8i8(qx, load256(y.qs))), acc);
}

inline __m256 blk_q4_1(const BlockQ4_1& x, const BlockQ8_1& y, __m256 acc, float* off) {
    *off += f16_to_f32(x.m) * f16_to_f32(y.s);
    const __m256 d = _mm256_set1_ps(f16_to_f32(x.d) * f16_to_f32(y.d));
    const __m256i p = dot_u8i8(unpack_nibbles(x.qs), load256(y.qs));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
}

inline __m256 blk_q8_0(const BlockQ8_0& x, const BlockQ8_0& y, __m256 acc, float*) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(x.d) * f16_to_f32(y.d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8i8(load256(x.qs), load256(y.qs))), acc);
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK == 0);
    const auto* x = static_cast<const BlockQ4_0*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    return sum_blocks(n / kQK, [&](int64_t i, __m256 acc, float* off) {
        return blk_q4_0(x[i], y[i], acc, off);
    });
}

float dot_q4_1(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK == 0);
    const auto* x = static_cast<const BlockQ4_1*>(w);
    const auto* y = static_cast<const BlockQ8_1*>(a);
    return sum_blocks(n / kQK, [&](int64_t i, __m256 acc, float* off) {
        return blk_q4_1(x[i], y[i], acc, off);
    });
}

float dot_q5_0(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK == 0);
    const auto* x = static_cast<const BlockQ5_0*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    return sum_blocks(n / kQK, [&](int64_t i, __m256 acc, float*) {
        const __m256 d = _mm256_set1_ps(f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
        // q - 16 as a signed byte: q itself when the 5th bit is set, else (q & 15) | 0xF0.
        const __m256i hi = _mm256_andnot_si256(expand_bits(x[i].qh), _mm256_set1_epi8(-16));
        const __m256i qx = _mm256_or_si256(unpack_nibbles(x[i].qs), hi);
        const __m256i p = dot_i8i8(qx, load256(y[i].qs));
        return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    });
}

float dot_q5_1(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK == 0);
    const auto* x = static_cast<const BlockQ5_1*>(w);
    const auto* y = static_cast<const BlockQ8_1*>(a);
    return sum_blocks(n / kQK, [&](int64_t i, __m256 acc, float* off) {
        *off += f16_to_f32(x[i].m) * f16_to_f32(y[i].s);
        const __m256 d = _mm256_set1_ps(f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
        const __m256i hi = _mm256_and_si256(expand_bits(x[i].qh), _mm256_set1_epi8(16));
        const __m256i qx = _mm256_or_si256(unpack_nibbles(x[i].qs), hi);
        const __m256i p = dot_u8i8(qx, load256(y[i].qs));
        return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    });
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK == 0);
    const auto* x = static_cast<const BlockQ8_0*>(w);
    const auto* y = static_cast<const BlockQ8_0*>(a);
    return sum_blocks(n / kQK, [&](int64_t i, __m256 acc, float* off) {
        return blk_q8_0(x[i], y[i], acc, off);
    });
}

// ---- several weight rows at once ----
//
// Decode is one activation row against many weight rows; the one-row kernels above serialise
// on their single accumulator (FMA latency). Four rows side by side share each activation
// block and give the core four independent chains, while every row still adds its blocks in
// the same order with the same operations: each result is bit-identical to the one-row kernel.

template <typename WB, typename YB, __m256 (*Blk)(const WB&, const YB&, __m256, float*)>
void vec_dot_rows4(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows, const void* a,
                   float* out) {
    const int64_t nb = n / kQK;
    const auto* y = static_cast<const YB*>(a);
    const auto* base = static_cast<const uint8_t*>(w);
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const auto* x0 = reinterpret_cast<const WB*>(base + (r + 0) * w_row_bytes);
        const auto* x1 = reinterpret_cast<const WB*>(base + (r + 1) * w_row_bytes);
        const auto* x2 = reinterpret_cast<const WB*>(base + (r + 2) * w_row_bytes);
        const auto* x3 = reinterpret_cast<const WB*>(base + (r + 3) * w_row_bytes);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        float o0 = 0, o1 = 0, o2 = 0, o3 = 0;
        for (int64_t i = 0; i < nb; ++i) {
            a0 = Blk(x0[i], y[i], a0, &o0);
            a1 = Blk(x1[i], y[i], a1, &o1);
            a2 = Blk(x2[i], y[i], a2, &o2);
            a3 = Blk(x3[i], y[i], a3, &o3);
        }
        out[r + 0] = hsum_ps(a0) + o0;
        out[r + 1] = hsum_ps(a1) + o1;
        out[r + 2] = hsum_ps(a2) + o2;
        out[r + 3] = hsum_ps(a3) + o3;
    }
    for (; r < n_rows; ++r) {
        const auto* x = reinterpret_cast<const WB*>(base + r * w_row_bytes);
        __m256 acc = _mm256_setzero_ps();
        float off = 0;
        for (int64_t i = 0; i < nb; ++i) acc = Blk(x[i], y[i], acc, &off);
        out[r] = hsum_ps(acc) + off;
    }
}

// ---- several rows against several activation rows ----
//
// Prompt processing multiplies each weight row with many activation rows. A tile of 2 weight
// rows x 4 activation rows prepares each weight block once for 4 products and loads each
// activation block once for 2, in 8 independent accumulator chains. Every output still adds
// its blocks in order with the operations of blk_*: bit-identical to vec_dot.

// The weight side of a block (unpacked once) and its product with an activation block.
struct TileQ4_0 {
    using WB = BlockQ4_0;
    using YB = BlockQ8_0;
    static constexpr bool kOffset = false;
    static constexpr auto kBlk = blk_q4_0;
    static __m256i prep(const WB& x) { return _mm256_sub_epi8(unpack_nibbles(x.qs), _mm256_set1_epi8(8)); }
    static __m256i dot(__m256i qx, __m256i y) { return dot_i8i8(qx, y); }
};
struct TileQ4_1 {
    using WB = BlockQ4_1;
    using YB = BlockQ8_1;
    static constexpr bool kOffset = true;
    static constexpr auto kBlk = blk_q4_1;
    static __m256i prep(const WB& x) { return unpack_nibbles(x.qs); }
    static __m256i dot(__m256i qx, __m256i y) { return dot_u8i8(qx, y); }
};
struct TileQ8_0 {
    using WB = BlockQ8_0;
    using YB = BlockQ8_0;
    static constexpr bool kOffset = false;
    static constexpr auto kBlk = blk_q8_0;
    static __m256i prep(const WB& x) { return load256(x.qs); }
    static __m256i dot(__m256i qx, __m256i y) { return dot_i8i8(qx, y); }
};

template <typename T>
void vec_dot_tile(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows, const void* a,
                  int64_t a_row_bytes, int64_t n_cols, float* out, int64_t out_stride) {
    using WB = typename T::WB;
    using YB = typename T::YB;
    constexpr int kR = 2, kC = 4;
    const int64_t nb = n / kQK;
    const auto* wbase = static_cast<const uint8_t*>(w);
    const auto* abase = static_cast<const uint8_t*>(a);
    int64_t c = 0;
    for (; c + kC <= n_cols; c += kC) {
        const YB* y0 = reinterpret_cast<const YB*>(abase + (c + 0) * a_row_bytes);
        const YB* y1 = reinterpret_cast<const YB*>(abase + (c + 1) * a_row_bytes);
        const YB* y2 = reinterpret_cast<const YB*>(abase + (c + 2) * a_row_bytes);
        const YB* y3 = reinterpret_cast<const YB*>(abase + (c + 3) * a_row_bytes);
        int64_t r = 0;
        for (; r + kR <= n_rows; r += kR) {
            const WB* x0 = reinterpret_cast<const WB*>(wbase + (r + 0) * w_row_bytes);
            const WB* x1 = reinterpret_cast<const WB*>(wbase + (r + 1) * w_row_bytes);
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
            __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
            float o00 = 0, o01 = 0, o02 = 0, o03 = 0, o10 = 0, o11 = 0, o12 = 0, o13 = 0;
            for (int64_t b = 0; b < nb; ++b) {
                const float yd0 = f16_to_f32(y0[b].d), yd1 = f16_to_f32(y1[b].d);
                const float yd2 = f16_to_f32(y2[b].d), yd3 = f16_to_f32(y3[b].d);
                const __m256i q0 = T::prep(x0[b]), q1 = T::prep(x1[b]);
                const float xd0 = f16_to_f32(x0[b].d), xd1 = f16_to_f32(x1[b].d);
                if constexpr (T::kOffset) {
                    const float m0 = f16_to_f32(x0[b].m), m1 = f16_to_f32(x1[b].m);
                    const float s0 = f16_to_f32(y0[b].s), s1 = f16_to_f32(y1[b].s);
                    const float s2 = f16_to_f32(y2[b].s), s3 = f16_to_f32(y3[b].s);
                    o00 += m0 * s0; o01 += m0 * s1; o02 += m0 * s2; o03 += m0 * s3;
                    o10 += m1 * s0; o11 += m1 * s1; o12 += m1 * s2; o13 += m1 * s3;
                }
                const __m256i v0 = load256(y0[b].qs), v1 = load256(y1[b].qs);
                const __m256i v2 = load256(y2[b].qs), v3 = load256(y3[b].qs);
#define FERROX_TILE_STEP(acc, q, v, xd, yd) \
    acc = _mm256_fmadd_ps(_mm256_set1_ps((xd) * (yd)), _mm256_cvtepi32_ps(T::dot(q, v)), acc)
                FERROX_TILE_STEP(a00, q0, v0, xd0, yd0);
                FERROX_TILE_STEP(a01, q0, v1, xd0, yd1);
                FERROX_TILE_STEP(a02, q0, v2, xd0, yd2);
                FERROX_TILE_STEP(a03, q0, v3, xd0, yd3);
                FERROX_TILE_STEP(a10, q1, v0, xd1, yd0);
                FERROX_TILE_STEP(a11, q1, v1, xd1, yd1);
                FERROX_TILE_STEP(a12, q1, v2, xd1, yd2);
                FERROX_TILE_STEP(a13, q1, v3, xd1, yd3);
#undef FERROX_TILE_STEP
            }
            float* o = out + c * out_stride + r;
            o[0] = hsum_ps(a00) + o00;
            o[out_stride] = hsum_ps(a01) + o01;
            o[2 * out_stride] = hsum_ps(a02) + o02;
            o[3 * out_stride] = hsum_ps(a03) + o03;
            o[1] = hsum_ps(a10) + o10;
            o[out_stride + 1] = hsum_ps(a11) + o11;
            o[2 * out_stride + 1] = hsum_ps(a12) + o12;
            o[3 * out_stride + 1] = hsum_ps(a13) + o13;
        }
        for (; r < n_rows; ++r) {
            for (int j = 0; j < kC; ++j) {
                vec_dot_rows4<WB, YB, T::kBlk>(n, wbase + r * w_row_bytes, w_row_bytes, 1,
                                                abase + (c + j) * a_row_bytes, out + (c + j) * out_stride + r);
            }
        }
    }
    for (; c < n_cols; ++c) {
        vec_dot_rows4<WB, YB, T::kBlk>(n, w, w_row_bytes, n_rows, abase + c * a_row_bytes, out + c * out_stride);
    }
}

// ---- Q4_1 repacked in groups of 8 rows, in ggml's order ----
//
// Q4_1 is the default model's type. With ModelOptions::ggml_order its outputs are bit-identical
// to llama.cpp's (which runs ggml's vec_dot for Q4_1 in prompts and decode alike), so this
// packed kernel keeps the 8 lane accumulators per row of dot_q4_1. (By default Q4_1, like Q4_0
// and Q8_0, whose llama.cpp kernels do not share one order either, runs the block-integer
// order of packed_avx2.cc on this same layout, which is faster.)
//
// Per group of 8 rows and per block: the 8 scales d (F16), for Q4_1 the 8 minimums m (F16),
// then for l = 0..3 the bytes qs[4l..4l+3] of each of the 8 rows (32 bytes). Lane l (< 4) of
// ggml's 8-lane block product is the sum of the 4 low nibbles of qs[4l..4l+3] times
// y[4l..4l+3], lane l + 4 that of the high nibbles times y[16+4l..]: one 32-byte load then
// gives lane l and l + 4 for all 8 rows against a broadcast of 4 activation bytes. Each row
// keeps its lanes in their own accumulators (the same fused multiply-adds in block order), its
// offset sum in block order, and the lanes are reduced in hsum_ps's pairing: bit-identical to
// dot_q4_1 / dot_q4_0. For Q4_0, ggml's lane value is the integer sum of (q - 8) * y over 4
// elements; here it is sum(q * y) - 8 * sum(y) with unsigned nibbles: the same integer.
template <typename WB>
struct Packed8 {
    static constexpr bool kMin = std::is_same_v<WB, BlockQ4_1>;  // Q4_1: minimums and offsets
    using YB = std::conditional_t<kMin, BlockQ8_1, BlockQ8_0>;
    static constexpr int64_t kHeader = kMin ? 32 : 16;              // scales (and minimums)
    static constexpr int64_t kBlockBytes = 8 * static_cast<int64_t>(sizeof(WB));
};

template <typename WB>
void repack8_q4(const void* src, int64_t n, int64_t n_rows, void* dst) {
    using P = Packed8<WB>;
    const int64_t nb = n / kQK;
    const auto* x = static_cast<const WB*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* o = out + (g * nb + b) * P::kBlockBytes;
            for (int r = 0; r < 8; ++r) {
                const WB& xb = x[(g * 8 + r) * nb + b];
                std::memcpy(o + 2 * r, &xb.d, 2);
                if constexpr (P::kMin) std::memcpy(o + 16 + 2 * r, &xb.m, 2);
                for (int l = 0; l < 4; ++l) std::memcpy(o + P::kHeader + 32 * l + 4 * r, xb.qs + 4 * l, 4);
            }
        }
    }
}

// NC activation rows (a_row_bytes apart) against every group: out[c * out_stride + r].
template <typename WB, int NC>
void gemm_packed8_q4_cols(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                          float* out, int64_t out_stride) {
    using P = Packed8<WB>;
    using YB = typename P::YB;
    const int64_t nb = n / kQK;
    const YB* y[NC];
    _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) y[c] = reinterpret_cast<const YB*>(static_cast<const uint8_t*>(a) + c * a_row_bytes);
    // Q4_0: 8 * (sum of the 4 activation bytes of lane l) for every block, shared by all groups.
    constexpr int64_t kMaxBlocks = 1024;  // repack_weights packs rows of at most 32768
    int32_t ysum8[P::kMin ? 1 : kMaxBlocks * 8 * NC];
    if constexpr (!P::kMin) {
        if (nb > kMaxBlocks) {
            for (int c = 0; c < NC; ++c)
                for (int64_t r = 0; r < n_rows; ++r) out[c * out_stride + r] = __builtin_nanf("");
            return;
        }
        for (int c = 0; c < NC; ++c) {
            for (int64_t b = 0; b < nb; ++b) {
                for (int l = 0; l < 8; ++l) {
                    const int8_t* q = y[c][b].qs + 4 * l;
                    ysum8[(c * nb + b) * 8 + l] = 8 * (q[0] + q[1] + q[2] + q[3]);
                }
            }
        }
    }
    const __m256i low = _mm256_set1_epi8(15);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        const uint8_t* p = static_cast<const uint8_t*>(w) + g * nb * P::kBlockBytes;
        // acc[c][l]: lane l of ggml's 8 lane accumulators, for the 8 rows, column c.
        __m256 acc[NC][8], off[NC];
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
            off[c] = _mm256_setzero_ps();
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; ++l) acc[c][l] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < nb; ++b, p += P::kBlockBytes) {
            prefetch_ahead<P::kBlockBytes>(p);
            const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
            __m256 d[NC], mv = _mm256_setzero_ps();
            if constexpr (P::kMin) mv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                d[c] = _mm256_mul_ps(dv, _mm256_set1_ps(f16_to_f32(y[c][b].d)));
                if constexpr (P::kMin)
                    off[c] = _mm256_add_ps(off[c], _mm256_mul_ps(mv, _mm256_set1_ps(f16_to_f32(y[c][b].s))));
            }
            _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
                const __m256i q = load256(p + P::kHeader + 32 * l);
                const __m256i qlo = _mm256_and_si256(q, low);
                const __m256i qhi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                    const int8_t* yq = y[c][b].qs;
                    int32_t ylo, yhi;
                    std::memcpy(&ylo, yq + 4 * l, 4);
                    std::memcpy(&yhi, yq + 16 + 4 * l, 4);
                    __m256i plo = dot_u8i8(qlo, _mm256_set1_epi32(ylo));
                    __m256i phi = dot_u8i8(qhi, _mm256_set1_epi32(yhi));
                    if constexpr (!P::kMin) {
                        plo = _mm256_sub_epi32(plo, _mm256_set1_epi32(ysum8[(c * nb + b) * 8 + l]));
                        phi = _mm256_sub_epi32(phi, _mm256_set1_epi32(ysum8[(c * nb + b) * 8 + l + 4]));
                    }
                    acc[c][l] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(plo), acc[c][l]);
                    acc[c][l + 4] = _mm256_fmadd_ps(d[c], _mm256_cvtepi32_ps(phi), acc[c][l + 4]);
                }
            }
        }
        // hsum_ps per row: (l0 + l4) + (l2 + l6), plus (l1 + l5) + (l3 + l7); then the offset.
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
            const __m256 s04 = _mm256_add_ps(acc[c][0], acc[c][4]), s15 = _mm256_add_ps(acc[c][1], acc[c][5]);
            const __m256 s26 = _mm256_add_ps(acc[c][2], acc[c][6]), s37 = _mm256_add_ps(acc[c][3], acc[c][7]);
            const __m256 sum = _mm256_add_ps(_mm256_add_ps(s04, s26), _mm256_add_ps(s15, s37));
            _mm256_storeu_ps(out + c * out_stride + 8 * g, P::kMin ? _mm256_add_ps(sum, off[c]) : sum);
        }
    }
}

#if !FERROX_AVX512
// Makes the compiler hold v in a register here (an empty asm that takes and gives it back).
template <typename V>
__attribute__((always_inline)) inline void pin_register(V& v) {
    __asm__("" : "+x"(v));
}

// gemm_packed8 for Q4_1 on AVX2, NC (3 or 4) activation rows at a time, each output computed with
// exactly the operations of gemm_packed8_q4_cols<BlockQ4_1, 1> (dot_q4_1's), but each group's
// nibbles unpacked once for the NC columns. 16 registers cannot hold 8 lane accumulators for
// several columns; the lanes are independent sums, though, so a group is walked in four passes,
// pass l holding lanes l and l + 4 of the NC columns (2 * NC accumulators) and unpacking the
// block's 32 bytes of lane l once for all of them. Before the passes, one loop over the blocks
// computes each (block, column) scale d = dv * y.d (the one-column kernel's multiply) into a
// buffer the passes read, and the offset sums off += mv * y.s in block order, written as there
// so that the compiler treats them as there (GCC contracts the multiply-add into one fused
// operation, in dot_q4_1 too). The activations' y.d and y.s are converted once per call for
// every group. Blocks go in chunks of kChunk, the lane accumulators kept in memory between
// chunks. Per 8 rows x block x column: ~38 vector operations instead of ~51; measured on Zen 3
// with SmolLM2's shapes, ~14.5 cycles instead of ~17.3 (the 32 multiplies, conversions and
// fused adds that remain, which contend for the same pipes, bound it at ~12).
template <int NC>
void gemm_packed8_q4_1_shared(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                              float* out, int64_t out_stride) {
    using P = Packed8<BlockQ4_1>;
    static_assert(NC >= 1 && NC <= 4, "2 * NC accumulators, the nibbles and temporaries in 16 registers");
    constexpr int64_t kMaxBlocks = 1024;  // repack_weights packs rows of at most 32768
    constexpr int64_t kChunk = 64;
    const int64_t nb = n / kQK;
    DCHECK(nb >= 1 && nb <= kMaxBlocks);  // the caller checks
    const BlockQ8_1* y[NC];
    for (int c = 0; c < NC; ++c)
        y[c] = reinterpret_cast<const BlockQ8_1*>(static_cast<const uint8_t*>(a) + c * a_row_bytes);
    // y.d and y.s of block b, column c as floats, at (b * NC + c) * 2 and + 1.
    float yds[kMaxBlocks * NC * 2];
    for (int64_t b = 0; b < nb; ++b) {
        for (int c = 0; c < NC; ++c) {
            yds[(b * NC + c) * 2] = f16_to_f32(y[c][b].d);
            yds[(b * NC + c) * 2 + 1] = f16_to_f32(y[c][b].s);
        }
    }
    const __m256i low = _mm256_set1_epi8(15);
    __m256 dbuf[kChunk * NC];  // d of block b0 + i, column c (8 rows) at i * NC + c
    __m256 accbuf[4][2 * NC];  // after pass l: lane l of column c at 2 * c, lane l + 4 at 2 * c + 1
    for (int64_t g = 0; g < n_rows / 8; ++g) {
        const uint8_t* pg = static_cast<const uint8_t*>(w) + g * nb * P::kBlockBytes;
        __m256 off[NC];
        for (int c = 0; c < NC; ++c) off[c] = _mm256_setzero_ps();
        for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
            const int64_t kb = std::min(kChunk, nb - b0);
            const uint8_t* pc = pg + b0 * P::kBlockBytes;
            for (int64_t i = 0; i < kb; ++i) {
                const uint8_t* p = pc + i * P::kBlockBytes;
                prefetch_ahead<P::kBlockBytes>(p);
                const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
                const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
                const float* ys = yds + (b0 + i) * NC * 2;
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                    dbuf[i * NC + c] = _mm256_mul_ps(dv, _mm256_set1_ps(ys[2 * c]));
                    off[c] = _mm256_add_ps(off[c], _mm256_mul_ps(mv, _mm256_set1_ps(ys[2 * c + 1])));
                }
            }
            for (int l = 0; l < 4; ++l) {
                __m256 acc[2 * NC];
                _Pragma("GCC unroll 8") for (int j = 0; j < 2 * NC; ++j)
                    acc[j] = b0 == 0 ? _mm256_setzero_ps() : accbuf[l][j];
                const uint8_t* q = pc + P::kHeader + 32 * l;
                for (int64_t i = 0; i < kb; ++i, q += P::kBlockBytes) {
                    __m256i qv = load256(q);
                    // GCC 12 keeps the 3-column loop's 6 accumulators in the stack (and the
                    // offsets in registers) unless these two are pinned: ~25 % slower. Pinning
                    // them in the 4-column loop measured ~4 % slower.
                    if constexpr (NC == 3) pin_register(qv);
                    const __m256i qlo = _mm256_and_si256(qv, low);
                    const __m256i qhi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), low);
                    _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                        const int8_t* yq = y[c][b0 + i].qs;
                        int32_t ylo, yhi;
                        std::memcpy(&ylo, yq + 4 * l, 4);
                        std::memcpy(&yhi, yq + 16 + 4 * l, 4);
                        const __m256i plo = dot_u8i8(qlo, _mm256_set1_epi32(ylo));
                        const __m256i phi = dot_u8i8(qhi, _mm256_set1_epi32(yhi));
                        __m256 d = dbuf[i * NC + c];
                        if constexpr (NC == 3) pin_register(d);
                        acc[2 * c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(plo), acc[2 * c]);
                        acc[2 * c + 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(phi), acc[2 * c + 1]);
                    }
                }
                _Pragma("GCC unroll 8") for (int j = 0; j < 2 * NC; ++j) accbuf[l][j] = acc[j];
            }
        }
        // hsum_ps per row: (l0 + l4) + (l2 + l6), plus (l1 + l5) + (l3 + l7); then the offset.
        for (int c = 0; c < NC; ++c) {
            const __m256 s04 = _mm256_add_ps(accbuf[0][2 * c], accbuf[0][2 * c + 1]);
            const __m256 s15 = _mm256_add_ps(accbuf[1][2 * c], accbuf[1][2 * c + 1]);
            const __m256 s26 = _mm256_add_ps(accbuf[2][2 * c], accbuf[2][2 * c + 1]);
            const __m256 s37 = _mm256_add_ps(accbuf[3][2 * c], accbuf[3][2 * c + 1]);
            const __m256 sum = _mm256_add_ps(_mm256_add_ps(s04, s26), _mm256_add_ps(s15, s37));
            _mm256_storeu_ps(out + c * out_stride + 8 * g, _mm256_add_ps(sum, off[c]));
        }
    }
}
#endif

#if FERROX_AVX512
// gemm_packed8 for Q4_1 on AVX-512, 16 rows per pass: groups g and g + 1 (rows 8g..8g+15, adjacent
// in the output) in the two halves of each 512-bit register, NC activation rows at a time. Each
// row's operations are exactly those of gemm_packed8_q4_cols<BlockQ4_1, 1> (dot_q4_1's, ggml's
// order): its 8 lane accumulators (acc[c][l], 16 rows each), the scale d = dv * y.d, the offset
// sum off = fma(mv, y.s, off) in block order, the hsum_ps pairing at the end; vpdpbusd gives the
// same integer lane sums as maddubs + madd. Per block the pair's nibbles are unpacked once for
// the NC columns, so a batch step pays ~8 dpbusd + 8 conversions + 8 FMAs per 16 rows and
// column where the 8-row kernel paid that per 8 rows. n_rows / 8 even: the caller sends an odd
// last group to the 8-row kernel.
template <int NC>
void gemm_packed16_q4_1(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                        float* out, int64_t out_stride) {
    using P = Packed8<BlockQ4_1>;
    static_assert(NC >= 1 && NC <= 3, "8 NC accumulators, NC offsets and scales, the nibbles in 32 registers");
    const int64_t nb = n / kQK;
    const BlockQ8_1* y[NC];
    _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c)
        y[c] = reinterpret_cast<const BlockQ8_1*>(static_cast<const uint8_t*>(a) + c * a_row_bytes);
    const __m512i low = _mm512_set1_epi8(15);
    for (int64_t gp = 0; gp < n_rows / 16; ++gp) {
        const uint8_t* p0 = static_cast<const uint8_t*>(w) + 2 * gp * nb * P::kBlockBytes;
        const uint8_t* p1 = p0 + nb * P::kBlockBytes;
        __m512 acc[NC][8], off[NC];
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
            off[c] = _mm512_setzero_ps();
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; ++l) acc[c][l] = _mm512_setzero_ps();
        }
        for (int64_t b = 0; b < nb; ++b, p0 += P::kBlockBytes, p1 += P::kBlockBytes) {
            prefetch_ahead<P::kBlockBytes>(p0);
            prefetch_ahead<P::kBlockBytes>(p1);
            const __m512 dv = cvt2x8_f16(p0, p1);
            const __m512 mv = cvt2x8_f16(p0 + 16, p1 + 16);
            __m512 d[NC];
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                d[c] = _mm512_mul_ps(dv, _mm512_set1_ps(f16_to_f32(y[c][b].d)));
                off[c] = _mm512_fmadd_ps(mv, _mm512_set1_ps(f16_to_f32(y[c][b].s)), off[c]);
            }
            _Pragma("GCC unroll 4") for (int l = 0; l < 4; ++l) {
                const __m512i q = load2x256(p0 + P::kHeader + 32 * l, p1 + P::kHeader + 32 * l);
                const __m512i qlo = _mm512_and_si512(q, low);
                const __m512i qhi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low);
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
                    const int8_t* yq = y[c][b].qs;
                    int32_t ylo, yhi;
                    std::memcpy(&ylo, yq + 4 * l, 4);
                    std::memcpy(&yhi, yq + 16 + 4 * l, 4);
                    const __m512i plo = dpbusd(_mm512_setzero_si512(), qlo, _mm512_set1_epi32(ylo));
                    const __m512i phi = dpbusd(_mm512_setzero_si512(), qhi, _mm512_set1_epi32(yhi));
                    acc[c][l] = _mm512_fmadd_ps(d[c], _mm512_cvtepi32_ps(plo), acc[c][l]);
                    acc[c][l + 4] = _mm512_fmadd_ps(d[c], _mm512_cvtepi32_ps(phi), acc[c][l + 4]);
                }
            }
        }
        _Pragma("GCC unroll 4") for (int c = 0; c < NC; ++c) {
            const __m512 s04 = _mm512_add_ps(acc[c][0], acc[c][4]), s15 = _mm512_add_ps(acc[c][1], acc[c][5]);
            const __m512 s26 = _mm512_add_ps(acc[c][2], acc[c][6]), s37 = _mm512_add_ps(acc[c][3], acc[c][7]);
            const __m512 sum = _mm512_add_ps(_mm512_add_ps(s04, s26), _mm512_add_ps(s15, s37));
            _mm512_storeu_ps(out + c * out_stride + 16 * gp, _mm512_add_ps(sum, off[c]));
        }
    }
}
#endif

// gemm_packed8 for Q4_1. AVX2: four columns at a time (gemm_packed8_q4_1_shared), the last three
// together, a last one or two with the one-pass kernel (8 accumulators; two columns shared
// measured no faster than that). AVX-512: 16 rows and three columns per pass
// (gemm_packed16_q4_1), an odd last group of 8 rows with the one-pass kernel.
void gemm_packed8_q4_1(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                       int64_t n_cols, float* out, int64_t out_stride) {
    const auto* ap = static_cast<const uint8_t*>(a);
    int64_t c = 0;
#if FERROX_AVX512
    if (n_rows >= 16) {
        const int64_t rows16 = n_rows / 16 * 16;
        const auto wide = [&](auto kernel, int cols) {
            kernel(n, w, rows16, ap + c * a_row_bytes, a_row_bytes, out + c * out_stride, out_stride);
            c += cols;
        };
        while (c + 3 <= n_cols) wide(gemm_packed16_q4_1<3>, 3);
        if (n_cols - c == 2) wide(gemm_packed16_q4_1<2>, 2);
        if (n_cols - c == 1) wide(gemm_packed16_q4_1<1>, 1);
        if (rows16 == n_rows) return;
        // The odd last group of 8 rows, every column.
        w = static_cast<const uint8_t*>(w) + rows16 / 8 * (n / kQK) * Packed8<BlockQ4_1>::kBlockBytes;
        out += rows16;
        n_rows -= rows16;
        c = 0;
    }
    for (; c + 2 <= n_cols; c += 2)
        gemm_packed8_q4_cols<BlockQ4_1, 2>(n, w, n_rows, ap + c * a_row_bytes, a_row_bytes, out + c * out_stride,
                                           out_stride);
#else
    if (n >= kQK && n / kQK <= 1024) {  // gemm_packed8_q4_1_shared's kMaxBlocks
        const auto shared = [&](auto kernel, int cols) {
            kernel(n, w, n_rows, ap + c * a_row_bytes, a_row_bytes, out + c * out_stride, out_stride);
            c += cols;
        };
        while (c + 4 <= n_cols) shared(gemm_packed8_q4_1_shared<4>, 4);
        if (n_cols - c == 3) shared(gemm_packed8_q4_1_shared<3>, 3);
    }
#endif
    for (; c < n_cols; ++c)
        gemm_packed8_q4_cols<BlockQ4_1, 1>(n, w, n_rows, ap + c * a_row_bytes, a_row_bytes, out + c * out_stride,
                                           out_stride);
}

// ---- K formats ----

// The 8 6-bit scales and 8 mins of a Q4_K/Q5_K block as 16-bit lanes (0-7 scales, 8-15
// mins): the unpacking of quant_blocks.h done on the 32-bit words of bytes 0-3, 4-7, 8-11.
inline __m256i kquant_scales_mins(const uint8_t* s) {
    uint32_t w0, w1, w2;
    std::memcpy(&w0, s, 4);
    std::memcpy(&w1, s + 4, 4);
    std::memcpy(&w2, s + 8, 4);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    const uint32_t m_lo = w1 & 0x3f3f3f3fu;
    const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    return _mm256_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi),
                                               static_cast<int>(m_lo), static_cast<int>(m_hi)));
}

// sum_j m_j * (bsums[2j] + bsums[2j+1]) as 4 int32 lanes: the min term of a Q4_K/Q5_K block.
inline __m128i kquant_min_term(__m256i scales_mins, const int16_t* bsums) {
    const __m256i bs = load256(bsums);
    const __m128i pairs =
        _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), pairs);
}

// A vector of 16-bit lane `idx` of each 128-bit half of v (pshufb picks bytes 2idx, 2idx+1).
inline __m256i broadcast_lane16(__m256i v, int idx_lo, int idx_hi) {
    const __m256i shuf = _mm256_set_m128i(
        _mm_set1_epi16(static_cast<short>(((2 * idx_hi + 1) << 8) | (2 * idx_hi))),
        _mm_set1_epi16(static_cast<short>(((2 * idx_lo + 1) << 8) | (2 * idx_lo))));
    return _mm256_shuffle_epi8(v, shuf);
}

// Chunk c (64 elements) of a Q4_K/Q5_K block: lo/hi are sub-blocks 2c and 2c+1 (unsigned
// quants), scales the 8 sub-block scales in both halves. Returns sc-weighted sums, 8 x int32.
inline __m256i kquant_chunk(__m256i lo, __m256i hi, const int8_t* y, __m256i scales, int c) {
    const __m256i p0 = _mm256_maddubs_epi16(lo, load256(y + 64 * c));
    const __m256i p1 = _mm256_maddubs_epi16(hi, load256(y + 64 * c + 32));
    return _mm256_add_epi32(_mm256_madd_epi16(p0, broadcast_lane16(scales, 2 * c, 2 * c)),
                            _mm256_madd_epi16(p1, broadcast_lane16(scales, 2 * c + 1, 2 * c + 1)));
}

float dot_q4_k(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK_K == 0);
    const auto* x = static_cast<const BlockQ4_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    const int64_t nb = n / kQK_K;
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float d = y[i].d * f16_to_f32(x[i].d);
        const float dmin = y[i].d * f16_to_f32(x[i].dmin);
        const __m256i sm = kquant_scales_mins(x[i].scales);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(kquant_min_term(sm, y[i].bsums)),
                             acc_m);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        auto chunk = [&](int c) {
            const __m256i q4 = load256(x[i].qs + 32 * c);
            return kquant_chunk(_mm256_and_si256(q4, low4),
                                _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4), y[i].qs, scales,
                                c);
        };
        const __m256i sumi = _mm256_add_epi32(_mm256_add_epi32(chunk(0), chunk(1)),
                                              _mm256_add_epi32(chunk(2), chunk(3)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    return hsum_ps(acc) - _mm_cvtss_f32(acc_m);
}

// Q4_K in llama.cpp's x86 order (QuantKernels::vec_dot_rows_x86, ModelOptions::ggml_order).
// llama.cpp repacks Q4_K on x86 (ggml-cpu/repack, q4_K_8x8) and runs it through two kernels: its
// gemm for a batch's rows in groups of 4, its gemv for decode and the n % 4 rows after them. Both keep the sums of
// sc * q * y and of m * bsums in two float accumulators, fused multiply-adds by fp16(d) * y.d and
// fp16(dmin) * y.d, and return the first minus the second; the gemv scales each super-block's
// integer sums once (kPer64 false), the gemm each 64-element chunk's (two sub-blocks, kPer64).
template <bool kPer64>
float dot_q4_k_x86(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK_K == 0);
    const auto* x = static_cast<const BlockQ4_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    const int64_t nb = n / kQK_K;
    const __m256i low4 = _mm256_set1_epi8(15);
    float acc = 0, acc_m = 0;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d) * y[i].d;
        const float dmin = f16_to_f32(x[i].dmin) * y[i].d;
        const __m256i sm = kquant_scales_mins(x[i].scales);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        alignas(16) int32_t mins[4];  // chunk c's m * bsums (kquant_min_term's lane c)
        _mm_store_si128(reinterpret_cast<__m128i*>(mins), kquant_min_term(sm, y[i].bsums));
        int32_t sum = 0, sum_m = 0;
        for (int c = 0; c < 4; ++c) {
            const __m256i q4 = load256(x[i].qs + 32 * c);
            const int32_t chunk = hsum_epi32(kquant_chunk(_mm256_and_si256(q4, low4),
                                                          _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4), y[i].qs,
                                                          scales, c));
            if constexpr (kPer64) {
                acc = __builtin_fmaf(static_cast<float>(chunk), d, acc);
                acc_m = __builtin_fmaf(static_cast<float>(mins[c]), dmin, acc_m);
            } else {
                sum += chunk;
                sum_m += mins[c];
            }
        }
        if constexpr (!kPer64) {
            acc = __builtin_fmaf(static_cast<float>(sum), d, acc);
            acc_m = __builtin_fmaf(static_cast<float>(sum_m), dmin, acc_m);
        }
    }
    return acc - acc_m;
}

float dot_q5_k(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK_K == 0);
    const auto* x = static_cast<const BlockQ5_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    const int64_t nb = n / kQK_K;
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m256i bit4 = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const float d = y[i].d * f16_to_f32(x[i].d);
        const float dmin = y[i].d * f16_to_f32(x[i].dmin);
        const __m256i sm = kquant_scales_mins(x[i].scales);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(kquant_min_term(sm, y[i].bsums)),
                             acc_m);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        // Chunk c uses bits 2c (low nibbles) and 2c+1 (high nibbles) of qh: shifted down by 2c
        // they are bits 0 and 1 of each byte (the 16-bit shifts only spill into masked bits).
        const __m256i qh = load256(x[i].qh);
        auto chunk = [&](int c) {
            const __m256i q4 = load256(x[i].qs + 32 * c);
            const __m256i h = _mm256_srli_epi16(qh, 2 * c);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q4, low4),
                                               _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), low4),
                                               _mm256_and_si256(_mm256_slli_epi16(h, 3), bit4));
            return kquant_chunk(lo, hi, y[i].qs, scales, c);
        };
        const __m256i sumi = _mm256_add_epi32(_mm256_add_epi32(chunk(0), chunk(1)),
                                              _mm256_add_epi32(chunk(2), chunk(3)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    return hsum_ps(acc) - _mm_cvtss_f32(acc_m);
}

// sum sc * (q - 32) * y = sum sc * q * y - 32 * sum_j sc_j * bsums_j: the products run on the
// unsigned 6-bit q, the offset comes from the activation's 16-element sums. One block's integer
// sums in ggml's 8 lanes (lane l: elements 4l..4l+3 of each 32, minus the offset of 16-element
// groups 2l and 2l+1).
inline __m256i q6_k_block_lanes(const BlockQ6_K& x, const BlockQ8_K& y) {
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(y.bsums)), 5));
    for (int h = 0; h < 2; ++h) {
        // Scales of this half in both 128-bit lanes; group k of 32 elements uses scale 2k
        // for its first 16 (16-bit lanes 0-7) and 2k+1 for the rest (lanes 8-15).
        const __m256i sch = _mm256_broadcastsi128_si256(h == 0 ? _mm256_castsi256_si128(sc16)
                                                               : _mm256_extracti128_si256(sc16, 1));
        const __m256i ql0 = load256(x.ql + 64 * h);
        const __m256i ql1 = load256(x.ql + 64 * h + 32);
        const __m256i qh = load256(x.qh + 32 * h);
        const int8_t* yq = y.qs + 128 * h;
        auto group = [&](__m256i q, int k) {
            const __m256i p = _mm256_maddubs_epi16(q, load256(yq + 32 * k));
            return _mm256_madd_epi16(p, broadcast_lane16(sch, 2 * k, 2 * k + 1));
        };
        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
        const __m256i q2 =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45));
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(group(q0, 0), group(q1, 1)),
                                                       _mm256_add_epi32(group(q2, 2), group(q3, 3))));
    }
    return sumi;
}

float dot_q6_k(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK_K == 0);
    const auto* x = static_cast<const BlockQ6_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float d = y[i].d * f16_to_f32(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q6_k_block_lanes(x[i], y[i])), acc);
    }
    return hsum_ps(acc);
}

// Q6_K as llama.cpp's tiled K-quant product (ggml-cpu/tiled, which it takes for batches of 8
// rows and more; QuantKernels::vec_dot_rows_x86_batch): per block the whole integer sum times
// fp16(d), then a fused multiply-add by y.d, block by block.
float dot_q6_k_x86_tiled(int64_t n, const void* w, const void* a) {
    DCHECK(n % kQK_K == 0);
    const auto* x = static_cast<const BlockQ6_K*>(w);
    const auto* y = static_cast<const BlockQ8_K*>(a);
    float acc = 0;
    for (int64_t i = 0; i < n / kQK_K; ++i) {
        const float r = f16_to_f32(x[i].d) * static_cast<float>(hsum_epi32(q6_k_block_lanes(x[i], y[i])));
        acc = __builtin_fmaf(r, y[i].d, acc);
    }
    return acc;
}

// ---- plain floats ----

float dot_f32(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const float*>(w);
    const auto* y = static_cast<const float*>(a);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k),
                                     acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    float sum =
        hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += x[i] * y[i];
    return sum;
}

inline __m256 load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

float dot_f16(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(load_f16(x + i + 8 * k), load_f16(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), acc[0]);
    float sum =
        hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += f16_to_f32(x[i]) * f16_to_f32(y[i]);
    return sum;
}

// F16 rows against several F16 activation rows (prompts): each weight row is converted to
// floats once per call instead of once per token, then two tokens share its loads. Every
// output keeps dot_f16's four accumulators, its element order and its final reduction, so the
// bits are dot_f16's (the conversions are exact).
void vec_dot_tile_f16(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows, const void* a,
                      int64_t a_row_bytes, int64_t n_cols, float* out, int64_t out_stride) {
    const auto* wbase = static_cast<const uint8_t*>(w);
    const auto* abase = static_cast<const uint8_t*>(a);
    if (n % 32 != 0 || n > 16384) {
        for (int64_t c = 0; c < n_cols; ++c) {
            for (int64_t r = 0; r < n_rows; ++r) {
                out[c * out_stride + r] = dot_f16(n, wbase + r * w_row_bytes, abase + c * a_row_bytes);
            }
        }
        return;
    }
    alignas(32) float x32[16384];
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto* x = reinterpret_cast<const uint16_t*>(wbase + r * w_row_bytes);
        for (int64_t i = 0; i < n; i += 8) _mm256_store_ps(x32 + i, load_f16(x + i));
        int64_t c = 0;
        for (; c + 2 <= n_cols; c += 2) {
            const auto* y0 = reinterpret_cast<const uint16_t*>(abase + c * a_row_bytes);
            const auto* y1 = reinterpret_cast<const uint16_t*>(abase + (c + 1) * a_row_bytes);
            __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;
            __m256 q0 = p0, q1 = p0, q2 = p0, q3 = p0;
            for (int64_t i = 0; i < n; i += 32) {
                const __m256 x0 = _mm256_load_ps(x32 + i), x1 = _mm256_load_ps(x32 + i + 8);
                const __m256 x2 = _mm256_load_ps(x32 + i + 16), x3 = _mm256_load_ps(x32 + i + 24);
                p0 = _mm256_fmadd_ps(x0, load_f16(y0 + i), p0);
                p1 = _mm256_fmadd_ps(x1, load_f16(y0 + i + 8), p1);
                p2 = _mm256_fmadd_ps(x2, load_f16(y0 + i + 16), p2);
                p3 = _mm256_fmadd_ps(x3, load_f16(y0 + i + 24), p3);
                q0 = _mm256_fmadd_ps(x0, load_f16(y1 + i), q0);
                q1 = _mm256_fmadd_ps(x1, load_f16(y1 + i + 8), q1);
                q2 = _mm256_fmadd_ps(x2, load_f16(y1 + i + 16), q2);
                q3 = _mm256_fmadd_ps(x3, load_f16(y1 + i + 24), q3);
            }
            out[c * out_stride + r] = hsum_ps(_mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3)));
            out[(c + 1) * out_stride + r] = hsum_ps(_mm256_add_ps(_mm256_add_ps(q0, q1), _mm256_add_ps(q2, q3)));
        }
        for (; c < n_cols; ++c) out[c * out_stride + r] = dot_f16(n, x, abase + c * a_row_bytes);
    }
}

inline __m256 load_bf16(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

inline float bf16_scalar(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float dot_bf16(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const uint16_t*>(w);
    const auto* y = static_cast<const uint16_t*>(a);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(load_bf16(x + i + 8 * k), load_bf16(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), acc[0]);
    float sum =
        hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += bf16_scalar(x[i]) * bf16_scalar(y[i]);
    return sum;
}

// ---- activation quantizers ----

// Q8_0 / Q8_1 as ggml's x86 code: d = amax / 127 stored as fp16, q = round_half_even(x * (127
// / amax)), and for Q8_1 s = fp16(d * sum(q)).
//
// Eight blocks at a time: their maxima and quant sums are reduced across the eight together
// (a transpose of adds / maxes) and d, 127 / amax and s are one vector division, multiply and
// fp16 conversion each, not a chain per block. One block at a time cost ~15-20 ns on Zen 4
// (two dependent divisions and three horizontal reductions per block; the blocks' chains did
// not overlap), ~8 % of a 16-sequence decode step. IEEE division, multiplication and integer
// adds give the same bits in any lane, and the max of magnitudes is order-free for non-NaN
// inputs, so the bytes are the per-block formula's.

// Lane b = max over the lanes of v[b].
inline __m256 hmax_8x8(const __m256* v) {
    __m256 t[4];
    #pragma GCC unroll 8
    for (int k = 0; k < 4; ++k)
        t[k] = _mm256_max_ps(_mm256_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm256_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    const __m256 u0 = _mm256_max_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 u1 = _mm256_max_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_max_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lane b = sum of the lanes of v[b].
inline __m256i hsum_8x8(const __m256i* v) {
    __m256i t[4];
    #pragma GCC unroll 8
    for (int k = 0; k < 4; ++k)
        t[k] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                                _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    const __m256i u0 = _mm256_add_epi32(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
    const __m256i u1 = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// Blocks [0, nb) of x into out[0, nb) (1 <= nb <= 8; lanes past nb are filler): d, the 32
// quants, and for Q8_1 s = fp16(d * sum(q)).
template <typename Block>
inline void quantize_8_blocks(const float* x, int nb, Block* out) {
    constexpr bool kSum = std::is_same_v<Block, BlockQ8_1>;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax[8];
    #pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
        if (b >= nb) {
            amax[b] = _mm256_setzero_ps();
            continue;
        }
        const float* xb = x + 32 * b;
        const __m256 m01 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb)),
                                         _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8)));
        const __m256 m23 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 16)),
                                         _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 24)));
        amax[b] = _mm256_max_ps(m01, m23);
    }
    const __m256 max = hmax_8x8(amax);
    const __m256 d = _mm256_div_ps(max, _mm256_set1_ps(127.f));
    const __m256 id = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(127.f), max),
                                    _mm256_cmp_ps(max, _mm256_setzero_ps(), _CMP_NEQ_UQ));
    alignas(16) uint16_t dh[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(dh), _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
    __m256i sums[8];
    #pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
        if (b >= nb) {
            sums[b] = _mm256_setzero_si256();
            continue;
        }
        const float* xb = x + 32 * b;
        const __m256 idb = _mm256_permutevar8x32_ps(id, _mm256_set1_epi32(b));
        __m256i qi[4];
        #pragma GCC unroll 8
        for (int k = 0; k < 4; ++k)
            qi[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), idb),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if constexpr (kSum) sums[b] = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
        // packs work per 128-bit lane: the bytes come out as dwords 0,2,4,6,1,3,5,7; permute back.
        const __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs),
                            _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    for (int b = 0; b < nb; ++b) out[b].d = dh[b];
    if constexpr (kSum) {
        alignas(16) uint16_t sh[8];
        const __m256 s = _mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum_8x8(sums)));
        _mm_store_si128(reinterpret_cast<__m128i*>(sh), _mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT));
        for (int b = 0; b < nb; ++b) out[b].s = sh[b];
    }
}

template <typename Block>
void quantize_q8_rows(const float* x, void* dst, int64_t n) {
    DCHECK(n % kQK == 0);
    auto* out = static_cast<Block*>(dst);
    const int64_t nb = n / kQK;
    for (int64_t i = 0; i < nb; i += 8)
        quantize_8_blocks(x + i * kQK, static_cast<int>(std::min<int64_t>(8, nb - i)), out + i);
}

void quantize_q8_0(const float* x, void* dst, int64_t n) { quantize_q8_rows<BlockQ8_0>(x, dst, n); }

void quantize_q8_1(const float* x, void* dst, int64_t n) { quantize_q8_rows<BlockQ8_1>(x, dst, n); }

// Q8_K byte for byte as quantize_row_q8_k_ref (ggml's quantize_row_q8_K_ref, which llama.cpp
// runs on x86 too): the first element of largest magnitude is the signed max (NaNs never are),
// iscale = -127 / max, q = min(127, nearest_int(iscale * x)) with nearest_int's 1.5 * 2^23
// trick done on the vector's bits, stored as its low byte (the reference's int8 cast: an
// overflowed iscale gives the same wrapped bytes), bsums from the stored bytes, d = 1 / iscale.
void quantize_q8_k(const float* x, void* dst, int64_t n) {
    DCHECK(n % kQK_K == 0);
    auto* b = static_cast<BlockQ8_K*>(dst);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
        __m256 amax8 = _mm256_setzero_ps();
        for (int k = 0; k < kQK_K / 8; ++k)  // max_ps returns its second operand for a NaN first one
            amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), amax8);
        const float amax = hmax_ps(amax8);
        if (amax == 0) {
            std::memset(&b[i], 0, sizeof(BlockQ8_K));
            continue;
        }
        float max = 0;
        const __m256 am = _mm256_set1_ps(amax);
        for (int k = 0; k < kQK_K / 8; ++k) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), am, _CMP_EQ_OQ));
            if (hit) {
                max = x[8 * k + __builtin_ctz(static_cast<unsigned>(hit))];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256 magic = _mm256_set1_ps(12582912.f);
        const __m256i mant = _mm256_set1_epi32(0x007fffff), bias = _mm256_set1_epi32(0x00400000);
        const __m256i cap = _mm256_set1_epi32(127), byte = _mm256_set1_epi32(0xff);
        for (int k = 0; k < kQK_K / 32; ++k) {
            __m256i q[4];
            for (int j = 0; j < 4; ++j) {
                // The product rounded to float before the rounding add, as the reference does
                // (the empty asm keeps the compiler from fusing the two).
                __m256 p = _mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * k + 8 * j));
                __asm__("" : "+x"(p));
                const __m256 v = _mm256_add_ps(p, magic);
                const __m256i r = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), mant), bias);
                q[j] = _mm256_and_si256(_mm256_min_epi32(r, cap), byte);  // the low byte, 0..255
            }
            // Unsigned packs of values in 0..255 are exact; per 128-bit lane, so permute back.
            const __m256i p8 = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + 32 * k),
                                _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        }
        for (int j = 0; j < kQK_K / 16; ++j) {
            const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16 * j)));
            b[i].bsums[j] = static_cast<int16_t>(hsum_epi32(_mm256_madd_epi16(w, _mm256_set1_epi16(1))));
        }
        b[i].d = 1 / iscale;
    }
}

void quantize_f16(const float* x, void* dst, int64_t n) {
    auto* y = static_cast<uint16_t*>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16(x + i));
    for (; i < n; ++i) dst[i] = f16_to_f32(x[i]);
}

}  // namespace

namespace detail::FERROX_ISA_NS {

void override_quant_kernels(QuantKernels* table) {
    auto set = [&](DType type, float (*dot)(int64_t, const void*, const void*),
                   void (*rows)(int64_t, const void*, int64_t, int64_t, const void*, float*)) {
        QuantKernels& k = table[kernel_index(type)];
        k.vec_dot = dot;
        k.vec_dot_rows = rows;
        if (k.act_type == DType::kQ8_0) k.quantize_act_row = quantize_q8_0;
        if (k.act_type == DType::kQ8_1) k.quantize_act_row = quantize_q8_1;
        if (k.act_type == DType::kF16) k.quantize_act_row = quantize_f16;
        if (k.act_type == DType::kQ8_K) k.quantize_act_row = quantize_q8_k;
    };
    set(DType::kF32, dot_f32, vec_dot_rows_loop<dot_f32>);
    set(DType::kF16, dot_f16, vec_dot_rows_loop<dot_f16>);
    set(DType::kBF16, dot_bf16, vec_dot_rows_loop<dot_bf16>);
    set(DType::kQ4_0, dot_q4_0, vec_dot_rows4<BlockQ4_0, BlockQ8_0, blk_q4_0>);
    set(DType::kQ4_1, dot_q4_1, vec_dot_rows4<BlockQ4_1, BlockQ8_1, blk_q4_1>);
    set(DType::kQ5_0, dot_q5_0, vec_dot_rows_loop<dot_q5_0>);
    set(DType::kQ5_1, dot_q5_1, vec_dot_rows_loop<dot_q5_1>);
    set(DType::kQ8_0, dot_q8_0, vec_dot_rows_loop<dot_q8_0>);  // 4 rows measured ~8% slower
    set(DType::kQ4_K, dot_q4_k, vec_dot_rows_loop<dot_q4_k>);
    set(DType::kQ5_K, dot_q5_k, vec_dot_rows_loop<dot_q5_k>);
    set(DType::kQ6_K, dot_q6_k, vec_dot_rows_loop<dot_q6_k>);
    // llama.cpp's x86 order: its vec_dot order for Q5_0, Q6_K and Q8_0 (which these kernels
    // have), its tiled kernel's for Q6_K batches of 8 rows and more, its repacked kernels' for Q4_K.
    for (DType t : {DType::kQ5_0, DType::kQ6_K, DType::kQ8_0}) {
        table[kernel_index(t)].vec_dot_rows_x86 = table[kernel_index(t)].vec_dot_rows;
    }
    QuantKernels& q6 = table[kernel_index(DType::kQ6_K)];
    q6.vec_dot_rows_x86_batch = vec_dot_rows_loop<dot_q6_k_x86_tiled>;
    q6.x86_batch_from = 8;
    q6.x86_batch_group = 1;
    QuantKernels& q4 = table[kernel_index(DType::kQ4_K)];
    q4.vec_dot_rows_x86 = vec_dot_rows_loop<dot_q4_k_x86<false>>;
    q4.vec_dot_rows_x86_batch = vec_dot_rows_loop<dot_q4_k_x86<true>>;
    q4.x86_batch_from = 4;
    q4.x86_batch_group = 4;
    table[kernel_index(DType::kQ4_0)].vec_dot_tile = vec_dot_tile<TileQ4_0>;
    table[kernel_index(DType::kQ4_1)].vec_dot_tile = vec_dot_tile<TileQ4_1>;
    table[kernel_index(DType::kQ8_0)].vec_dot_tile = vec_dot_tile<TileQ8_0>;
    table[kernel_index(DType::kF16)].vec_dot_tile = vec_dot_tile_f16;
    table[kernel_index(DType::kF16)].dequantize_row = dequantize_f16;
    table[kernel_index(DType::kQ4_1)].repack8 = repack8_q4<BlockQ4_1>;
    table[kernel_index(DType::kQ4_1)].gemm_packed8 = gemm_packed8_q4_1;
}

}  // namespace detail::FERROX_ISA_NS
}  // namespace ferrox

#else  // not built for AVX2 (a non-x86 target): dispatch never selects it.
namespace ferrox::detail::FERROX_ISA_NS {
void override_quant_kernels(QuantKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
