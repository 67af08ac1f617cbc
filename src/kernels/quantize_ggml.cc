// llama.cpp's quantizers for the low-bit weight formats, byte for byte: the bytes
// ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, NULL) writes (no importance matrix),
// which is what `llama-quantize` without --imatrix and gguf writers calling ggml produce.
//
// Written from the algorithms of ggml-quants.c (see the README of this folder for which
// function each one follows); every float step is the same operation in the same order:
// - this file is built with -ffp-contract=off (CMakeLists.txt) and ggml's reference quantizers
//   are plain SSE2 code without fused operations (libggml-base is built for baseline x86-64),
//   so a*b + c is two roundings on both sides;
// - an int times a float converts the int first, products are evaluated left to right (w*l*x is
//   (w*l)*x), and a sum is accumulated in index order, as C evaluates ggml's expressions;
// - nearest_int is ggml's 1.5 * 2^23 trick, fp16 conversion the same round-to-nearest-even;
// - MXFP4 takes floorf(log2f(amax)) from the C library, as ggml does (log2f of the same glibc).
// The tie rules (strict < or >, the first index wins) are ggml's.
//
// Checked byte for byte against llama.cpp's libggml on random and adversarial rows:
// tests/kernels/quantize_ggml_test.cc, golden data from tests/kernels/make_quantize_golden.py.

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/kernels_internal.h"
#include "kernels/quant_blocks.h"
#include "kernels/quants.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

using detail::nearest_int;

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group counts as zero

inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Q2_K/Q3_K's 2 low bits: element 128h + 32s + l at bits 2s of qs[32h + l].
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t* q = L + 128 * h + l;
            qs[32 * h + l] = static_cast<uint8_t>(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
        }
}

// ---- Q2_K ----------------------------------------------------------------------------------

// One sub-block of 16 as an asymmetric fit value = scale * L - m (L in [0, nmax], m >= 0) that
// minimises the weighted absolute error: first the plain min/max fit, then nstep + 1 trial
// scales (nmax + rmin + rdelta * k over the range), each followed by the weighted least-squares
// scale and offset for its levels (the offset clamped to <= 0), kept when its error is smaller.
// ggml's make_qkx2_quants with use_mad.
float fit_min_scale_mad(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                        float rdelta, int nstep) {
    float lo = x[0], hi = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *neg_min = -lo;
        return 0.f;
    }
    float iscale = static_cast<float>(nmax) / (hi - lo);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax));
        const float diff = scale * static_cast<float>(L[i]) + lo - x[i];
        best_err += w[i] * std::fabs(diff);
    }
    uint8_t trial[16];
    for (int k = 0; k <= nstep; ++k) {
        iscale = (rmin + rdelta * static_cast<float>(k) + static_cast<float>(nmax)) / (hi - lo);
        float s_l = 0, s_l2 = 0, s_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax);
            trial[i] = static_cast<uint8_t>(l);
            const float fl = static_cast<float>(l);
            s_l += w[i] * fl;
            s_l2 += w[i] * fl * fl;
            s_xl += w[i] * fl * x[i];
        }
        const float det = sum_w * s_l2 - s_l * s_l;
        if (det > 0) {
            float t_scale = (sum_w * s_xl - sum_x * s_l) / det;
            float t_min = (s_l2 * sum_x - s_l * s_xl) / det;
            if (t_min > 0) {
                t_min = 0;
                t_scale = s_xl / s_l2;
            }
            float err = 0;
            for (int i = 0; i < n; ++i) {
                const float diff = t_scale * static_cast<float>(trial[i]) + t_min - x[i];
                err += w[i] * std::fabs(diff);
            }
            if (err < best_err) {
                std::memcpy(L, trial, static_cast<size_t>(n));
                best_err = err;
                scale = t_scale;
                lo = t_min;
            }
        }
    }
    *neg_min = -lo;
    return scale;
}

