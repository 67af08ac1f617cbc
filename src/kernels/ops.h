#pragma once
// f32 vector ops of a transformer forward pass. Each runs the selected ISA's kernel (see
// quants.h: AVX2 or scalar, chosen once). Pointers + explicit sizes, no allocation, any n >= 0
// (no alignment or multiple-of-8 requirement). Pure functions: callable from any thread.
// Where noted an output may alias an input; otherwise buffers must not overlap.

#include <cstdint>
#include <memory>

#include "tensor/dtype.h"

namespace ferrox {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]  (x: (n), w: (n), y: (n); y may alias x).
// The sum of squares is accumulated in double over float squares, as ggml's rms_norm does;
// the product is formed as (x * scale) * w, ggml's order for rms_norm followed by mul.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// rms_norm of n_rows rows: row r of x at x + r * x_stride, of y at y + r * y_stride (each row's
// y may alias its x; rows must not otherwise overlap). Each row's bits are rms_norm's; rows are
// normalized together where that is faster (the sums' add chains interleaved).
void rms_norm_rows(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n_rows,
                   int64_t n, float eps);

// x = exp(x - max(x)) / sum(exp(x - max(x))). Entries equal to -inf get 0 (masked scores).
// n must be >= 1 and at least one entry finite. exp is a polynomial on AVX2 (relative error
// below 2e-7 over the range used), the sum is accumulated in double.
void softmax_inplace(float* x, int64_t n);

// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may alias either.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// An activation looked up in a table of F16 values, times up, as ggml's GGML_GELU_FP16:
// out[i] = f(gate[i]) * up[i] where f(x) = 0 for x <= -10 (out[i] = +0 whatever up[i] is),
// x for x >= 10, else the F16 value table[h] as a float, h the F16 bits of x (rounded to
// nearest even). `table` has 65537 entries: the last, never used, lets a vector gather read
// 4 bytes at any index. out may alias gate or up.
void f16_table_mul(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n);

// out[i] = a[i] + b[i]; out may alias a or b.
void vec_add(const float* a, const float* b, float* out, int64_t n);

// out[i] = x[i] * s; out may alias x.
void vec_scale(const float* x, float s, float* out, int64_t n);

// sum(a[i] * b[i]), float accumulation in 32 lanes on AVX2 (in order on scalar).
float dot_f32(const float* a, const float* b, int64_t n);

// y[i] += a * x[i].
void axpy(float a, const float* x, float* y, int64_t n);

// Rotates the first n_rot dims of one head in place by per-pair cos/sin (n_rot / 2 of each):
// pairs (x[2i], x[2i+1]) (neox false) or (x[i], x[i + n_rot/2]) (neox true) become
// (fma(x0, c, -(x1 * s)), fma(x0, s, x1 * c)): what ggml's x0*c - x1*s, x0*s + x1*c compile to
// on x86 (GCC contracts the first product), so the bits are llama.cpp's. n_rot even.
void rope_rotate(float* x, const float* cs, const float* sn, int64_t n_rot, bool neox);

// The first index of the largest entry, NaNs never chosen: what the plain loop
// `if (x[i] > x[best]) best = i` from best = 0 answers (0 when x[0] is NaN or n <= 0).
int64_t argmax_first(const float* x, int64_t n);

// The largest finite entry of x (NaN and +-inf skipped); -inf when none is finite.
float max_finite(const float* x, int64_t n);

// out[c] = the largest entry of x[c * chunk, min(n, (c + 1) * chunk)) for c < ceil(n / chunk),
// NaN never taken (-inf for a chunk without a number). chunk >= 1.
void chunk_max(const float* x, int64_t n, int64_t chunk, float* out);

// The ids i < n with x[i] >= th (never a NaN), in increasing order, into idx (room for n);
// returns how many.
int64_t ids_at_or_above(const float* x, int64_t n, float th, int32_t* idx);

