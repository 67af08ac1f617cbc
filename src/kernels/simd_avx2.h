#pragma once
// SIMD helpers shared by the *_avx2.cc files. Include ONLY from translation units compiled
// with -mavx2 -mfma -mf16c (plus the AVX-512 flags for the avx512 level, see isa_variant.h).
//
// Why everything here has internal linkage, and why those files include no header with
// inline functions of external linkage (fp16.h, <algorithm>...): an inline function emitted
// out of line in an AVX2 file is a weak symbol, and the linker may keep that copy for every
// caller, so baseline code on a CPU without AVX2 would run AVX2 instructions (SIGILL). The
// ctest KernelsSimdObjects.ExportOnlyTheirTableFillers checks the objects with nm.

#include <immintrin.h>

#include "kernels/isa_variant.h"

#include <cstdint>
#include <cstring>

// Unrolls a kernel's inner loop, except in the tests' emulated AVX-512 build: fully unrolled,
// SIMDe's emulated vpdpbusd chains took GCC ~10 min to compile; the loops give the same results
// rolled.
#if defined(FERROX_EMULATE_AVX512)
#define FX_UNROLL
#else
#define FX_UNROLL _Pragma("GCC unroll 16")
#endif

namespace ferrox {
namespace {

inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// Decode kernels read one long stream of weights per call, with arithmetic on every line.
// Fetching 4 KiB ahead in software keeps more misses in flight than the hardware prefetcher
// alone. Measured, tg against no prefetch: 1B Q4_K_M (prefetchnta) ~+29 % at 1 thread and ~+5 %
// at 2 (prefetcht0: +21 % and +3 %); 1B Q4_0 (t0) ~+10 % at 1 thread; SmolLM2 Q4_1 (t0) ~+7 % at
// 1 thread; 1B Q8_0 (t0) ~+7 % at 1 thread, ~+6 % at 2. Past the end of a buffer prefetches are harmless:
// they do not fault.
constexpr int64_t kPrefetchAhead = 4096;

// The lines of [p, p + kBytes), unrolled at compile time (GCC -O2 may delete a loop whose body
// is only prefetches) and always inlined (a call would spill every vector register of the
// kernel around it).
template <int64_t kOff, int64_t kBytes, int kHint>
__attribute__((always_inline)) inline void prefetch_lines(const char* q) {
    if constexpr (kOff < kBytes) {
#if defined(__clang__)
        _mm_prefetch(q + kOff, kHint);  // clang's _mm_prefetch is a macro taking an int hint
#else
        _mm_prefetch(q + kOff, static_cast<_mm_hint>(kHint));
#endif
        prefetch_lines<kOff + 64, kBytes, kHint>(q);
    }
}
template <int64_t kBytes, int kHint = _MM_HINT_T0>
__attribute__((always_inline)) inline void prefetch_ahead(const void* p) {
    prefetch_lines<0, kBytes, kHint>(static_cast<const char*>(p) + kPrefetchAhead);
}

#if FERROX_AVX512
// acc + the sums of 4 adjacent products of unsigned u and signed s bytes, per 32-bit lane, with
// no saturation (VNNI's vpdpbusd): the exact integer maddubs + madd + add computes whenever
// maddubs does not saturate, in one instruction.
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }

// One 512-bit register from two 256-bit loads: lo in bits 0..255, hi in 256..511.
inline __m512i load2x256(const void* lo, const void* hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                              _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}
// 16 fp16 values, 8 at lo and 8 at hi, as floats.
inline __m512 cvt2x8_f16(const void* lo, const void* hi) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(lo))),
        _mm_loadu_si128(static_cast<const __m128i*>(hi)), 1));
}
#endif

// fp16 <-> fp32 with F16C (round to nearest even, as tensor/fp16.h).
inline float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f32_to_f16(float f) {
    return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

// exp(x) for 8 floats: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-7 polynomial (Cephes'
// expf coefficients), times 2^n built in the exponent bits. Relative error ~1.5e-7 for
// x in [-87.3, 88]; x above 88 gives exp(88), below -87.33 (incl. -inf) gives 0; NaN unspecified.
inline __m256 exp_ps(__m256 x) {
    const __m256 zero_below = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(zero_below, res);
}

}  // namespace
}  // namespace ferrox
