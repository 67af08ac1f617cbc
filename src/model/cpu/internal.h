#pragma once
// The CPU model's internals, shared by its files (model.cc and cpu/*.cc): the forward pass's
// scratch buffers, the attention's work sizes and the small helpers the blocks share. Only the
// CPU model's own files include it.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/prefetch_feed.h"
#include "kernels/attention_f16.h"
#include "model/model.h"

namespace ferrox {

constexpr int kMaxHeadDim = 512;
constexpr int kPrefillRows = 8;
// A prompt's attention items (Model::attention): up to kAttnQueries (token, head) queries, of
// at most kAttnHeads heads; per thread the queries' 8 partial P·V rows, then a chunk of kVChunk
// cache positions' V converted into floats.
constexpr int kAttnHeads = 8;
constexpr int kAttnQueries = 32;
constexpr int kVChunk = 64;
constexpr int kAccRowsPerThread = kAttnQueries * kPrefillRows + kVChunk;
static_assert(kAttnHeads <= kAttnQueries);

// Asks for `bytes` at the start of each of `count` rows `row_bytes` apart (a hint: no effect on
// the results).
inline void prefetch_rows(const uint8_t* p, size_t row_bytes, int count, size_t bytes) {
    for (int j = 0; j < count; ++j, p += row_bytes) {
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
    }
}

// The per-token work between the matrix products (norms, RoPE and the KV store, residual adds,
// SwiGLU): on the calling thread for a few tokens, split between threads by token from
// kTokensParallelFrom on (a 512-token prompt's share of it left the other core idle ~4 % of
// the time at 2 threads). Every op here is row-wise or element-wise, so the split changes no bit.
constexpr int kTokensParallelFrom = 16;
template <typename F>
inline void for_token_ranges(ThreadPool& pool, int n_tok, F&& f) {
    if (n_tok < kTokensParallelFrom || pool.n_threads() == 1) return f(0, n_tok);
    pool.run([&](int i_thread, int n_threads) {
        int64_t t0, t1;
        ThreadPool::split(n_tok, i_thread, n_threads, 1, &t0, &t1);
        if (t0 < t1) f(static_cast<int>(t0), static_cast<int>(t1));
    });
}

// The softmax of a query's scores over the positions [first, end), indexed by absolute position
// (after the soft-cap, if any). The row starts at the multiple of 8 at or below `first`, the
// positions before it masked (-inf: weight 0), because llama.cpp's rows start at position 0 with
// the window masked: its softmax sums groups of 8 positions in float, then the groups in double,
// so the groups must start where its do for the weights to round the same.
// With a sink (gpt-oss; -inf: none), the head's sink logit takes part in the maximum and the sum
// as one more position without a value, as ggml's soft_max with sinks.
inline void window_softmax(float* sc, int first, int end, float cap,
                           float sink = -std::numeric_limits<float>::infinity()) {
    if (cap > 0) attn_softcap(sc + first, end - first, cap);
    const int begin = first / 8 * 8;
    std::fill(sc + begin, sc + first, -std::numeric_limits<float>::infinity());
    if (sink == -std::numeric_limits<float>::infinity()) return softmax_inplace(sc + begin, end - begin);
    const float m = std::max(max_finite(sc + first, end - first), sink);
    double sum = exp_shifted(sc + begin, m, 1.0f, sc + begin, end - begin);
    sum += std::exp(sink - m);
    vec_scale(sc + begin, static_cast<float>(1.0 / sum), sc + begin, end - begin);
}

// Rotates one head (n_rot leading dims) in place by the per-token cos/sin table, in llama.cpp's
// bits (ops.h's rope_rotate).
inline void rope_head(float* x, const float* cs, const float* sn, int n_rot, RopeOrdering ord) {
    rope_rotate(x, cs, sn, n_rot, ord == RopeOrdering::kNeox);  // kernels/ops.h
}

// Bytes between a matmul's activation rows (matmul.cc).
int64_t act_row_stride(int64_t row_bytes);
// Whether a Q8_0 matrix can take the packed layout, and a row of one in it (place.cc).
bool can_pack_q8_0(const TensorView& t);
void dequantize_packed_q8_0_row(const TensorView& t, int64_t row, float* y);

// The products of a layer, their inputs and outputs in the scratch buffers. The FFN's first
// products (one parallel region): dense, gate and up; a mixture of experts, the router (and its
// shared expert's gate and up). down: the dense (or shared expert's) down product.
struct Model::LayerJobs {
    MatJob qkv[3];
    MatJob o[1];
    MatJob ffn_in[3];
    int n_ffn_in;
    MatJob down[1];
};

// One expert's matrix applied to its group of rows (cpu/moe.cc).
struct Model::ExpertJob {
    const TensorView* w;
    int64_t row0;        // the expert's first row in w
    const uint8_t* a;    // the group's quantized input rows
    int64_t a_row_bytes;
    int n_cols;
    float* y;            // (n_cols, n_out): one row of w->ne[1] floats per input row
};

// Buffers sized once at load for max_batch_tokens and max_ctx; forward() never allocates.
struct Model::Scratch {
    // Tokens [t0, t0 + nt) of one sequence against query heads [h0, h0 + nh), which share a KV head.
    struct AttnItem {
        int t0, nt, h0, nh;
        int e0 = 0, ne = 0;  // decode: ne > 1 tokens of one sequence, attn_entries[e0, e0 + ne)
    };
    std::vector<float> x;      // (n_tok, n_embd) residual stream
    std::vector<float> xn;     // (n_tok, n_embd) normed input of a block
    std::vector<float> q;      // (n_tok, q_dim)
    std::vector<float> k;      // (n_tok, kv_dim)
    std::vector<float> v;      // (n_tok, kv_dim)
    std::vector<float> att;    // (n_tok, q_dim) attention output
    std::vector<float> gate;   // (n_tok, n_ff)
    std::vector<float> up;     // (n_tok, n_ff)
    std::vector<float> proj;   // (n_tok, max(n_embd, ...)) output of wo / w_down
    std::vector<uint8_t> act;  // (n_tok, row bytes) activations quantized for a matmul
    // Mixture of experts (cpu/moe.cc); empty for dense models. K = n_expert_used; "rows" are
    // the batch's (token, expert) pairs in expert order.
    std::vector<float> moe_router;    // (n_tok, n_expert) router logits, then probabilities
    std::vector<int32_t> moe_sel;     // (n_tok, K) chosen experts by rank
    std::vector<float> moe_w;         // (n_tok, K) their weights
    std::vector<int32_t> moe_offset;  // (n_expert + 1) first row of each expert
    std::vector<int32_t> moe_next;    // (n_expert) grouping cursor
    std::vector<int32_t> moe_pair_tok;  // (n_tok * K) token of each row
    std::vector<int32_t> moe_row_of;    // (n_tok, K) row of each pair
    std::vector<int32_t> moe_row_expert;  // (n_tok * K) expert of each row
    std::vector<uint8_t> moe_act;     // (n_tok * K, row bytes) quantized inputs in expert order
    std::vector<float> moe_gate, moe_up;  // (n_tok * K, n_ff_exp)
    std::vector<float> moe_down;          // (n_tok * K, n_embd)
    std::vector<float> shexp_out;         // (n_tok, n_embd) the shared expert's output
    std::vector<ExpertJob> moe_jobs;
    std::vector<int64_t> moe_unit_begin;
    std::vector<float> scores; // (n_threads, kAttnQueries, score_stride) attention scores
    // A query's scores row: max_ctx floats, padded so that rows are not a multiple of 4 KiB
    // apart. With the unpadded 4096-position rows every query's score of one cache row fell in
    // the same L1 set (the prompt dots store one score per query per row: 32 queries, 12 ways).
    int64_t score_stride = 0;
    std::vector<float> attn_acc;  // (n_threads, kAccRowsPerThread, head_dim) P·V scratch per thread
    std::vector<float> attn_q;    // (n_threads, kAttnQueries, head_dim) queries rounded to F16
    std::vector<const uint16_t*> attn_rows;  // (n_threads, max_ctx) a decode item's V rows
    std::vector<AttnItem> attn_items;  // Model::attention's work items
    std::vector<int32_t> attn_entries;  // decode items' tokens, by sequence and position
    std::vector<std::array<int64_t, 3>> attn_order;  // (block table, position, token) of decode tokens
    bool attn_decode_only = false;  // every sequence of the batch decodes one token
    // (n_tok) 1: the token's V is written into the F16 cache by its decode attention item (the
    // only one that reads it this layer), after the item's dots asked for the lines of that
    // block: the transposed V puts a position's values on one line per dimension, and written
    // with the other rows of the step those stores waited on memory (~5 % of a 4-stream step).
    std::vector<uint8_t> v_late;
    std::vector<int32_t> pos;  // (n_tok) position of each token
    std::vector<int32_t> seq;  // (n_tok) index into Batch::seqs of each token
    // (n_tok) each token's index in its sequence's run of the batch, and that run's length
    // (ModelOptions::ggml_order: llama.cpp's kernel choice for a sequence batched alone).
    std::vector<int32_t> run_at, run_len;
    std::vector<float> rope_cos, rope_sin;  // (n_tok, n_rot/2)
    std::vector<float> rope_cos_swa, rope_sin_swa;  // (n_tok, n_rot/2) local layers; empty if none
    std::unique_ptr<StealingRanges> tiles;  // the 64-row tiles of a decode product (matmuls)
    std::unique_ptr<StealingRanges> attn_ranges;  // Model::attention's items
    // Per thread: the KV runs of its share of a decode layer's attention items, asked for
    // during the products before that attention (plan_kv_prefetch).
    struct KvFeed {
        std::vector<const char*> runs;
        std::vector<int32_t> lines;
        PrefetchFeed feed;
    };
    std::vector<KvFeed> kv_feeds;

    // A decode item's tokens (in position order) and the cache positions its blocks cover,
    // [p_begin, last): from the block holding its first token's window start (n_swa > 0: a
    // sliding window of n_swa positions) to its last token.
    struct DecodeSpan {
        const int* ents;
        int ne, p_begin, last;
    };
    DecodeSpan decode_span(const AttnItem& it, int n_swa, int bs) const {
        const int ne = std::max(1, it.ne);
        const int* ents = it.ne > 0 ? attn_entries.data() + it.e0 : &it.t0;
        const int first = n_swa > 0 ? std::max(0, pos[ents[0]] + 1 - n_swa) : 0;
        return {ents, ne, first / bs * bs, pos[ents[ne - 1]] + 1};
    }
};

}  // namespace ferrox
