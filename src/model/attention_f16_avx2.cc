// Compiled with -mavx2 -mfma -mf16c; called only after a CPUID check.
#include <immintrin.h>

#include "model/attention_f16.h"
#include "tensor/fp16.h"

namespace ferrox {

namespace {
inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

float dot_avx2(const float* q, const uint16_t* k, int n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i)));
        __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i + 8)));
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), k0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), k1, acc1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i)));
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), k0, acc0);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
    return s;
}

void axpy_avx2(float p, const uint16_t* v, float* out, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, v0, _mm256_loadu_ps(out + i)));
    }
    for (; i < n; ++i) out[i] += p * fp16_to_fp32(v[i]);
}

void to_f16_avx2(const float* x, uint16_t* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
    }
    for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
}  // namespace

const AttnF16Kernels* attn_f16_kernels_avx2() {
    static const AttnF16Kernels k{dot_avx2, axpy_avx2, to_f16_avx2};
    return &k;
}

}  // namespace ferrox
