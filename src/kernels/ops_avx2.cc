// AVX2 + FMA versions of the ops of ops.h. Compiled with -mavx2 -mfma -mf16c; see
// simd_avx2.h for why this file calls no inline function of external linkage (hence the
// hand-written scalar tails: no std::exp here, the tails use exp_ps on a padded vector).

#include "kernels/isa_variant.h"
#include "kernels/kernels_internal.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kernels/simd_avx2.h"

namespace ferrox {
namespace {

// Loads the n < 8 floats at p, the other lanes set to `fill`.
inline __m256 load_partial(const float* p, int64_t n, float fill) {
    alignas(32) float buf[8] = {fill, fill, fill, fill, fill, fill, fill, fill};
    for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
    return _mm256_load_ps(buf);
}

inline void store_partial(float* p, int64_t n, __m256 v) {
    alignas(32) float buf[8];
    _mm256_store_ps(buf, v);
    for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}

// expf on 8 lanes by the method of ARM's optimized-routines (as ggml's AVX2 code uses it):
// exp(x) = 2^n * (1 + p(b)) with n = round(x / ln 2) found by the 1.5*2^23 shifter trick,
// b = x - n ln2 in two parts, p a degree-5 polynomial; lanes with |n| > 126 rebuild the scale
// in two factors so results underflow/overflow correctly. Matching ggml's rounding here keeps
// SiLU and softmax bit-identical to llama.cpp's, which greedy golden tests depend on (deep
// models amplify one-ulp differences into different tokens).
inline __m256 expf_ps(__m256 x) {
    const __m256 shifter = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shifter);  // x/ln2 + shifter
    const __m256 n = _mm256_sub_ps(z, shifter);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.f), n);
    const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126), _CMP_GT_OQ);
    const __m256 b2 = _mm256_mul_ps(b, b);
    const __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
    const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
    const __m256 poly = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, b2, lo), b2,
                                        _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(big)) return _mm256_fmadd_ps(poly, k, k);
    // Some lane is out of the normal range: scale by s1 * s2 instead of k.
    const __m256i neg = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
        _mm256_set1_epi32(static_cast<int>(0x82000000u)));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(neg, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, neg));
    const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, poly, s2), s1);
    const __m256 normal = _mm256_fmadd_ps(k, poly, k);
    const __m256 mid = _mm256_blendv_ps(normal, scaled, big);
    return _mm256_blendv_ps(mid, _mm256_mul_ps(s1, s1), huge);
}

// Sum of the 8 lanes in ggml's order (high half + low half, then pairs).
inline float hsum_ggml(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Adds the 8 floats of v to two double accumulators.
inline void add_pd(__m256 v, __m256d* lo, __m256d* hi) {
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

inline double hsum_pd(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// y = (x * scale) * w with scale = 1 / sqrt(float(sum / n) + eps), sum the row's squares.
inline void rms_norm_apply(const float* x, const float* w, float* y, int64_t n, double sum, float eps) {
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(mean + eps)));
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
    for (; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

// Squares summed one by one in double, in order, as ggml does: a vector sum in another order
// flips the last bit of the mean now and then, and deep models amplify that. That sum is one
// chain of dependent adds, so rows go four at a time, row r's chain in double lane r (4x4
// transposes of their float squares): the same adds in the same order per row, four chains
// in flight. One row alone took ~3.5 cycles an element (the add's latency).
void rms_norm_avx2(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n_rows,
                   int64_t n, float eps) {
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const float* xr[4] = {x + r * x_stride, x + (r + 1) * x_stride, x + (r + 2) * x_stride,
                              x + (r + 3) * x_stride};
        __m256d acc = _mm256_setzero_pd();
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {
            __m128 a0 = _mm_loadu_ps(xr[0] + i), a1 = _mm_loadu_ps(xr[1] + i);
            __m128 a2 = _mm_loadu_ps(xr[2] + i), a3 = _mm_loadu_ps(xr[3] + i);
            a0 = _mm_mul_ps(a0, a0);
            a1 = _mm_mul_ps(a1, a1);
            a2 = _mm_mul_ps(a2, a2);
            a3 = _mm_mul_ps(a3, a3);
            _MM_TRANSPOSE4_PS(a0, a1, a2, a3);  // a_k: element i + k of the four rows
            acc = _mm256_add_pd(acc, _mm256_cvtps_pd(a0));
            acc = _mm256_add_pd(acc, _mm256_cvtps_pd(a1));
            acc = _mm256_add_pd(acc, _mm256_cvtps_pd(a2));
            acc = _mm256_add_pd(acc, _mm256_cvtps_pd(a3));
        }
        double sum[4];
        _mm256_storeu_pd(sum, acc);
        for (int k = 0; k < 4; ++k) {
            for (int64_t j = i; j < n; ++j) sum[k] += static_cast<double>(xr[k][j] * xr[k][j]);
            rms_norm_apply(xr[k], w, y + (r + k) * y_stride, n, sum[k], eps);
        }
    }
    for (; r < n_rows; ++r) {
        const float* xr = x + r * x_stride;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
        rms_norm_apply(xr, w, y + r * y_stride, n, sum, eps);
    }
}

void softmax_avx2(float* x, int64_t n) {
    __m256 vmax = _mm256_set1_ps(-__builtin_inff());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float max = hmax_ps(vmax);
    for (; i < n; ++i) max = x[i] > max ? x[i] : max;
    const __m256 m = _mm256_set1_ps(max);
    // Each group of 8 is summed in float, the groups in double: ggml's order, so attention
    // weights round exactly as llama.cpp's (its rows are padded with masked -inf entries, so
    // a partial last group is the same as a padded one).
    double sum = 0;
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = expf_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        sum += static_cast<double>(hsum_ggml(e));
    }
    if (i < n) {
        const __m256 e = expf_ps(_mm256_sub_ps(load_partial(x + i, n - i, -__builtin_inff()), m));
        store_partial(x + i, n - i, e);
        sum += static_cast<double>(hsum_ggml(e));
    }
    const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; ++i) x[i] *= _mm256_cvtss_f32(inv);
}

