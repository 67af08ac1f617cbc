#pragma once
// Helpers shared by the kernel tests: random rows, (de)quantizing into vectors, and running a
// test body once per ISA the CPU has.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quants.h"
#include "tensor/dtype.h"
#include "tensor/fp16.h"

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

// A row of n elements of a quantized type filled with random bytes, every scale field then set
// to a sane value (fp16 scales in [-0.05, 0.05], IQ1_M's split d too, MXFP4 exponents 2^-8 .. 2^-4), so the quant
// bits, the packed sub-block scales and the high bits take every pattern the format allows.
inline void random_blocks(DType type, uint8_t* row, int64_t n, std::mt19937& rng) {
    const DTypeInfo& info = dtype_info(type);
    const int64_t nb = n / info.block_elems;
    for (int64_t i = 0; i < nb * info.block_bytes; ++i) row[i] = static_cast<uint8_t>(rng());
    std::vector<int> half_fields;
    switch (type) {
        case DType::kQ6_K: half_fields = {208}; break;
        case DType::kQ2_K: half_fields = {80, 82}; break;
        case DType::kQ3_K: half_fields = {108}; break;
        case DType::kQ4_1: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K: half_fields = {0, 2}; break;
        case DType::kMXFP4: case DType::kIQ1_M: half_fields = {}; break;
        default: half_fields = {0}; break;
    }
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = row + b * info.block_bytes;
        for (int off : half_fields) {
            const uint16_t h = fp32_to_fp16(scale(rng));
            std::memcpy(blk + off, &h, 2);
        }
        if (type == DType::kMXFP4) blk[0] = static_cast<uint8_t>(120 + rng() % 5);
        if (type == DType::kIQ1_M) {  // d: the top nibbles of the 4 scale words (bytes 48..55)
            const uint16_t h = fp32_to_fp16(scale(rng));
            for (int k = 0; k < 4; ++k)
                blk[49 + 2 * k] = static_cast<uint8_t>((blk[49 + 2 * k] & 0x0f) | (((h >> (4 * k)) & 15) << 4));
        }
    }
}

// The IQ1/IQ2/IQ3 grid formats: no quantize_row_ref (tests take random_blocks rows).
inline bool is_grid_type(DType t) {
    return t == DType::kIQ2_XXS || t == DType::kIQ2_XS || t == DType::kIQ2_S || t == DType::kIQ3_XXS ||
           t == DType::kIQ3_S || t == DType::kIQ1_S || t == DType::kIQ1_M;
}
inline constexpr DType kGridTypes[] = {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
                                       DType::kIQ3_S,   DType::kIQ1_S,  DType::kIQ1_M};

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
