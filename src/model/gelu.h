#pragma once
// GeGLU with the tanh-approximated GELU, as ggml computes it on the CPU (GGML_GELU_FP16): the
// gate is rounded to F16 and looked up in a table of F16 GELU values (computed in float with
// tanhf), except that gates <= -10 give 0 and gates >= 10 pass through. Gemma's FFN.

#include <cstdint>

namespace ferrox {

// out[i] = gelu_tanh(gate[i]) * up[i]; out may alias gate or up. Thread-safe (the table is
// built once, on first use, under a static initializer).
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);

// The plain float formula 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the reference the
// table is built from.
float gelu_tanh_ref(float x);

}  // namespace ferrox