inline __m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = expf_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
}

void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n)
        store_partial(out + i, n - i,
                      silu_mul8(load_partial(gate + i, n - i, 0), load_partial(up + i, n - i, 0)));
}

// Eight lanes of f16_table_mul: F16C rounds to nearest even as fp32_to_fp16 does, a gather reads
// each entry as the low half of 4 bytes (the table's extra entry covers the last index), and
// the x <= -10 lanes are cleared after the multiply, so they are +0 whatever up is.
inline __m256 f16_table_mul8(const uint16_t* table, __m256 x, __m256 u) {
    const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const __m256i e = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx, 2),
                                       _mm256_set1_epi32(0xffff));
    __m256 f = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(e), _mm256_extracti128_si256(e, 1)));
    f = _mm256_blendv_ps(f, x, _mm256_cmp_ps(x, _mm256_set1_ps(10.0f), _CMP_GE_OQ));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-10.0f), _CMP_LE_OQ), _mm256_mul_ps(f, u));
}

// Gemma's GeGLU: the scalar loop (software F16 conversions) took ~3 ns an element, 8 % of a
// 16-sequence decode step of Gemma 3 270M.
void f16_table_mul_avx2(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, f16_table_mul8(table, _mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n)
        store_partial(out + i, n - i,
                      f16_table_mul8(table, load_partial(gate + i, n - i, 0), load_partial(up + i, n - i, 0)));
}

void vec_add_avx2(const float* a, const float* b, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; ++i) out[i] = a[i] + b[i];
}

void vec_scale_avx2(const float* x, float s, float* out, int64_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; ++i) out[i] = x[i] * s;
}

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k),
                                     acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
    float sum =
        hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

// argmax_first: four running maxima of 8 (max_ps(x, m) keeps m when x is NaN), then the first
// 8 holding the maximum. The maximum is the scalar loop's, so is the index.
int64_t argmax_first_avx2(const float* x, int64_t n) {
    if (n <= 0 || x[0] != x[0]) return 0;  // (x[0] is NaN; no std:: call here, see simd_avx2.h)
    __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
        m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
        m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
    }
    float mx = hmax_ps(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    for (; i < n; ++i) mx = mx < x[i] ? x[i] : mx;
    const __m256 want = _mm256_set1_ps(mx);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + k), want, _CMP_EQ_OQ));
        if (hit) return k + __builtin_ctz(static_cast<unsigned>(hit));
    }
    for (; k < n; ++k) {
        if (x[k] == mx) return k;
    }
    return 0;
}

