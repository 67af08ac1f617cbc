#pragma once
// Force-included (-include) before each SIMD kernel source when the kernel tests build the
// "avx512_emulated" variant (tests/kernels/CMakeLists.txt): SIMDe's portable definitions of
// the AVX-512 intrinsics, under their Intel names, on a compiler told only about AVX2. The
// kernels' AVX-512 code then runs, instruction by instruction in emulation, on any AVX2
// machine, and the kernel tests hold it to the scalar oracle like every other ISA.
//
// An intrinsic SIMDe lacks fails the build loudly (GCC's own definition then refuses to
// inline without the target flag); the few the kernels need are defined below from ones
// SIMDe has, each a plain composition of documented per-lane semantics.

#define FERROX_EMULATE_AVX512 1
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

// SIMDe's native alias of vpmaddwd, 16 lanes, takes the masked form's four arguments (its
// madd.h); the plain form is its simde_mm512_madd_epi16(a, b).
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)

// vpsrad by an immediate, 16 lanes (SIMDe has no alias): each half as the 8-lane AVX2 form.
static inline simde__m512i ferrox_emu_mm512_srai_epi32(simde__m512i a, int imm) {
    return simde_mm512_inserti64x4(simde_mm512_castsi256_si512(simde_mm256_srai_epi32(simde_mm512_extracti64x4_epi64(a, 0), imm)),
                                   simde_mm256_srai_epi32(simde_mm512_extracti64x4_epi64(a, 1), imm), 1);
}
#define _mm512_srai_epi32(a, imm) ferrox_emu_mm512_srai_epi32(a, imm)

// vcvtph2ps, 16 lanes: each lane as the 8-lane F16C form converts it.
static inline simde__m512 ferrox_emu_mm512_cvtph_ps(simde__m256i a) {
    return simde_mm512_insertf32x8(simde_mm512_castps256_ps512(simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(a))),
                                   simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(a, 1)), 1);
}
#define _mm512_cvtph_ps(a) ferrox_emu_mm512_cvtph_ps(a)

// vcvtdq2ps, 16 lanes: each lane as the 8-lane AVX form converts it (current rounding mode).
static inline simde__m512 ferrox_emu_mm512_cvtepi32_ps(simde__m512i a) {
    return simde_mm512_insertf32x8(
        simde_mm512_castps256_ps512(simde_mm256_cvtepi32_ps(simde_mm512_extracti64x4_epi64(a, 0))),
        simde_mm256_cvtepi32_ps(simde_mm512_extracti64x4_epi64(a, 1)), 1);
}
#define _mm512_cvtepi32_ps(a) ferrox_emu_mm512_cvtepi32_ps(a)

// vpmovzxwd, 16 lanes: each half as the 8-lane AVX2 form widens it.
static inline simde__m512i ferrox_emu_mm512_cvtepu16_epi32(simde__m256i a) {
    return simde_mm512_inserti64x4(simde_mm512_castsi256_si512(simde_mm256_cvtepu16_epi32(simde_mm256_castsi256_si128(a))),
                                   simde_mm256_cvtepu16_epi32(simde_mm256_extracti128_si256(a, 1)), 1);
}
#define _mm512_cvtepu16_epi32(a) ferrox_emu_mm512_cvtepu16_epi32(a)
