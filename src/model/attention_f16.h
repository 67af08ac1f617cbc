#pragma once
// The inner loops of attention over an F16 KV cache, in two summation orders that mirror
// ggml's two F16 matrix-product paths, so that ferrox's attention is bit-identical to
// llama.cpp's (deep models turn one-ulp differences into different greedy tokens):
//
//  - "decode" order (a sequence advancing by one token; ggml_vec_dot_f16): four 8-lane
//    accumulators over elements i = 32s + 8j + lane, reduced (a0+a2)+(a1+a3), then
//    lanes (l, l+4) paired and summed as (t0+t1)+(t2+t3);
//  - "prefill" order (two or more tokens of a sequence; llamafile's tinyBLAS): one 8-lane
//    accumulator over elements i = 8s + lane, reduced as (t0+t2)+(t1+t3) of the paired lanes.
//
// Q·K sums over head dimensions; P·V sums over positions, which the cache stores as rows, so
// P·V keeps R (32 or 8) partial rows acc[r][d] += p[i] * v[i][d] for i ≡ r and reduces them
// per dimension in the same order. Chosen once (AVX2+F16C or scalar) at first use.

#include <cstddef>
#include <cstdint>

namespace ferrox {

struct AttnF16Kernels {
    // q·k, k an F16 row, q floats already rounded to F16 precision; n % 8 == 0.
    float (*dot_decode)(const float* q, const uint16_t* k, int n);
    float (*dot_prefill)(const float* q, const uint16_t* k, int n);
    // acc[0..n) = fma(v[i], p, acc[i]) with v an F16 row.
    void (*accumulate)(float p, const uint16_t* v, float* acc, int n);
    // out[d] = the sum over r of acc[r * n + d] in decode (32 rows) or prefill (8 rows) order.
    void (*reduce_decode)(const float* acc, float* out, int n);
    void (*reduce_prefill)(const float* acc, float* out, int n);
    // Converts n floats to F16 (KV writes).
    void (*to_f16)(const float* x, uint16_t* y, int n);
    // Runs of consecutive cache rows (row j at k + j * stride), so the inner loops are not a
    // call per position; each element is exactly what the one-row functions above give.
    // out[j] = dot(q, row j) * scale, in the decode or prefill order.
    void (*dots)(bool prefill, const float* q, const uint16_t* k, int stride, int count, int n, float scale,
                 float* out);
    // For each row j: acc[((p0 + j) % n_rows) * n ..] += f16(p[j]) * row j.
    void (*accumulate_run)(const float* p, const uint16_t* v, int stride, int count, int p0, int n_rows,
                           float* acc, int n);
    // accumulate_run with the rows already converted to floats (exact), so the query heads that
    // share a KV head convert each cache row once: the same bits as accumulate_run on the F16 rows.
    void (*accumulate_run_f32)(const float* p, const float* v, int stride, int count, int p0, int n_rows,
                               float* acc, int n);
    // y[i] = the F16 value x[i] as a float, for n values.
    void (*from_f16)(const uint16_t* x, float* y, int n);
    // The prefill dots of n_q query heads that share one KV head (grouped-query attention):
    // out[g * out_stride + j] = dot_prefill(q + g * n, row j) * scale, bit for bit; each cache row
    // is converted once for all the heads.
    void (*dots_prefill_group)(const float* q, int n_q, const uint16_t* k, int stride, int count, int n,
                               float scale, float* out, int out_stride);
};

template <float (*DotPrefill)(const float*, const uint16_t*, int)>
void attn_dots_prefill_group(const float* q, int n_q, const uint16_t* k, int stride, int count, int n, float scale,
                             float* out, int out_stride) {
    for (int g = 0; g < n_q; ++g)
        for (int j = 0; j < count; ++j)
            out[g * out_stride + j] = DotPrefill(q + g * n, k + static_cast<size_t>(j) * stride, n) * scale;
}

const AttnF16Kernels& attn_f16_kernels();

// The run kernels, built on a table's one-row functions (inlined where they are constants).
template <float (*DotDecode)(const float*, const uint16_t*, int), float (*DotPrefill)(const float*, const uint16_t*, int)>
void attn_dots_run(bool prefill, const float* q, const uint16_t* k, int stride, int count, int n, float scale,
                   float* out) {
    if (prefill) {
        for (int j = 0; j < count; ++j) out[j] = DotPrefill(q, k + static_cast<size_t>(j) * stride, n) * scale;
    } else {
        for (int j = 0; j < count; ++j) out[j] = DotDecode(q, k + static_cast<size_t>(j) * stride, n) * scale;
    }
}

template <void (*Accumulate)(float, const uint16_t*, float*, int), float (*Round)(float)>
void attn_accumulate_run(const float* p, const uint16_t* v, int stride, int count, int p0, int n_rows, float* acc,
                         int n) {
    int r = p0 % n_rows;
    for (int j = 0; j < count; ++j) {
        Accumulate(Round(p[j]), v + static_cast<size_t>(j) * stride, acc + static_cast<size_t>(r) * n, n);
        if (++r == n_rows) r = 0;
    }
}
template <float (*Round)(float)>
void attn_accumulate_run_f32(const float* p, const float* v, int stride, int count, int p0, int n_rows, float* acc,
                             int n) {
    int r = p0 % n_rows;
    for (int j = 0; j < count; ++j) {
        const float pj = Round(p[j]);
        const float* vj = v + static_cast<size_t>(j) * stride;
        float* a = acc + static_cast<size_t>(r) * n;
        for (int d = 0; d < n; ++d) a[d] = __builtin_fmaf(vj[d], pj, a[d]);
        if (++r == n_rows) r = 0;
    }
}
const AttnF16Kernels& attn_f16_kernels_scalar();

}  // namespace ferrox