// max_finite: running maxima of the finite lanes (|x| < inf is false for NaN and +-inf).
float max_finite_avx2(const float* x, int64_t n) {
    const __m256 inf = _mm256_set1_ps(__builtin_inff()), ninf = _mm256_set1_ps(-__builtin_inff());
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m0 = ninf, m1 = ninf;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        m0 = _mm256_max_ps(m0, _mm256_blendv_ps(ninf, a, _mm256_cmp_ps(_mm256_andnot_ps(sign, a), inf, _CMP_LT_OQ)));
        m1 = _mm256_max_ps(m1, _mm256_blendv_ps(ninf, b, _mm256_cmp_ps(_mm256_andnot_ps(sign, b), inf, _CMP_LT_OQ)));
    }
    float m = hmax_ps(_mm256_max_ps(m0, m1));
    for (; i < n; ++i) {
        const float v = x[i];
        if (v - v == 0.0f && v > m) m = v;  // finite (no std:: call here, see simd_avx2.h)
    }
    return m;
}

// exp_shifted: 8 lanes of expf_ps, the non-finite lanes zeroed; the sum in two double
// accumulators of 4 lanes (the low and high halves), added at the end.
double exp_shifted_avx2(const float* x, float m, float s, float* w, int64_t n) {
    const __m256 inf = _mm256_set1_ps(__builtin_inff()), sign = _mm256_set1_ps(-0.0f);
    const __m256 vm = _mm256_set1_ps(m), vs = _mm256_set1_ps(s);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    const auto step = [&](__m256 v) {
        const __m256 finite = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), inf, _CMP_LT_OQ);
        // Non-finite lanes become 0 before the exp too, so it sees no NaN or infinity.
        const __m256 d = _mm256_and_ps(_mm256_mul_ps(_mm256_sub_ps(v, vm), vs), finite);
        const __m256 e = _mm256_and_ps(expf_ps(d), finite);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        return e;
    };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(w + i, step(_mm256_loadu_ps(x + i)));
    if (i < n) store_partial(w + i, n - i, step(load_partial(x + i, n - i, __builtin_nanf(""))));
    const __m256d t = _mm256_add_pd(lo, hi);
    const __m128d u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    return _mm_cvtsd_f64(_mm_add_sd(u, _mm_unpackhi_pd(u, u)));
}

// chunk_max: the chunk's whole vectors into one running maximum (max_ps(x, m) keeps m for a NaN
// x), its tail and the lanes after.
void chunk_max_avx2(const float* x, int64_t n, int64_t chunk, float* out) {
    for (int64_t c = 0; c * chunk < n; ++c) {
        const int64_t begin = c * chunk, end = n < begin + chunk ? n : begin + chunk;
        __m256 m = _mm256_set1_ps(-__builtin_inff());
        int64_t i = begin;
        for (; i + 8 <= end; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
        float v = hmax_ps(m);
        for (; i < end; ++i) v = v < x[i] ? x[i] : v;
        out[c] = v;
    }
}

// ids_at_or_above: one compare a vector; the set lanes' ids appended in order (few are).
int64_t ids_at_or_above_avx2(const float* x, int64_t n, float th, int32_t* idx) {
    const __m256 t = _mm256_set1_ps(th);
    int64_t k = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), t, _CMP_GE_OQ)));
        while (mask) {
            idx[k++] = static_cast<int32_t>(i + __builtin_ctz(mask));
            mask &= mask - 1;
        }
    }
    for (; i < n; ++i) {
        if (x[i] >= th) idx[k++] = static_cast<int32_t>(i);
    }
    return k;
}

// rope_rotate, 8 lanes: the scalar's fused multiply-adds and products lane by lane (fmsub of
// the rounded x1 * s is the fma with its negation).
void rope_rotate_avx2(float* x, const float* cs, const float* sn, int64_t n_rot, bool neox) {
    const int64_t half = n_rot / 2;
    int64_t i = 0;
    if (neox) {
        for (; i + 8 <= half; i += 8) {
            const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + half);
            const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
            _mm256_storeu_ps(x + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
            _mm256_storeu_ps(x + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
        }
    } else {
        // 4 pairs a vector: x0 and x1 of each pair in both its lanes, cos/sin likewise.
        const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        for (; i + 4 <= half; i += 4) {
            const __m256 v = _mm256_loadu_ps(x + 2 * i);
            const __m256 x0 = _mm256_moveldup_ps(v), x1 = _mm256_movehdup_ps(v);
            const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup);
            const __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sn + i)), dup);
            const __m256 even = _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s));
            const __m256 odd = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
            _mm256_storeu_ps(x + 2 * i, _mm256_blend_ps(even, odd, 0xAA));
        }
    }
    for (; i < half; ++i) {
        float& a = neox ? x[i] : x[2 * i];
        float& b = neox ? x[i + half] : x[2 * i + 1];
        const float x0 = a, x1 = b;
        a = __builtin_fmaf(x0, cs[i], -(x1 * sn[i]));
        b = __builtin_fmaf(x0, sn[i], x1 * cs[i]);
    }
}

