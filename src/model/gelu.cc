#include "model/gelu.h"

#include <cmath>
#include <memory>

#include "kernels/ops.h"
#include "tensor/fp16.h"

namespace ferrox {

float gelu_tanh_ref(float x) {
    constexpr float kCoefA = 0.044715f;
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    // 1 + a x x as the fused multiply-add that ggml's -march=native build contracts it to.
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f)));
}

namespace {

// F16 bits of gelu_tanh_ref at every F16 value, indexed by the input's F16 bits (65536 entries
// and the one f16_table_mul asks for past them).
const uint16_t* gelu_table() {
    static const std::unique_ptr<uint16_t[]> table = [] {
        auto t = std::make_unique<uint16_t[]>(65537);
        t[65536] = 0;
        for (uint32_t i = 0; i < 65536; ++i) t[i] = fp32_to_fp16(gelu_tanh_ref(fp16_to_fp32(static_cast<uint16_t>(i))));
        return t;
    }();
    return table.get();
}

}  // namespace

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
    f16_table_mul(gelu_table(), gate, up, out, n);
}

}  // namespace ferrox
