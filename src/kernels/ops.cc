// Scalar versions of the ops of ops.h and the public entry points, which call the selected
// ISA's table (one indirect call per op, never per element).

#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "core/check.h"

#include "kernels/kernels_internal.h"
#include "kernels/quants.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

void rms_norm_scalar(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n_rows,
                     int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; ++r, x += x_stride, y += y_stride) {
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
        const float mean = static_cast<float>(sum / static_cast<double>(n));
        const float scale = 1.0f / std::sqrt(mean + eps);
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
    }
}

void softmax_scalar(float* x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max);
        sum += x[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void f16_table_mul_scalar(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        if (x <= -10.0f) {
            out[i] = 0.0f;
        } else if (x >= 10.0f) {
            out[i] = x * up[i];
        } else {
            out[i] = fp16_to_fp32(table[fp32_to_fp16(x)]) * up[i];
        }
    }
}

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void vec_add_scalar(const float* a, const float* b, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void vec_scale_scalar(const float* x, float s, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}

float dot_f32_scalar(const float* a, const float* b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

// 16 running maxima, (m < x) ? x : m (NaN never taken), which compilers turn into packed max
// instructions, then a scan for the first index holding the maximum.
int64_t argmax_first_scalar(const float* x, int64_t n) {
    if (n <= 0 || std::isnan(x[0])) return 0;
    constexpr int kLanes = 16;
    float m[kLanes];
    for (float& v : m) v = -std::numeric_limits<float>::infinity();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) m[j] = m[j] < x[i + j] ? x[i + j] : m[j];
    }
    float mx = x[0];
    for (; i < n; ++i) mx = mx < x[i] ? x[i] : mx;
    for (float v : m) mx = mx < v ? v : mx;
    for (int64_t k = 0; k < n; ++k) {
        if (x[k] == mx) return k;
    }
    return 0;
}

void rope_rotate_scalar(float* x, const float* cs, const float* sn, int64_t n_rot, bool neox) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        float& a = neox ? x[i] : x[2 * i];
        float& b = neox ? x[i + half] : x[2 * i + 1];
        const float x0 = a, x1 = b;
        a = std::fma(x0, cs[i], -(x1 * sn[i]));
        b = std::fma(x0, sn[i], x1 * cs[i]);
    }
}

void axpy_scalar(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void gemm_f32_scalar(const float* a, int64_t lda, const float* w, int64_t ldw, float* c, int64_t ldc,
                     int64_t m, int64_t n, int64_t k) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = dot_f32_scalar(a + i * lda, w + j * ldw, k);
    }
}

void gelu_erf_scalar(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

// One output at a time: a multiply and an add per t, in order (no FMA at baseline x86-64), over
// the panel's elements widened to float (exactly) a panel row at a time.
void gemm_f32_packed_scalar(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                            int64_t ldc, int64_t m, const GemmEpilogue& epi) {
    constexpr int64_t W = kPackedWidth;
    std::vector<float> panel(static_cast<size_t>(w.k * W));
    for (int64_t p = p0; p < p1; ++p) {
        dequantize_row_ref(w.type, w.panel(p), panel.data(), w.k * W);
        const int64_t nr = std::min<int64_t>(W, w.n - p * W);
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t jj = 0; jj < nr; ++jj) {
                const int64_t j = p * W + jj;
                float s = 0;
                for (int64_t t = 0; t < w.k; ++t) s += a[i * lda + t] * panel[t * W + jj];
                if (epi.bias) s += epi.bias[j];
                if (epi.res) s += epi.res[i * epi.ld_res + j];
                if (epi.gelu) gelu_erf_scalar(&s, &s, 1);
                c[i * ldc + j] = s;
            }
        }
    }
}

}  // namespace

void PackedMatrix::Free::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{64}); }

PackedMatrix pack_matrix(const float* w, int64_t ldw, int64_t n, int64_t k, DType type) {
    CHECK(n >= 1 && k >= 1 && ldw >= k);
    CHECK(type == DType::kF32 || type == DType::kF16 || type == DType::kBF16);
    PackedMatrix out;
    out.n = n;
    out.k = k;
    out.type = type;
    const size_t bytes = static_cast<size_t>(out.bytes());
    out.data.reset(static_cast<uint8_t*>(::operator new[](bytes, std::align_val_t{64})));
    std::memset(out.data.get(), 0, bytes);
    const int64_t eb = out.elem_bytes();
    std::vector<uint8_t> row(static_cast<size_t>(k * eb));
    for (int64_t j = 0; j < n; ++j) {
        quantize_row_ref(type, w + j * ldw, row.data(), k);  // F32: a copy
        uint8_t* dst = out.data.get() + (j / kPackedWidth) * out.panel_bytes() + (j % kPackedWidth) * eb;
        for (int64_t t = 0; t < k; ++t) std::memcpy(dst + t * kPackedWidth * eb, row.data() + t * eb, eb);
    }
    return out;
}