void axpy_avx2(float a, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

// C = A W^T as outer products: W is packed into panels of 16 of its rows, k-major
// (panel[t * 16 + c] = W[j0 + c][t]), 256 values of k at a time (16 KiB, on the stack: this file
// instantiates no library code), and a tile of up to 6 rows of A x 16 columns lives in 12
// registers; per t, two panel loads and six broadcasts of A feed 12 FMAs (FMA-bound, where the
// dot-product form was bound by reading A and W rows from L2). Every output is one FMA chain
// over t in order within each chunk of k, chunks added in order, so its value does not depend
// on the tile it falls in or on m.
constexpr int kGemmNR = 16, kGemmKC = 256;

template <int MR>
inline void gemm_panel_tile(const float* a, int64_t lda, const float* panel, int64_t kc, float* c, int64_t ldc,
                            int nr, bool accumulate) {
    __m256 acc[MR][2];
    #pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        if (!accumulate) {
            acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        } else if (nr == kGemmNR) {
            acc[i][0] = _mm256_loadu_ps(c + i * ldc);
            acc[i][1] = _mm256_loadu_ps(c + i * ldc + 8);
        } else {
            alignas(32) float tmp[kGemmNR] = {};
            for (int j = 0; j < nr; ++j) tmp[j] = c[i * ldc + j];
            acc[i][0] = _mm256_load_ps(tmp);
            acc[i][1] = _mm256_load_ps(tmp + 8);
        }
    }
    for (int64_t t = 0; t < kc; ++t) {
        const __m256 w0 = _mm256_load_ps(panel + t * kGemmNR);
        const __m256 w1 = _mm256_load_ps(panel + t * kGemmNR + 8);
        #pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            const __m256 av = _mm256_broadcast_ss(a + i * lda + t);
            acc[i][0] = _mm256_fmadd_ps(av, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, w1, acc[i][1]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        if (nr == kGemmNR) {
            _mm256_storeu_ps(c + i * ldc, acc[i][0]);
            _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
        } else {
            alignas(32) float tmp[kGemmNR];
            _mm256_store_ps(tmp, acc[i][0]);
            _mm256_store_ps(tmp + 8, acc[i][1]);
            for (int j = 0; j < nr; ++j) c[i * ldc + j] = tmp[j];
        }
    }
}

void gemm_f32_avx2(const float* a, int64_t lda, const float* w, int64_t ldw, float* c, int64_t ldc,
                   int64_t m, int64_t n, int64_t k) {
    constexpr int kMR = 6;
    alignas(32) float panel[kGemmKC * kGemmNR];
    for (int64_t j0 = 0; j0 < n; j0 += kGemmNR) {
        const int nr = static_cast<int>(n - j0 < kGemmNR ? n - j0 : kGemmNR);
        // k == 0 still writes its zeros (one empty chunk).
        for (int64_t t0 = 0; t0 < k || (t0 == 0 && k == 0); t0 += kGemmKC) {
            const int64_t kc = k - t0 < kGemmKC ? k - t0 : kGemmKC;
            for (int cc = 0; cc < kGemmNR; ++cc) {
                float* dst = panel + cc;
                if (cc < nr) {
                    const float* src = w + (j0 + cc) * ldw + t0;
                    for (int64_t t = 0; t < kc; ++t) dst[t * kGemmNR] = src[t];
                } else {
                    for (int64_t t = 0; t < kc; ++t) dst[t * kGemmNR] = 0.0f;
                }
            }
            const bool acc = t0 > 0;
            const float* at = a + t0;
            float* cj = c + j0;
            int64_t i = 0;
            for (; i + kMR <= m; i += kMR) gemm_panel_tile<kMR>(at + i * lda, lda, panel, kc, cj + i * ldc, ldc, nr, acc);
            switch (m - i) {
                case 5: gemm_panel_tile<5>(at + i * lda, lda, panel, kc, cj + i * ldc, ldc, nr, acc); break;
                case 4: gemm_panel_tile<4>(at + i * lda, lda, panel, kc, cj + i * ldc, ldc, nr, acc); break;
                case 3: gemm_panel_tile<3>(at + i * lda, lda, panel, kc, cj + i * ldc, ldc, nr, acc); break;
                case 2: gemm_panel_tile<2>(at + i * lda, lda, panel, kc, cj + i * ldc, ldc, nr, acc); break;
                case 1: gemm_panel_tile<1>(at + i * lda, lda, panel, kc, cj + i * ldc, ldc, nr, acc); break;
                default: break;
            }
            if (k == 0) break;
        }
    }
}