// ggml's quantize_row_q2_K_ref: per sub-block of 16 the fit above (weights |x|), the 16 scales
// and 16 mins as 4-bit multiples of max / 15, then every element again to its nearest level
// with the rounded scale and min.
void quantize_q2_k(const float* x, BlockQ2_K* y) {
    uint8_t L[kQK_K];
    float w[16], scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
        for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
        scales[j] = fit_min_scale_mad(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = 15.f / max_scale;
        for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
        y->d = fp32_to_fp16(max_scale / 15.f);
    } else {
        std::memset(y->scales, 0, sizeof(y->scales));
        y->d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
        const float iscale = 15.f / max_min;
        for (int j = 0; j < 16; ++j)
            y->scales[j] = static_cast<uint8_t>(y->scales[j] | (nearest_int(iscale * mins[j]) << 4));
        y->dmin = fp32_to_fp16(max_min / 15.f);
    } else {
        y->dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
        const float d = fp16_to_fp32(y->d) * static_cast<float>(y->scales[j] & 15);
        if (d == 0) continue;  // keeps the fit's levels
        const float dm = fp16_to_fp32(y->dmin) * static_cast<float>(y->scales[j] >> 4);
        for (int l = 0; l < 16; ++l)
            L[16 * j + l] = static_cast<uint8_t>(clampi(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
    }
    pack_2bit(L, y->qs);
}

// ---- Q3_K ----------------------------------------------------------------------------------

// One sub-block of 16 as value = scale * L, L in [-nmax, nmax - 1]: the abs-max element at -nmax,
// then up to 5 passes that move single elements to the level the others' least-squares scale
// suggests, weighted by x^2, kept when the fit improves. Returns the scale; L holds L + nmax
// (all 0 for a group below kGroupMaxEps). ggml's make_q3_quants with do_rmse.
float fit_symmetric_rmse(int n, int nmax, const float* x, int8_t* L) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    for (int pass = 0; pass < 5; ++pass) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const float li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            if (slx > 0) {
                float sl2 = suml2 - w * li * li;
                const int nl = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    const float fnl = static_cast<float>(nl);
                    slx += w * x[i] * fnl;
                    sl2 += w * fnl * fnl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<int8_t>(nl);
                        sumlx = slx;
                        suml2 = sl2;
                        ++changed;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ggml's quantize_row_q3_K_ref: per sub-block the fit above, the 16 signed scales as 6-bit
// multiples of the largest |scale| / 32 (d = 1 / (-32 / max)), then every element again to its
// nearest level in [-4, 3] with the rounded scale.
void quantize_q3_k(const float* x, BlockQ3_K* y) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
        scales[j] = fit_symmetric_rmse(16, 4, x + 16 * j, L + 16 * j);
        const float a = std::fabs(scales[j]);
        if (a > amax) {
            amax = a;
            max_scale = scales[j];
        }
    }
    std::memset(y->scales, 0, sizeof(y->scales));
    if (max_scale != 0) {
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; ++j) {
            const int8_t l8 = static_cast<int8_t>(nearest_int(iscale * scales[j]));
            const int l = clampi(l8, -32, 31) + 32;
            if (j < 8)
                y->scales[j] = static_cast<uint8_t>(l & 15);
            else
                y->scales[j - 8] = static_cast<uint8_t>(y->scales[j - 8] | ((l & 15) << 4));
            y->scales[8 + j % 4] = static_cast<uint8_t>(y->scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
        }
        y->d = fp32_to_fp16(1 / iscale);
    } else {
        y->d = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
        const int sc = q3k_scale(y->scales, j) - 32;
        const float d = fp16_to_fp32(y->d) * static_cast<float>(sc);
        if (d == 0) continue;  // keeps the fit's levels
        for (int l = 0; l < 16; ++l)
            L[16 * j + l] = static_cast<int8_t>(clampi(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
    }
    // The high bit of element e is bit e / 32 of hmask[e % 32]; the low 2 bits as Q2_K's.
    std::memset(y->hmask, 0, sizeof(y->hmask));
    uint8_t low[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
        int v = L[e];
        if (v > 3) {
            y->hmask[e % 32] = static_cast<uint8_t>(y->hmask[e % 32] | (1 << (e / 32)));
            v -= 4;
        }
        low[e] = static_cast<uint8_t>(v);
    }
    pack_2bit(low, y->qs);
}

// ---- IQ4_NL, IQ4_XS ------------------------------------------------------------------------

// IQ4_NL's levels as floats, for the search below.
constexpr float kIQ4Levels[16] = {-127.f, -104.f, -83.f, -65.f, -49.f, -35.f, -22.f, -10.f,
                                  1.f,    13.f,   25.f,  38.f,  53.f,  69.f,  89.f,  113.f};

// For an integer k in [-127, 112], the index of the highest level <= k.
struct IQ4Bracket {
    uint8_t lo[240];
    constexpr IQ4Bracket() : lo() {
        for (int k = -127; k <= 112; ++k) {
            int i = 0;
            while (i < 15 && kIQ4NLValues[i + 1] <= k) ++i;
            lo[k + 127] = static_cast<uint8_t>(i);
        }
    }
};
constexpr IQ4Bracket kIQ4Bracket;

// The index of the level of kIQ4NLValues nearest to v, as ggml's best_index_int8: below the
// lowest or above the highest level the end, else between the bracketing levels lo <= v < hi
// the lower one only when strictly nearer (that comparison in ggml's float expression). The
// levels are integers, so the bracket is the one of floor(v): a table lookup instead of ggml's
// binary search, the same bracket.
inline int best_index_iq4(float v) {
    if (v <= -127.f) return 0;
    if (v >= 113.f) return 15;
    if (v != v) return 15;  // NaN: ggml's search runs to the top
    int k = static_cast<int>(v + 128.f) - 128;  // floor(v), or one more where the sum rounded up
    k -= static_cast<float>(k) > v ? 1 : 0;
    const int lo = kIQ4Bracket.lo[k + 127];
    return v - kIQ4Levels[lo] < kIQ4Levels[lo + 1] - v ? lo : lo + 1;
}

// ggml's quantize_row_iq4_nl_impl with ntry = 7 and no importance matrix (weights x^2), for a
// super-block of n_sub sub-blocks of 32 (1: IQ4_NL, 8: IQ4_XS). Per sub-block: the scale that
// maps the abs-max to the level -127, its weighted least-squares refinement, and 15 trial scales
// (-127 + t) / max, t in [-7, 7], keeping the best least-squares fit. IQ4_NL stores that scale
// and requantizes with its float inverse; IQ4_XS stores d = -max_scale / 32 and 6-bit multiples
// of it, and requantizes every sub-block with d * l.
void quantize_iq4(const float* x, int n_sub, uint16_t* dh, uint8_t* qs, uint16_t* scales_h, uint8_t* scales_l) {
    constexpr int kTry = 7;
    const float v0 = static_cast<float>(kIQ4NLValues[0]);
    uint8_t L[kQK_K];
    float scales[8];
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < n_sub; ++ib) {
        const float* xb = x + 32 * ib;
        uint8_t* Lb = L + 32 * ib;
        float w[32];
        for (int j = 0; j < 32; ++j) w[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            const float ax = std::fabs(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < kGroupMaxEps) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / v0;
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const int l = best_index_iq4(id * xb[j]);
            Lb[j] = static_cast<uint8_t>(l);
            const float q = static_cast<float>(kIQ4NLValues[l]);
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        // The 15 trials' sums, each accumulated in element order as ggml's, side by side (the
        // chains are independent), then compared in ggml's order of trials.
        float tid[2 * kTry + 1], tqx[2 * kTry + 1] = {}, tq2[2 * kTry + 1] = {};
        for (int t = 0; t <= 2 * kTry; ++t) tid[t] = static_cast<float>(t - kTry + kIQ4NLValues[0]) / max;
        for (int j = 0; j < 32; ++j) {
            const float xj = xb[j], wj = w[j];
            for (int t = 0; t <= 2 * kTry; ++t) {
                const float q = kIQ4Levels[best_index_iq4(tid[t] * xj)];
                tqx[t] += wj * q * xj;
                tq2[t] += wj * q * q;
            }
        }
        for (int t = 0; t <= 2 * kTry; ++t) {
            if (tq2[t] > 0 && tqx[t] * tqx[t] > best * tq2[t]) {
                d = tqx[t] / tq2[t];
                best = d * tqx[t];
            }
        }
        scales[ib] = d;
        const float ad = std::fabs(d);
        if (ad > amax_scale) {
            amax_scale = ad;
            max_scale = d;
        }
    }
    if (n_sub > 1) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = fp32_to_fp16(d);
        const float id = d != 0 ? 1 / d : 0.f;
        for (int ib = 0; ib < n_sub; ++ib) {
            const int l = clampi(nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * static_cast<float>(l);
            const float idl = dl != 0 ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(best_index_iq4(idl * x[32 * ib + j]));
            const int s = l + 32;
            if (ib % 2 == 0)
                scales_l[ib / 2] = static_cast<uint8_t>(s & 15);
            else
                scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | ((s & 15) << 4));
            *scales_h = static_cast<uint16_t>(*scales_h | ((s >> 4) << (2 * ib)));
        }
    } else {
        *dh = fp32_to_fp16(scales[0]);
        const float id = scales[0] != 0 ? 1 / scales[0] : 0.f;
        for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(best_index_iq4(id * x[j]));
    }
    for (int ib = 0; ib < n_sub; ++ib)
        for (int j = 0; j < 16; ++j)
            qs[16 * ib + j] = static_cast<uint8_t>(L[32 * ib + j] | (L[32 * ib + 16 + j] << 4));
}

// ---- MXFP4 ---------------------------------------------------------------------------------

// ggml's quantize_row_mxfp4_ref: the exponent floor(log2(amax)) - 2 (so the abs-max lands at or
// above the level 4 of the doubled E2M1 values), every element to the nearest level by
// |level * d - x|, the first index on ties (0 before -0).
void quantize_mxfp4(const float* x, BlockMXFP4* y) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j)
        if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    // x86's float -> integer conversion, then the low byte, as ggml's (uint8_t) cast compiles.
    const uint8_t e =
        amax > 0.0f ? static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = mxfp4_scale(e);
    y->e = e;
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) {
        int best = 0;
        float best_err = std::fabs(static_cast<float>(kMXFP4Values[0]) * d - x[j]);
        for (int i = 1; i < 16; ++i) {
            const float err = std::fabs(static_cast<float>(kMXFP4Values[i]) * d - x[j]);
            if (err < best_err) {
                best = i;
                best_err = err;
            }
        }
        q[j] = static_cast<uint8_t>(best);
    }
    for (int j = 0; j < 16; ++j) y->qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

}  // namespace

