#pragma once
// Helpers shared by the kernel tests: random rows, (de)quantizing into vectors, and running a
// test body once per ISA the CPU has.

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/quants.h"
#include "tensor/dtype.h"

namespace ferrox::kernel_test {

// Adds the ISA "avx512_emulated" where the CPU has AVX2: the AVX-512 kernels compiled with
// every AVX-512 intrinsic emulated by SIMDe (avx512_emulated.cc), so their code is tested
// against the scalar oracle on machines without AVX-512. Idempotent.
void install_avx512_emulated();

// ISAs to run every dispatched-kernel test on: "scalar" always, the others where the CPU has
// them ("avx512_emulated" wherever AVX2 is).
inline std::vector<std::string> all_isas() { return {"scalar", "avx2", "avx512", "avx512_emulated"}; }
inline bool isa_available(const std::string& isa) {
    install_avx512_emulated();
    return kernels_isa_available(isa.c_str());
}
// The ISA dispatch picks by itself (what tests restore after forcing another).
inline const char* best_isa() { return cpu_has_avx512() ? "avx512" : cpu_has_avx2() ? "avx2" : "scalar"; }

// Gaussian row with a per-row scale and offset, plus a few outliers (weights and activations
// of real models have them, and they set the block scales).
inline std::vector<float> random_row(int64_t n, uint32_t seed, float scale = 1.0f,
                                     float offset = 0.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = offset + scale * normal(rng);
    std::uniform_int_distribution<int64_t> pos(0, n - 1);
    for (int k = 0; k < 1 + static_cast<int>(n / 500); ++k) x[pos(rng)] *= 6.0f;
    return x;
}

inline std::vector<uint8_t> quantize(DType type, const std::vector<float>& x) {
    std::vector<uint8_t> q(
        static_cast<size_t>(dtype_row_bytes(type, static_cast<int64_t>(x.size()))));
    quantize_row_ref(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

inline std::vector<float> dequantize(DType type, const std::vector<uint8_t>& q, int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    dequantize_row_ref(type, q.data(), x.data(), n);
    return x;
}

}  // namespace ferrox::kernel_test