// erf(x) = 1 - (a1 t + a2 t^2 + ... + a5 t^5) exp(-x^2), t = 1 / (1 + p |x|), odd in x.
inline __m256 erf_ps(__m256 x) {
    const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.f));
    const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.f), x);
    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.f),
                                   _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, _mm256_set1_ps(1.f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    const __m256 e = expf_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), ax), ax));
    const __m256 r = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.f));
    return _mm256_or_ps(r, sign);
}

inline __m256 gelu8(__m256 v) {
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f);
    const __m256 rs2 = _mm256_set1_ps(0.70710678118654752f);
    return _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, erf_ps(_mm256_mul_ps(v, rs2))));
}

void gelu_erf_avx2(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i < n; i += 8) {
        const int64_t left = n - i;
        const __m256 v = left >= 8 ? _mm256_loadu_ps(x + i) : load_partial(x + i, left, 0.f);
        const __m256 g = gelu8(v);
        if (left >= 8) _mm256_storeu_ps(y + i, g);
        else store_partial(y + i, left, g);
    }
}

// gemm_f32_packed. The panels are 32 columns wide and k-major (ops.h). Sums run over k in
// chunks, the partial sums stored to C and loaded back between chunks: still one FMA chain per
// output, in order, whatever the chunk size, the tile height or the ISA (both tiles below do
// acc = fma(a[i][t], w[t][j], acc) for t = 0, 1, ...).

// The epilogue on 8 sums of row i (of the whole product), columns j..j+nv-1, nv in 1..8; the
// same code for both tiles, so AVX2 and AVX-512 results agree bit for bit.
inline __m256 packed_epilogue8(__m256 v, const GemmEpilogue& e, int64_t i, int64_t j, int nv) {
    if (e.bias) v = _mm256_add_ps(v, nv == 8 ? _mm256_loadu_ps(e.bias + j) : load_partial(e.bias + j, nv, 0.f));
    if (e.res) {
        const float* r = e.res + i * e.ld_res + j;
        v = _mm256_add_ps(v, nv == 8 ? _mm256_loadu_ps(r) : load_partial(r, nv, 0.f));
    }
    if (e.gelu) v = gelu8(v);
    return v;
}

inline void store8(float* p, int nv, __m256 v) {
    if (nv >= 8) _mm256_storeu_ps(p, v);
    else if (nv > 0) store_partial(p, nv, v);
}

inline __m256 load8(const float* p, int nv) {
    return nv >= 8 ? _mm256_loadu_ps(p) : nv > 0 ? load_partial(p, nv, 0.f) : _mm256_setzero_ps();
}

// Row tiles of a panel: at most max_mr rows each, as even as possible (14 rows at 6: 5, 5, 4),
// so a small m does not end in a one-row tile that runs at a fraction of the FMA rate.
inline int next_tile_rows(int64_t left, int max_mr) {
    const int64_t n_tiles = (left + max_mr - 1) / max_mr;
    return static_cast<int>((left + n_tiles - 1) / n_tiles);
}

// A panel's elements widened to floats, 8 (AVX2) or 16 (AVX-512) at an aligned address: F32
// loads, F16 through F16C's conversion, BF16 by a 16-bit shift. Every widening is exact, so the
// FMA chains see the same floats whatever the storage.
template <DType T>
struct PanelElems;
template <>
struct PanelElems<DType::kF32> {
    static constexpr int64_t kBytes = 4;
    static __m256 load8(const uint8_t* p) { return _mm256_load_ps(reinterpret_cast<const float*>(p)); }
#if FERROX_AVX512
    static __m512 load16(const uint8_t* p) { return _mm512_load_ps(reinterpret_cast<const float*>(p)); }
#endif
};
template <>
struct PanelElems<DType::kF16> {
    static constexpr int64_t kBytes = 2;
    static __m256 load8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p))); }
