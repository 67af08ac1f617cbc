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
// per dimension in the same order (the V cache is transposed per block, so decode P·V is a
// dot product over positions like llama.cpp's over its transposed V). Chosen once (AVX2+F16C or scalar) at first use.

#include <cstddef>
#include <cstdint>


namespace ferrox {

// The F16 cache's V layout within one KV head's run of a block (bs positions, hd elements per
// position), which the decode P·V kernels read: transposed in tiles of T consecutive slots,
// each tile hd rows of T elements, so that one dimension of 8 consecutive positions is one
// 16-byte load. T = bs when bs % 8 == 0 (the whole block transposed: a dimension's slots are
// one run; tiles of 16 slots, which halve the lines a position's write touches, read from
// memory a third slower in the P·V kernel's order), else the largest power of two that
// divides bs. The rest of the cache's layout is model/kv_storage.h's.
constexpr int kv_v_tile(int bs) { return bs % 8 == 0 ? bs : bs % 4 == 0 ? 4 : bs % 2 == 0 ? 2 : 1; }
// Element d of slot j, in elements from the head's run.
constexpr size_t kv_v_offset(int bs, int hd, int j, int d) {
    const int t = kv_v_tile(bs);
    return static_cast<size_t>(j / t) * t * hd + static_cast<size_t>(d) * t + j % t;
}

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
    // y[i] = x[i] rounded to F16 precision (to nearest even), as a float (queries).
    void (*round_f16_row)(const float* x, float* y, int n);
    // Runs of consecutive cache rows (row j at k + j * stride), so the inner loops are not a
    // call per position; each element is exactly what the one-row functions above give.
    // out[j] = dot(q, row j) * scale, in the decode or prefill order.
    void (*dots)(bool prefill, const float* q, const uint16_t* k, int stride, int count, int n, float scale,
                 float* out);
    // For each row j: acc[((p0 + j) % n_rows) * n ..] += f16(p[j]) * row j.
    void (*accumulate_run)(const float* p, const uint16_t* v, int stride, int count, int p0, int n_rows,
                           float* acc, int n);
    // Prefill-order P·V over a chunk of positions whose rows were transposed into floats:
    // vt[d * ld + j] is row j's element d (j < count <= ld), and acc_t[d * 8 + r] is partial row
    // r's dimension d. The chunk starts at a position that is a multiple of 8, so position j of it
    // goes to partial row j % 8; each (row, dimension) gets accumulate_run's fused multiply-adds in
    // its order, so the sums are the same bits. One weight vector then serves 8 dimensions, and no
    // weight is broadcast per multiply-add.
    void (*accumulate_t)(const float* p, const float* vt, int ld, int count, float* acc_t, int n);
    // vt[d * ld + j] = cols[j][d * dstride] as a float, for j < count <= ld and d < n; columns
    // count.. up to the next multiple of 8 are zero. (In the V cache's tiles a position's element
    // d is dstride = kv_v_tile(block_size) elements after its element d - 1.)
    void (*gather_vt)(const uint16_t* const* cols, int dstride, int count, int n, float* vt, int ld);
    // out[d] = reduce_prefill's sum of the 8 partial rows, from acc_t's layout.
    void (*reduce_prefill_t)(const float* acc_t, float* out, int n);
    // The prefill dots of n_q query heads that share one KV head (grouped-query attention):
    // out[g * out_stride + j] = dot_prefill(q + g * n, row j) * scale, bit for bit; each cache row
    // is converted once for all the heads.
    void (*dots_prefill_group)(const float* q, int n_q, const uint16_t* k, int stride, int count, int n,
                               float scale, float* out, int out_stride);
    // Decode, grouped-query: the n_q heads of one KV head for one token. Each cache row is
    // converted once for all of them, and every head gets exactly the one-head functions' bits:
    // out[g * out_stride + j] = dot_decode(q + g * n, row j) * scale.
    void (*dots_decode_group)(const float* q, int n_q, const uint16_t* k, int stride, int count, int n,
                              float scale, float* out, int out_stride);
    // Decode P·V of n_q heads over one KV head's V, in tiles (kv_v_offset): position i's
    // element d is at blocks[(i - p_begin) / bs][kv_v_offset(bs, n, i % bs, d)] (p_begin a
    // multiple of bs). Head g's weights are p[g * p_stride + i], i in [p_begin, p_end), already rounded to
    // F16 precision; its output out[g][0..n) is, per dimension, 32 partial sums (position i goes
    // to partial row i % 32, fma(V, weight, row) from +0 in increasing i: accumulate's operations)
    // reduced in reduce_decode's order. That is ggml's decode-order dot product over positions
    // of a V cache stored transposed, as llama.cpp stores it; one converted slice of V serves
    // every head of the group.
    void (*pv_decode_t)(const float* p, int p_stride, int n_q, const uint16_t* const* blocks, int bs, int p_begin,
                        int p_end, float* const* out, int n);
};

template <float (*DotPrefill)(const float*, const uint16_t*, int)>
void attn_dots_prefill_group(const float* q, int n_q, const uint16_t* k, int stride, int count, int n, float scale,
                             float* out, int out_stride) {
    for (int g = 0; g < n_q; ++g)
        for (int j = 0; j < count; ++j)
            out[g * out_stride + j] = DotPrefill(q + g * n, k + static_cast<size_t>(j) * stride, n) * scale;
}

template <float (*DotDecode)(const float*, const uint16_t*, int)>
void attn_dots_decode_group(const float* q, int n_q, const uint16_t* k, int stride, int count, int n, float scale,
                            float* out, int out_stride) {
    for (int g = 0; g < n_q; ++g)
        for (int j = 0; j < count; ++j)
            out[g * out_stride + j] = DotDecode(q + g * n, k + static_cast<size_t>(j) * stride, n) * scale;
}

const AttnF16Kernels& attn_f16_kernels();

// Attention logit soft-capping (Gemma 2), in ggml's steps: s = c * tanhf(s * (1 / c)), each a
// float operation as ggml_scale, ggml_tanh, ggml_scale do. Called only when c > 0.
void attn_softcap(float* s, int n, float c);

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
void attn_accumulate_t(const float* p, const float* vt, int ld, int count, float* acc_t, int n) {
    for (int j = 0; j < count; ++j) {
        const float pj = Round(p[j]);
        for (int d = 0; d < n; ++d) {
            float& a = acc_t[d * 8 + j % 8];
            a = __builtin_fmaf(vt[static_cast<size_t>(d) * ld + j], pj, a);
        }
    }
}
const AttnF16Kernels& attn_f16_kernels_scalar();
// pv_decode_t for any block size and head size (scalar, std::fma: the same bits).
void attn_pv_decode_t_generic(const float* p, int p_stride, int n_q, const uint16_t* const* blocks, int bs, int p_begin,
                              int p_end, float* const* out, int n);
// The AVX2 table (nullptr without AVX2, FMA and F16C), for tests on AVX-512 machines.
const AttnF16Kernels* attn_f16_kernels_avx2_if_supported();

}  // namespace ferrox