// w[i] = exp((x[i] - m) * s) for each finite x[i] and 0 for the others (NaN, +-inf); returns
// the sum of w, accumulated in double. A sampler's weights over a whole vocabulary: m its
// largest finite logit, s 1 / temperature. exp is the AVX2 polynomial (relative error below
// 2e-7) or std::exp; the sum's order is the kernel's own (the same for the same n).
double exp_shifted(const float* x, float m, float s, float* w, int64_t n);

// C = A * W^T over f32 rows: c[i * ldc + j] = sum_t a[i * lda + t] * w[j * ldw + t] for
// i < m, j < n, t < k (A: (m, k), W: (n, k) as a weight matrix's rows, C: (m, n)); C is
// overwritten and must not overlap A or W. Float accumulation (8 lanes per product on AVX2,
// summed at the end; in order on scalar). One thread: callers split rows of W (or A).
void gemm_f32(const float* a, int64_t lda, const float* w, int64_t ldw, float* c, int64_t ldc,
              int64_t m, int64_t n, int64_t k);

// A weight matrix W (n, k) packed once, at load, into the layout gemm_f32_packed reads:
// panels of kPackedWidth of W's rows, each k-major: element (t, c) of panel p is W[32 p + c][t]
// for t < k, zero for rows past n. The elements are F32, F16 or BF16 (`type`): a checkpoint's
// F16/BF16 weights stay in their precision (half the bytes to stream per product; the kernels
// widen them exactly, so the products are the ones the F32 copy gave). 64-byte aligned.
// Move-only; any thread may read it concurrently.
constexpr int64_t kPackedWidth = 32;
struct PackedMatrix {
    int64_t n = 0, k = 0;
    DType type = DType::kF32;  // kF32, kF16 or kBF16
    struct Free {
        void operator()(uint8_t* p) const;
    };
    std::unique_ptr<uint8_t[], Free> data;  // (n_panels, k, 32) elements of `type`

    int64_t elem_bytes() const { return type == DType::kF32 ? 4 : 2; }
    int64_t n_panels() const { return (n + kPackedWidth - 1) / kPackedWidth; }
    int64_t panel_bytes() const { return k * kPackedWidth * elem_bytes(); }
    const uint8_t* panel(int64_t p) const { return data.get() + p * panel_bytes(); }
    int64_t bytes() const { return n_panels() * panel_bytes(); }
};
// Packs W (n, k), rows ldw floats apart, as `type` (F16/BF16 round to nearest even; exact for
// values that came from that type). n >= 1, k >= 1.
PackedMatrix pack_matrix(const float* w, int64_t ldw, int64_t n, int64_t k, DType type = DType::kF32);

// What gemm_f32_packed applies to each sum s before storing it, in this order:
//   v = s + bias[j] (bias may be null), v = v + res[i * ld_res + j] (res may be null),
//   v = gelu_erf(v) if gelu.
struct GemmEpilogue {
    const float* bias = nullptr;  // (n)
    const float* res = nullptr;   // (m, ld_res): a residual added after the bias
    int64_t ld_res = 0;
    bool gelu = false;
};

// C = epilogue(A W^T) for the columns j of panels [p0, p1) of w and rows i < m:
// c[i * ldc + j] = epi(sum_t a[i * lda + t] * W[j][t]), j in [32 p0, min(n, 32 p1)) (A: (m, k),
// C: (m, ldc), column j of C is W's row j whatever the panel range). C must not overlap A or
// the residual. Every output is one FMA chain over t = 0..k-1 in order (a multiply and an add
// per t on scalar) from 0, whatever m, the tile it falls in or the panel range: a row's values
// do not depend on what else is in the batch, and the AVX2 and AVX-512 paths agree bit for
// bit. One thread: callers split panels (or rows) across threads.
void gemm_f32_packed(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                     int64_t ldc, int64_t m, const GemmEpilogue& epi);

// GELU, the erf form BERT uses: y[i] = 0.5 x (1 + erf(x / sqrt 2)). y may alias x. Scalar:
// std::erf; AVX2: an erf of absolute error below 2e-7 (Abramowitz-Stegun 7.1.26 with expf_ps).
void gelu_erf(const float* x, float* y, int64_t n);

}  // namespace ferrox