#if FERROX_AVX512
    static __m512 load16(const uint8_t* p) {
        return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    }
#endif
};
template <>
struct PanelElems<DType::kBF16> {
    static constexpr int64_t kBytes = 2;
    static __m256 load8(const uint8_t* p) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
#if FERROX_AVX512
    static __m512 load16(const uint8_t* p) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
#endif
};

// Where a tile is: its first row i0 and column j0 of the whole product (for the epilogue), the
// chunk's place in k, the number of valid columns.
struct PackedTileArgs {
    const float* a;        // row i0, column t0 of A
    int64_t lda;
    const uint8_t* panel;  // row t0 of the panel, offset to the tile's first column
    int64_t kc;
    float* c;              // row i0, column j0 of C
    int64_t ldc;
    int nr;                // valid columns of the tile
    bool first, last;      // the first / last chunk of k
    int64_t i0, j0;
    const uint8_t* prefetch;  // null, or where to prefetch the tile's part of a panel row per t
};

// AVX2: MR rows x 16 columns (half a panel) in 2 MR registers; per t, two panel loads and MR
// broadcasts of A feed 2 MR FMAs.
template <DType T, int MR>
void packed_tile_avx2(const PackedTileArgs& p, const GemmEpilogue& e) {
    using E = PanelElems<T>;
    constexpr int64_t kRow = kPackedWidth * E::kBytes;  // bytes of a panel row
    __m256 acc[MR][2];
    const int n0 = p.nr < 8 ? p.nr : 8, n1 = p.nr > 8 ? p.nr - 8 : 0;
    #pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        if (p.first) {
            acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        } else {
            acc[i][0] = load8(p.c + i * p.ldc, n0);
            acc[i][1] = load8(p.c + i * p.ldc + 8, n1);
        }
    }
    const float* a = p.a;
    const uint8_t* w = p.panel;
    const char* pf = reinterpret_cast<const char*>(p.prefetch);
    for (int64_t t = 0; t < p.kc; ++t, w += kRow) {
        if (pf) _mm_prefetch(pf + t * kRow, _MM_HINT_T0);
        const __m256 w0 = E::load8(w);
        const __m256 w1 = E::load8(w + 8 * E::kBytes);
        #pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            const __m256 av = _mm256_broadcast_ss(a + i * p.lda + t);
            acc[i][0] = _mm256_fmadd_ps(av, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, w1, acc[i][1]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        float* c = p.c + i * p.ldc;
        if (p.last) {
            acc[i][0] = packed_epilogue8(acc[i][0], e, p.i0 + i, p.j0, n0);
            if (n1 > 0) acc[i][1] = packed_epilogue8(acc[i][1], e, p.i0 + i, p.j0 + 8, n1);
        }
        store8(c, n0, acc[i][0]);
        store8(c + 8, n1, acc[i][1]);
    }
}

using PackedTileFn = void (*)(const PackedTileArgs& p, const GemmEpilogue& e);

constexpr int kPackedMaxRowsAvx2 = 6;
template <DType T>
constexpr PackedTileFn kPackedTilesAvx2[kPackedMaxRowsAvx2 + 1] = {
    nullptr,
    packed_tile_avx2<T, 1>,
    packed_tile_avx2<T, 2>,
    packed_tile_avx2<T, 3>,
    packed_tile_avx2<T, 4>,
    packed_tile_avx2<T, 5>,
    packed_tile_avx2<T, 6>,
};

