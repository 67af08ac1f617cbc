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
