// The "avx512_emulated" test ISA: the AVX-512 kernels built with SIMDe (avx512_emulation.h).
#include "kernels/kernels_internal.h"
#include "kernels/quants.h"
#include "kernels/test_util.h"

namespace ferrox::kernel_test {

void install_avx512_emulated() {
#if !defined(FERROX_NO_AVX512_EMULATION)
    if (cpu_has_avx2()) detail::add_test_isa("avx512_emulated", detail::avx512emu::override_all);
#endif
}

}  // namespace ferrox::kernel_test
