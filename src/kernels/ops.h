#pragma once
// f32 vector ops of a transformer forward pass. Each runs the selected ISA's kernel (see
// quants.h: AVX2 or scalar, chosen once). Pointers + explicit sizes, no allocation, any n >= 0
// (no alignment or multiple-of-8 requirement). Pure functions: callable from any thread.
// Where noted an output may alias an input; otherwise buffers must not overlap.

#include <cstdint>

namespace ferrox {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]  (x: (n), w: (n), y: (n); y may alias x).
// The sum of squares is accumulated in double over float squares, as ggml's rms_norm does;
// the product is formed as (x * scale) * w, ggml's order for rms_norm followed by mul.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// x = exp(x - max(x)) / sum(exp(x - max(x))). Entries equal to -inf get 0 (masked scores).
// n must be >= 1 and at least one entry finite. exp is a polynomial on AVX2 (relative error
// below 2e-7 over the range used), the sum is accumulated in double.
void softmax_inplace(float* x, int64_t n);

// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias either.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// out[i] = a[i] + b[i]; out may alias a or b.
void vec_add(const float* a, const float* b, float* out, int64_t n);

// out[i] = x[i] * s; out may alias x.
void vec_scale(const float* x, float s, float* out, int64_t n);

// sum(a[i] * b[i]), float accumulation in 32 lanes on AVX2 (in order on scalar).
float dot_f32(const float* a, const float* b, int64_t n);

// y[i] += a * x[i].
void axpy(float a, const float* x, float* y, int64_t n);

// C = A * W^T over f32 rows: c[i * ldc + j] = sum_t a[i * lda + t] * w[j * ldw + t] for
// i < m, j < n, t < k (A: (m, k), W: (n, k) as a weight matrix's rows, C: (m, n)); C is
// overwritten and must not overlap A or W. Float accumulation (8 lanes per product on AVX2,
// summed at the end; in order on scalar). One thread: callers split rows of W (or A).
void gemm_f32(const float* a, int64_t lda, const float* w, int64_t ldw, float* c, int64_t ldc,
              int64_t m, int64_t n, int64_t k);

// GELU, the erf form BERT uses: y[i] = 0.5 x (1 + erf(x / sqrt 2)). y may alias x. Scalar:
// std::erf; AVX2: an erf of absolute error below 2e-7 (Abramowitz-Stegun 7.1.26 with expf_ps).
void gelu_erf(const float* x, float* y, int64_t n);

}  // namespace ferrox