bool has_ggml_quantizer(DType type) {
    switch (type) {
        case DType::kQ2_K:
        case DType::kQ3_K:
        case DType::kIQ4_NL:
        case DType::kIQ4_XS:
        case DType::kMXFP4:
            return true;
        default:
            return false;
    }
}

void quantize_row_ggml(DType type, const float* src, void* dst, int64_t n) {
    CHECK_MSG(has_ggml_quantizer(type), "no exact ggml quantizer for this type");
    const int64_t qk = dtype_info(type).block_elems;
    CHECK_MSG(n % qk == 0, "row length is not a multiple of the block size");
    for (int64_t i = 0; i < n / qk; ++i, src += qk) {
        switch (type) {
            case DType::kQ2_K:
                quantize_q2_k(src, static_cast<BlockQ2_K*>(dst) + i);
                break;
            case DType::kQ3_K:
                quantize_q3_k(src, static_cast<BlockQ3_K*>(dst) + i);
                break;
            case DType::kIQ4_NL: {
                auto* b = static_cast<BlockIQ4_NL*>(dst) + i;
                quantize_iq4(src, 1, &b->d, b->qs, nullptr, nullptr);
                break;
            }
            case DType::kIQ4_XS: {
                auto* b = static_cast<BlockIQ4_XS*>(dst) + i;
                quantize_iq4(src, 8, &b->d, b->qs, &b->scales_h, b->scales_l);
                break;
            }
            case DType::kMXFP4:
                quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst) + i);
                break;
            default:
                break;
        }
    }
}

}  // namespace ferrox
