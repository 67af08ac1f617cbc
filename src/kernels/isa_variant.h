#pragma once
// Which ISA variant a *_avx2.cc translation unit is being compiled as. Each of those files is
// compiled more than once from the same source (src/kernels/CMakeLists.txt):
//  - avx2:      -mavx2 -mfma -mf16c, the baseline SIMD level;
//  - avx512:    the same plus AVX-512 F/BW/DQ/VL/VNNI; FERROX_AVX512 is 1 and the kernels use
//               VNNI's vpdpbusd and 512-bit registers where they pay;
//  - avx512emu: the avx512 code built on an AVX2 machine with every AVX-512 intrinsic emulated
//               by SIMDe (tests/kernels/avx512_emulation.h, force-included by the test build),
//               so the AVX-512 paths are tested against the scalar oracle on machines without
//               AVX-512.
// The variant's table fillers live in namespace detail::FERROX_ISA_NS (kernels_internal.h).

#if defined(FERROX_EMULATE_AVX512)
#define FERROX_AVX512 1
#define FERROX_ISA_NS avx512emu
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define FERROX_AVX512 1
#define FERROX_ISA_NS avx512
#else
#define FERROX_AVX512 0
#define FERROX_ISA_NS avx2
#endif