// Per panel, per chunk of k (kKC panel rows, in L1), per row tile: both halves of the panel (16
// columns each). Every tile prefetches, per t, its half of the panel row kKC rows on (for 16-bit
// elements the whole row: one cache line): the same row of the next chunk, or of the next panel
// (they follow in memory; past the end is harmless, a prefetch does not fault). For a small m
// the weights come from DRAM once per call, and the hardware prefetcher alone left the tiles
// waiting on them (MiniLM, 14 tokens: 8 ms a call without, 4-6 ms with).
template <DType T>
void gemm_packed_avx2_t(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                        int64_t ldc, int64_t m, const GemmEpilogue& epi) {
    constexpr int64_t kKC = 128;
    constexpr int64_t kRow = kPackedWidth * PanelElems<T>::kBytes;
    const int64_t k = w.k;
    for (int64_t pi = p0; pi < p1; ++pi) {
        const int64_t left = w.n - pi * kPackedWidth;
        const int nr = static_cast<int>(left < kPackedWidth ? left : kPackedWidth);
        for (int64_t t0 = 0; t0 < k; t0 += kKC) {
            const int64_t kc = k - t0 < kKC ? k - t0 : kKC;
            const uint8_t* chunk = w.panel(pi) + t0 * kRow;
            for (int64_t i = 0; i < m;) {
                const int mr = next_tile_rows(m - i, kPackedMaxRowsAvx2);
                for (int h = 0; h * 16 < nr; ++h) {
                    const int64_t j0 = pi * kPackedWidth + h * 16;
                    const int nrh = nr - h * 16 < 16 ? nr - h * 16 : 16;
                    const uint8_t* half = chunk + h * 16 * PanelElems<T>::kBytes;
                    const PackedTileArgs args{a + i * lda + t0, lda, half, kc, c + i * ldc + j0, ldc, nrh,
                                              t0 == 0, t0 + kc == k, i, j0, half + kKC * kRow};
                    kPackedTilesAvx2<T>[mr](args, epi);
                }
                i += mr;
            }
        }
    }
}

void gemm_f32_packed_avx2(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                          int64_t ldc, int64_t m, const GemmEpilogue& epi) {
    switch (w.type) {
        case DType::kF16: return gemm_packed_avx2_t<DType::kF16>(a, lda, w, p0, p1, c, ldc, m, epi);
        case DType::kBF16: return gemm_packed_avx2_t<DType::kBF16>(a, lda, w, p0, p1, c, ldc, m, epi);
        default: return gemm_packed_avx2_t<DType::kF32>(a, lda, w, p0, p1, c, ldc, m, epi);
    }
}

#if FERROX_AVX512
// AVX-512: MR rows x 32 columns (a whole panel) in 2 MR zmm registers; per t, two panel loads
// and MR broadcasts feed 2 MR FMAs. The epilogue runs on 8-lane quarters (packed_epilogue8).
template <DType T, int MR>
void packed_tile_avx512(const PackedTileArgs& p, const GemmEpilogue& e) {
    using E = PanelElems<T>;
    constexpr int64_t kRow = kPackedWidth * E::kBytes;  // bytes of a panel row
    __m512 acc[MR][2];
    // Partial panels go through a buffer (plain loads and stores: SIMDe, which the emulated
    // test build uses, has no masked ones).
    const bool full = p.nr == kPackedWidth;
    #pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        if (p.first) {
            acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        } else if (full) {
            acc[i][0] = _mm512_loadu_ps(p.c + i * p.ldc);
            acc[i][1] = _mm512_loadu_ps(p.c + i * p.ldc + 16);
        } else {
            alignas(64) float buf[kPackedWidth] = {};
            for (int j = 0; j < p.nr; ++j) buf[j] = p.c[i * p.ldc + j];
            acc[i][0] = _mm512_load_ps(buf);
            acc[i][1] = _mm512_load_ps(buf + 16);
        }
    }
    const float* a = p.a;
    const uint8_t* w = p.panel;
    const char* pf = reinterpret_cast<const char*>(p.prefetch);
    for (int64_t t = 0; t < p.kc; ++t, w += kRow) {
        if (pf) {  // the whole row: its cache lines
            _mm_prefetch(pf + t * kRow, _MM_HINT_T0);
            if constexpr (kRow > 64) _mm_prefetch(pf + t * kRow + 64, _MM_HINT_T0);
        }
        const __m512 w0 = E::load16(w);
        const __m512 w1 = E::load16(w + 16 * E::kBytes);
        #pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            const __m512 av = _mm512_set1_ps(a[i * p.lda + t]);
            acc[i][0] = _mm512_fmadd_ps(av, w0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, w1, acc[i][1]);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        float* c = p.c + i * p.ldc;
        if (!p.last && full) {
            _mm512_storeu_ps(c, acc[i][0]);
            _mm512_storeu_ps(c + 16, acc[i][1]);
            continue;
        }
        if (!p.last) {
            alignas(64) float buf[kPackedWidth];
            _mm512_store_ps(buf, acc[i][0]);
            _mm512_store_ps(buf + 16, acc[i][1]);
            for (int j = 0; j < p.nr; ++j) c[j] = buf[j];
            continue;
        }
        for (int q = 0; q < 4; ++q) {
            const int nv = p.nr - 8 * q;
            if (nv <= 0) break;
            const __m512 v = acc[i][q >> 1];
            const __m256 v8 = (q & 1) ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
                                      : _mm512_castps512_ps256(v);
            store8(c + 8 * q, nv, packed_epilogue8(v8, e, p.i0 + i, p.j0 + 8 * q, nv < 8 ? nv : 8));
        }
    }
}

