#pragma once
// The two inner loops of attention over an F16 KV cache: q·k for one cached row and
// out += p * v for one cached row. Chosen once (AVX2+F16C or scalar) at first use.

#include <cstdint>

namespace ferrox {

struct AttnF16Kernels {
    float (*dot)(const float* q, const uint16_t* k, int n);
    void (*axpy)(float p, const uint16_t* v, float* out, int n);
    // Converts n floats to f16 (KV writes).
    void (*to_f16)(const float* x, uint16_t* y, int n);
};

const AttnF16Kernels& attn_f16_kernels();
const AttnF16Kernels& attn_f16_kernels_scalar();

}  // namespace ferrox
