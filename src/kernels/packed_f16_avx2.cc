// Packed (8 rows interleaved) layouts and matrix products for f16: see QuantKernels::repack8
// and gemm_packed8 in quants.h. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off.
#include "kernels/kernels_internal.h"

namespace ferrox::detail {
void override_avx2_packed_f16(QuantKernels*) {}
}  // namespace ferrox::detail