constexpr int kPackedMaxRowsAvx512 = 12;
template <DType T>
constexpr PackedTileFn kPackedTilesAvx512[kPackedMaxRowsAvx512 + 1] = {
    nullptr,
    packed_tile_avx512<T, 1>,
    packed_tile_avx512<T, 2>,
    packed_tile_avx512<T, 3>,
    packed_tile_avx512<T, 4>,
    packed_tile_avx512<T, 5>,
    packed_tile_avx512<T, 6>,
    packed_tile_avx512<T, 7>,
    packed_tile_avx512<T, 8>,
    packed_tile_avx512<T, 9>,
    packed_tile_avx512<T, 10>,
    packed_tile_avx512<T, 11>,
    packed_tile_avx512<T, 12>,
};

// Per panel, per chunk of k (kKC panel rows, in L1): every row tile.
template <DType T>
void gemm_packed_avx512_t(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                          int64_t ldc, int64_t m, const GemmEpilogue& epi) {
    constexpr int64_t kKC = 256;
    constexpr int64_t kRow = kPackedWidth * PanelElems<T>::kBytes;
    const int64_t k = w.k;
    for (int64_t pi = p0; pi < p1; ++pi) {
        const int64_t left = w.n - pi * kPackedWidth;
        const int nr = static_cast<int>(left < kPackedWidth ? left : kPackedWidth);
        const int64_t j0 = pi * kPackedWidth;
        for (int64_t t0 = 0; t0 < k; t0 += kKC) {
            const int64_t kc = k - t0 < kKC ? k - t0 : kKC;
            const uint8_t* chunk = w.panel(pi) + t0 * kRow;
            PackedTileArgs args{nullptr, lda, chunk, kc, nullptr, ldc, nr, t0 == 0, t0 + kc == k, 0, j0, nullptr};
            for (int64_t i = 0; i < m;) {
                const int mr = next_tile_rows(m - i, kPackedMaxRowsAvx512);
                args.prefetch = chunk + kKC * kRow;  // the next chunk, as the AVX2 driver does
                args.a = a + i * lda + t0;
                args.c = c + i * ldc + j0;
                args.i0 = i;
                kPackedTilesAvx512<T>[mr](args, epi);
                i += mr;
            }
        }
    }
}

void gemm_f32_packed_avx512(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                            int64_t ldc, int64_t m, const GemmEpilogue& epi) {
    switch (w.type) {
        case DType::kF16: return gemm_packed_avx512_t<DType::kF16>(a, lda, w, p0, p1, c, ldc, m, epi);
        case DType::kBF16: return gemm_packed_avx512_t<DType::kBF16>(a, lda, w, p0, p1, c, ldc, m, epi);
        default: return gemm_packed_avx512_t<DType::kF32>(a, lda, w, p0, p1, c, ldc, m, epi);
    }
}
#endif

}  // namespace

namespace detail::FERROX_ISA_NS {
void override_ops(OpsKernels* ops) {
    *ops = OpsKernels{rms_norm_avx2,  softmax_avx2, silu_mul_avx2, vec_add_avx2,
                      vec_scale_avx2, dot_f32_avx2, axpy_avx2,     gemm_f32_avx2,
                      gelu_erf_avx2,  gemm_f32_packed_avx2, argmax_first_avx2,
                      rope_rotate_avx2, max_finite_avx2, exp_shifted_avx2,
                      chunk_max_avx2, ids_at_or_above_avx2, f16_table_mul_avx2};
#if FERROX_AVX512
    ops->gemm_f32_packed = gemm_f32_packed_avx512;
#else
    ops->gemm_f32_packed = gemm_f32_packed_avx2;
#endif
}
}  // namespace detail::FERROX_ISA_NS

}  // namespace ferrox

#else  // not built for AVX2 (a non-x86 target): dispatch never selects it.
namespace ferrox::detail::FERROX_ISA_NS {
void override_ops(OpsKernels*) {}
}  // namespace ferrox::detail::FERROX_ISA_NS
#endif