float max_finite_scalar(const float* x, int64_t n) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
        if (std::isfinite(x[i]) && x[i] > m) m = x[i];
    }
    return m;
}

double exp_shifted_scalar(const float* x, float m, float s, float* w, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        w[i] = std::isfinite(x[i]) ? std::exp((x[i] - m) * s) : 0.0f;
        sum += w[i];
    }
    return sum;
}

void chunk_max_scalar(const float* x, int64_t n, int64_t chunk, float* out) {
    for (int64_t c = 0; c * chunk < n; ++c) {
        float m = -std::numeric_limits<float>::infinity();
        const int64_t end = std::min(n, (c + 1) * chunk);
        for (int64_t i = c * chunk; i < end; ++i) m = m < x[i] ? x[i] : m;  // NaN never taken
        out[c] = m;
    }
}

int64_t ids_at_or_above_scalar(const float* x, int64_t n, float th, int32_t* idx) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (x[i] >= th) idx[k++] = static_cast<int32_t>(i);
    }
    return k;
}

namespace detail {
void fill_scalar_ops(OpsKernels* ops) {
    *ops = OpsKernels{rms_norm_scalar,  softmax_scalar, silu_mul_scalar, vec_add_scalar,
                      vec_scale_scalar, dot_f32_scalar, axpy_scalar,     gemm_f32_scalar,
                      gelu_erf_scalar,  gemm_f32_packed_scalar, argmax_first_scalar,
                      rope_rotate_scalar, max_finite_scalar, exp_shifted_scalar,
                      chunk_max_scalar, ids_at_or_above_scalar, f16_table_mul_scalar};
}
}  // namespace detail

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    detail::ops_kernels().rms_norm(x, n, w, y, n, 1, n, eps);
}
void rms_norm_rows(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n_rows,
                   int64_t n, float eps) {
    detail::ops_kernels().rms_norm(x, x_stride, w, y, y_stride, n_rows, n, eps);
}
void softmax_inplace(float* x, int64_t n) { detail::ops_kernels().softmax_inplace(x, n); }
void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
    detail::ops_kernels().silu_mul(gate, up, out, n);
}
void f16_table_mul(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n) {
    detail::ops_kernels().f16_table_mul(table, gate, up, out, n);
}
void vec_add(const float* a, const float* b, float* out, int64_t n) {
    detail::ops_kernels().vec_add(a, b, out, n);
}
void vec_scale(const float* x, float s, float* out, int64_t n) {
    detail::ops_kernels().vec_scale(x, s, out, n);
}
float dot_f32(const float* a, const float* b, int64_t n) {
    return detail::ops_kernels().dot_f32(a, b, n);
}
void axpy(float a, const float* x, float* y, int64_t n) { detail::ops_kernels().axpy(a, x, y, n); }
int64_t argmax_first(const float* x, int64_t n) { return detail::ops_kernels().argmax_first(x, n); }
float max_finite(const float* x, int64_t n) { return detail::ops_kernels().max_finite(x, n); }
void chunk_max(const float* x, int64_t n, int64_t chunk, float* out) {
    detail::ops_kernels().chunk_max(x, n, chunk, out);
}
int64_t ids_at_or_above(const float* x, int64_t n, float th, int32_t* idx) {
    return detail::ops_kernels().ids_at_or_above(x, n, th, idx);
}
double exp_shifted(const float* x, float m, float s, float* w, int64_t n) {
    return detail::ops_kernels().exp_shifted(x, m, s, w, n);
}
void rope_rotate(float* x, const float* cs, const float* sn, int64_t n_rot, bool neox) {
    detail::ops_kernels().rope_rotate(x, cs, sn, n_rot, neox);
}

void gemm_f32(const float* a, int64_t lda, const float* w, int64_t ldw, float* c, int64_t ldc,
              int64_t m, int64_t n, int64_t k) {
    detail::ops_kernels().gemm_f32(a, lda, w, ldw, c, ldc, m, n, k);
}
void gelu_erf(const float* x, float* y, int64_t n) { detail::ops_kernels().gelu_erf(x, y, n); }

void gemm_f32_packed(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                     int64_t ldc, int64_t m, const GemmEpilogue& epi) {
    CHECK(0 <= p0 && p0 <= p1 && p1 <= w.n_panels());
    if (m <= 0 || p0 == p1) return;
    detail::ops_kernels().gemm_f32_packed(a, lda, w, p0, p1, c, ldc, m, epi);
}

}  // namespace ferrox
