// The CPU model's attention over the paged KV storage: the step's work items (prompt chunks
// by query group, decode tokens by sequence), K and V rows written into the cache, the F16
// cache's dots and P·V in llama.cpp's summation orders, the Q8_0 cache's, and the KV prefetch
// feed of large decode steps.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/ops.h"
#include "kernels/prefetch_feed.h"
#include "kernels/quants.h"
#include "kernels/attention_f16.h"
#include "model/cpu/internal.h"
#include "model/gelu.h"
#include "tensor/fp16.h"

namespace ferrox {

Status Model::check_kv_type(KvType type) const {
    if (type == KvType::kQ8_0 && w_.hp.head_dim % 32 != 0) {
        return invalid_argument("a q8_0 KV cache needs a head size that is a multiple of 32; this model's is " +
                                std::to_string(w_.hp.head_dim));
    }
    return Status::ok();
}

// Token t's V of KV head h into the F16 cache, transposed (kv_v_offset: element d at d * tile
// from the slot's first).
void Model::write_v_f16(KvStorage& kv, const Batch& batch, int il, int t, int h) {
    const ModelHParams& hp = w_.hp;
    Scratch& s = *s_;
    const int bs = kv.geometry().block_size;
    const int p = s.pos[t];
    const int32_t blk = batch.seqs[s.seq[t]].block_table[p / bs];
    uint16_t vh[kMaxHeadDim];
    attn_f16_kernels().to_f16(s.v.data() + static_cast<size_t>(t) * hp.kv_dim() + h * hp.head_dim, vh, hp.head_dim);
    uint16_t* vt = reinterpret_cast<uint16_t*>(kv.head_rows(true, blk, il, h, hp.head_dim)) +
                   kv_v_offset(bs, hp.head_dim, p % bs, 0);
    const int tile = kv_v_tile(bs);
    for (int d = 0; d < hp.head_dim; ++d) vt[static_cast<size_t>(d) * tile] = vh[d];
}

// The attention work items of a batch (the same for every layer); see Model::attention. Also
// decides which tokens' V the attention items write (Scratch::v_late).
void Model::plan_attention(const Batch& batch) {
    const ModelHParams& hp = w_.hp;
    const int group = hp.n_head / hp.n_head_kv;
    Scratch& s = *s_;
    const int heads_at_once = std::min(group, kAttnHeads);
    const int tokens_at_once = kAttnQueries / heads_at_once;

    std::vector<Scratch::AttnItem>& items = s.attn_items;
    items.clear();
    s.v_late.assign(batch.tokens.size(), 0);
    // Decode items are a token's heads that share a KV head (each cache row converted once for
    // them) when that leaves an item per thread, else one head each; the heads get the same
    // bits either way. (One stream of the default model: 3 items on 2 threads beat 9 one-head
    // items by 3-6 %, the 2:1 split costing less than converting K and V per head; two streams
    // +1-4 %, +12-17 % at 512 positions.) The one-token entries of one sequence (a token and the draft
    // tokens a speculative step verifies, at its next positions over the same blocks) are one
    // item per KV head, up to kAttnQueries queries: every cache row is read and converted once
    // for all of them. Each query still gets the dots, softmax and P·V of a decode step at its
    // own position (positions past it get weight 0, which adds +0 to its partial rows).
    int n_decode = 0;
    for (const BatchSeq& sq : batch.seqs) n_decode += sq.n_tokens < 2 ? 1 : 0;
    const int decode_heads = n_decode * hp.n_head_kv >= pool_->n_threads() ? heads_at_once : 1;
    std::vector<std::array<int64_t, 3>>& order = s.attn_order;
    order.clear();
    s.attn_entries.clear();
    for (const BatchSeq& sq : batch.seqs) {
        if (sq.n_tokens >= 2) {
            for (int t = sq.i_begin; t < sq.i_begin + sq.n_tokens; t += tokens_at_once) {
                const int nt = std::min(tokens_at_once, sq.i_begin + sq.n_tokens - t);
                for (int h = 0; h < hp.n_head; h += group) {
                    for (int g0 = 0; g0 < group; g0 += heads_at_once) {
                        items.push_back({t, nt, h + g0, std::min(heads_at_once, group - g0)});
                    }
                }
            }
        } else {
            order.push_back({reinterpret_cast<int64_t>(sq.block_table), s.pos[sq.i_begin], sq.i_begin});
        }
    }
    std::sort(order.begin(), order.end());
    int n_runs = 0;
    for (size_t i = 0; i < order.size(); ++i) n_runs += i == 0 || order[i][0] != order[i - 1][0] ? 1 : 0;
    const int max_entries = kAttnQueries / heads_at_once;
    const int items_per_entry = hp.n_head / heads_at_once;
    for (size_t i = 0; i < order.size();) {
        size_t end = i + 1;
        while (end < order.size() && order[end][0] == order[i][0]) ++end;
        const int len = static_cast<int>(end - i);
        if (len == 1) {
            const int t = static_cast<int>(order[i][2]);
            s.v_late[t] = decode_heads == group ? 1 : 0;  // one item per KV head reads this V
            for (int h = 0; h < hp.n_head; h += decode_heads) {
                items.push_back({t, 1, h, std::min(decode_heads, hp.n_head - h)});
            }
        } else {
            // Enough items for the threads: a lone sequence's entries in a few chunks.
            const int want = (2 * pool_->n_threads() + n_runs * items_per_entry - 1) / (n_runs * items_per_entry);
            const int n_chunks = std::max((len + max_entries - 1) / max_entries, std::min(len, want));
            for (int c = 0; c < n_chunks; ++c) {
                const int e0 = static_cast<int>(s.attn_entries.size());
                const int b = len * c / n_chunks, e = len * (c + 1) / n_chunks;
                for (int k = b; k < e; ++k) {
                    s.attn_entries.push_back(static_cast<int32_t>(order[i + k][2]));
                    // One item per KV head reads all of the sequence's entries' V.
                    s.v_late[order[i + k][2]] = n_chunks == 1 && heads_at_once == group ? 1 : 0;
                }
                for (int h = 0; h < hp.n_head; h += group) {
                    for (int g0 = 0; g0 < group; g0 += heads_at_once) {
                        items.push_back({static_cast<int>(order[i + b][2]), 1, h + g0, std::min(heads_at_once, group - g0),
                                         e0, e - b});
                    }
                }
            }
        }
        i = end;
    }

    s.attn_decode_only = n_decode == static_cast<int>(batch.seqs.size());
}

// The KV runs each thread's share of layer il's decode attention items will read (the share
// StealingRanges::reset deals it), in the order it reads them, into its feed, spread over the
// `steps` block steps of the products it runs before that attention: K rows up to the item's
// last position, the V tiles of each block whole. Without it every block came from memory
// during the attention itself (the whole model's weights have passed since the step before),
// its misses in flight the limit: in a 16-sequence step made to read one sequence's cache for
// all 16, which stays in L1, the step was ~15 % faster at 64-128 positions.
// At most kMaxFeedLines (1 MiB) a thread; the lines that L2 cannot keep until the attention go
// to L3, still nearer than memory (a cap of 8192 gained less at 256 positions, 32768 no more);
// later items are asked for by attention() itself, as before. False when there is nothing.
//
// `ferrox bench -p 0 -n 64 -np 16 -d 0 / 64 / 256`, each step alternately with and without the
// feed in one process (medians of three runs' ratios): +5.2 / +6.5 / +6.5 %; 12 sequences at
// 256 positions +7 %, 24 at 128 +6.5 %; prefetcht1 instead of t0 +3.3 / +3.7 / +4.5 %. Fed
// during the QKV product alone (~30 us a layer) the lines did arrive (attention 4.3 -> 3.1 ms a
// step at 128 positions) but the product slowed as much (1.0 -> 2.1 ms).
// On the AVX2 kernels (FERROX_KERNELS_ISA=avx2) it is neutral (+0.5 %).
bool Model::plan_kv_prefetch(const Batch& batch, KvStorage& kv, int il, int64_t steps) {
    constexpr int64_t kMaxFeedLines = 16384;
    const ModelHParams& hp = w_.hp;
    const int hd = hp.head_dim;
    const int group = hp.n_head / hp.n_head_kv;
    const int bs = kv.geometry().block_size;
    const int n_swa = hp.is_swa(il) ? hp.n_swa : 0;
    Scratch& s = *s_;
    const std::vector<Scratch::AttnItem>& items = s.attn_items;
    const int nt = pool_->n_threads();
    const auto row_lines = [](int64_t bytes) { return static_cast<int32_t>((bytes + 63) / 64); };
    bool any = false;
    for (int i = 0; i < nt; ++i) {
        Scratch::KvFeed& f = s.kv_feeds[static_cast<size_t>(i)];
        f.runs.clear();
        f.lines.clear();
        int64_t b, e, lines = 0;
        ThreadPool::split(static_cast<int64_t>(items.size()), i, nt, 1, &b, &e);
        for (int64_t w = b; w < e && lines < kMaxFeedLines; ++w) {
            const Scratch::AttnItem& it = items[static_cast<size_t>(w)];
            const int kvh = it.h0 / group;
            const BatchSeq& sq = batch.seqs[s.seq[it.t0]];
            const Scratch::DecodeSpan span = s.decode_span(it, n_swa, bs);
            const int last_all = span.last;
            for (int p = span.p_begin; p < last_all; p += bs) {
                const int32_t blk = sq.block_table[p / bs];
                f.runs.push_back(reinterpret_cast<const char*>(kv.head_rows(false, blk, il, kvh, hd)));
                f.lines.push_back(row_lines(static_cast<int64_t>(std::min(bs, last_all - p)) * hd * 2));
                f.runs.push_back(reinterpret_cast<const char*>(kv.head_rows(true, blk, il, kvh, hd)));
                f.lines.push_back(row_lines(static_cast<int64_t>(bs) * hd * 2));
                lines += f.lines[f.lines.size() - 2] + f.lines.back();
            }
        }
        f.feed = PrefetchFeed{f.runs.data(), f.lines.data(), static_cast<int>(f.runs.size())};
        f.feed.per_step = static_cast<int>(std::min<int64_t>(64, (lines + steps - 1) / std::max<int64_t>(1, steps)));
        any = any || !f.runs.empty();
    }
    return any;
}

// The block steps of one thread's share of matmuls(jobs, n_jobs, n_tok) in the many-column
// kernels (each a weight block of 16 rows against up to 16 tokens).
int64_t Model::feed_steps(const MatJob* jobs, int n_jobs, int n_tok) const {
    int64_t steps = 0;
    for (int j = 0; j < n_jobs; ++j) steps += (jobs[j].w->ne[1] + 15) / 16 * (jobs[j].w->ne[0] / 32);
    return steps * ((n_tok + 15) / 16) / pool_->n_threads();
}

// Causal attention of every batch token over its own sequence's cached positions.
// Gemma 2 soft-caps each query's scores (attn_softcap) between the dots and the softmax.
//
// Q and the softmax weights are rounded to F16 before they meet the F16 cache, and the sums run
// in ggml's orders (attention_f16.h): a sequence advancing by one token uses the decode order, a
// chunk of two or more the prefill order, as llama.cpp does.
//
// Work items: a decode token's query heads that share a KV head (or one head each, when that
// leaves too few items), or a sequence's one-token entries (its token and the draft tokens a
// speculative step verifies) with the heads of one KV head; a prompt chunk's query heads that
// share a KV head (at most kAttnHeads at once), with as many of its tokens as make kAttnQueries
// queries. Such an item reads each cache row once for all its tokens and heads: the K row is
// converted once for every dot; decode P·V converts each slice of the transposed V once for all
// the item's queries, prompt P·V converts the V of a chunk of positions into floats for
// every (token, head) to accumulate from. Each (token, head) still gets its own dots, softmax
// and P·V in its own order, so the bits do not depend on the items. Decode items are dealt in
// contiguous shares with stealing; prompt items in turn (a causal prompt's later tokens attend
// to more positions, and a contiguous split gave the last thread 3/4 of the work at 2 threads).
void Model::attention(const Batch& batch, KvStorage& kv, int il) {
    if (kv.geometry().type == KvType::kQ8_0) return attention_q8_0(batch, kv, il);
    const ModelHParams& hp = w_.hp;
    const int hd = hp.head_dim;
    const int group = hp.n_head / hp.n_head_kv;
    const int bs = kv.geometry().block_size;
    const float scale = hp.kq_scale;
    const int n_swa = hp.is_swa(il) ? hp.n_swa : 0;  // 0: the whole causal past
    const float cap = hp.attn_logit_softcap;          // 0: no soft-capping (one test per query)
    const std::vector<float>& sinks = w_.layers[il].attn_sinks;  // empty: none (gpt-oss has them)
    const auto sink = [&](int h) { return sinks.empty() ? -std::numeric_limits<float>::infinity() : sinks[h]; };
    const AttnF16Kernels& fk = attn_f16_kernels();
    Scratch& s = *s_;
    // F16 cache slabs are head-major (kv_storage.h): one KV head's rows of a block are
    // consecutive, hd elements apart.
    const int stride = hd;
    const std::vector<Scratch::AttnItem>& items = s.attn_items;
    const bool decode_only = s.attn_decode_only;
    if (decode_only) s.attn_ranges->reset(static_cast<int64_t>(items.size()));
    pool_->run([&](int i_thread, int n_threads) {
        const int64_t ss = s.score_stride;
        float* scores = s.scores.data() + static_cast<size_t>(i_thread) * kAttnQueries * ss;
        float* acc = s.attn_acc.data() + static_cast<size_t>(i_thread) * kAccRowsPerThread * hd;
        float* qh = s.attn_q.data() + static_cast<size_t>(i_thread) * kAttnQueries * hd;
        const uint16_t** vblocks = s.attn_rows.data() + static_cast<size_t>(i_thread) * opts_.max_ctx;
        // Decode steps: each thread takes a contiguous share of the items, so a sequence's KV
        // heads (adjacent in the cache rows) mostly go to one core one after another, then
        // steals the rest of the others' shares for balance (+12 % at 16 streams of 512 tokens
        // against items dealt in turn). Prompt items, whose cost grows along the list, are dealt
        // in turn.
        size_t w = i_thread;
        for (int64_t wi = 0;; w += n_threads) {
            if (decode_only) {
                if ((wi = s.attn_ranges->next(i_thread)) < 0) break;
                w = static_cast<size_t>(wi);
            } else if (w >= items.size()) {
                break;
            }
            const Scratch::AttnItem& it = items[w];
            const int kvh = it.h0 / group;
            const BatchSeq& sq = batch.seqs[s.seq[it.t0]];
            const int last_kv = s.pos[it.t0 + it.nt - 1] + 1;  // causal: positions [0, pos]
            // A token at position p sees [window_begin(p), p]. Scores are indexed by absolute
            // position and the loops start at a block (prompt: kVChunk) boundary at or before
            // the item's first window, with zero weights below each token's window: a zero
            // weight adds +0 to every partial sum, so the bits are those of a full-length
            // masked pass (llama.cpp's), and blocks wholly before the window are not read.
            const auto window_begin = [&](int pos) { return n_swa > 0 ? std::max(0, pos + 1 - n_swa) : 0; };
            if (sq.n_tokens < 2) {
                // Decode: ne tokens of one sequence (in position order), it.nh heads of one KV
                // head; query (entry e, head g) is number e * nh + g, its scores at
                // scores + (e * nh + g) * score_stride.
                const Scratch::DecodeSpan span = s.decode_span(it, n_swa, bs);
                const int ne = span.ne, nh = it.nh, nq = ne * nh;
                const int* ents = span.ents;
                const int last_all = span.last;
                const int p_begin = span.p_begin;
                // The cache rows were last read a step ago and are rarely still in cache: each
                // block's K rows are asked for a block ahead, its V during its dots (P·V reads V
                // one dimension pair at a time, a line per tile: from memory that would be a
                // strided walk).
                const int v_tile = kv_v_tile(bs);
                const auto ahead = [&](bool v, int p) {  // the block at position p, if any
                    if (p >= last_all) return;
                    const uint8_t* b = kv.head_rows(v, sq.block_table[p / bs], il, kvh, hd);
                    const int n = std::min(bs, last_all - p);
                    prefetch_rows(b, hd * sizeof(uint16_t), v ? (n + v_tile - 1) / v_tile * v_tile : n, hd * sizeof(uint16_t));
                };
                ahead(false, p_begin);
                // The next item's first K block (the next in this thread's share, unless stolen).
                if (decode_only && w + 1 < items.size()) {
                    const Scratch::AttnItem& nx = items[w + 1];
                    const BatchSeq& ns = batch.seqs[s.seq[nx.t0]];
                    const Scratch::DecodeSpan n = s.decode_span(nx, n_swa, bs);
                    prefetch_rows(kv.head_rows(false, ns.block_table[n.p_begin / bs], il, nx.h0 / group, hd),
                                  hd * sizeof(uint16_t), std::min(bs, n.last - n.p_begin), hd * sizeof(uint16_t));
                }
                for (int e = 0; e < ne; ++e) {
                    const float* q = s.q.data() + static_cast<size_t>(ents[e]) * hp.q_dim() + it.h0 * hd;
                    fk.round_f16_row(q, qh + e * nh * hd, nh * hd);
                }
                for (int p = p_begin; p < last_all; p += bs) {
                    ahead(false, p + bs);
                    ahead(true, p);
                    const auto* krow =
                        reinterpret_cast<const uint16_t*>(kv.head_rows(false, sq.block_table[p / bs], il, kvh, hd));
                    fk.dots_decode_group(qh, nq, krow, stride, std::min(bs, last_all - p), hd, scale, scores + p,
                                         static_cast<int>(ss));
                }
                for (int e = 0; e < ne; ++e) {
                    const int own_last = s.pos[ents[e]] + 1;
                    const int first_kv = window_begin(own_last - 1);
                    for (int g = 0; g < nh; ++g) {
                        float* sc = scores + static_cast<size_t>(e * nh + g) * ss;
                        window_softmax(sc, first_kv, own_last, cap, sink(it.h0 + g));
                        std::fill(sc + p_begin, sc + first_kv, 0.0f);
                        std::fill(sc + own_last, sc + last_all, 0.0f);
                    }
                }
                // P·V over the transposed V blocks, the weights rounded to F16 once (as ggml
                // converts them for its F16 product).
                for (int e = 0; e < ne; ++e) {
                    if (s.v_late[ents[e]]) write_v_f16(kv, batch, il, ents[e], kvh);
                }
                for (int p = p_begin; p < last_all; p += bs) {
                    vblocks[(p - p_begin) / bs] =
                        reinterpret_cast<const uint16_t*>(kv.head_rows(true, sq.block_table[p / bs], il, kvh, hd));
                }
                float* outs[kAttnQueries];
                for (int e = 0; e < ne; ++e) {
                    for (int g = 0; g < nh; ++g) {
                        float* sc = scores + static_cast<size_t>(e * nh + g) * ss;
                        fk.round_f16_row(sc + p_begin, sc + p_begin, last_all - p_begin);
                        outs[e * nh + g] = s.att.data() + static_cast<size_t>(ents[e]) * hp.q_dim() + (it.h0 + g) * hd;
                    }
                }
                fk.pv_decode_t(scores, static_cast<int>(ss), nq, vblocks, bs, p_begin, last_all, outs, hd);
                continue;
            }
            // Prompt: query (token i, head g) is number i * nh + g, its scores at
            // scores + (i * nh + g) * score_stride and its 8 partial P·V rows at acc + (i * nh + g) * 8 * hd.
            const int nh = it.nh, nq = it.nt * nh;
            for (int i = 0; i < it.nt; ++i) {
                const float* q = s.q.data() + static_cast<size_t>(it.t0 + i) * hp.q_dim() + it.h0 * hd;
                fk.round_f16_row(q, qh + i * nh * hd, nh * hd);
            }
            // The dots up to the last token's position; the earlier tokens ignore the few past theirs.
            const int v_begin = window_begin(s.pos[it.t0]) / kVChunk * kVChunk;
            const int p_begin = v_begin / bs * bs;
            for (int p = p_begin; p < last_kv; p += bs) {
                const auto* krow =
                    reinterpret_cast<const uint16_t*>(kv.head_rows(false, sq.block_table[p / bs], il, kvh, hd));
                fk.dots_prefill_group(qh, nq, krow, stride, std::min(bs, last_kv - p), hd, scale, scores + p,
                                      static_cast<int>(ss));
            }
            for (int i = 0; i < it.nt; ++i) {
                const int pos = s.pos[it.t0 + i];
                const int first_kv = window_begin(pos);
                for (int g = 0; g < nh; ++g) {
                    float* sc = scores + static_cast<size_t>(i * nh + g) * ss;
                    window_softmax(sc, first_kv, pos + 1, cap, sink(it.h0 + g));
                    std::fill(sc + v_begin, sc + first_kv, 0.0f);
                }
            }
            // P·V a chunk of kVChunk positions at a time (a multiple of 8, so position p goes to
            // partial row p % 8 in every chunk): the chunk's V (transposed in the cache) is converted into floats
            // once, then every query accumulates its 8 partial rows from them.
            std::fill(acc, acc + static_cast<size_t>(nq) * kPrefillRows * hd, 0.0f);
            float* vt = acc + static_cast<size_t>(kAttnQueries) * kPrefillRows * hd;
            const uint16_t* cols[kVChunk];
            for (int p0 = v_begin; p0 < last_kv; p0 += kVChunk) {
                const int m = std::min(kVChunk, last_kv - p0);
                for (int j = 0; j < m; ++j) {
                    const int p = p0 + j;
                    cols[j] = reinterpret_cast<const uint16_t*>(kv.head_rows(true, sq.block_table[p / bs], il, kvh, hd)) +
                              kv_v_offset(bs, hd, p % bs, 0);
                }
                fk.gather_vt(cols, kv_v_tile(bs), m, hd, vt, kVChunk);
                for (int i = 0; i < it.nt; ++i) {
                    const int mi = std::min(m, s.pos[it.t0 + i] + 1 - p0);
                    if (mi <= 0) continue;
                    for (int g = 0; g < nh; ++g) {
                        const int k = i * nh + g;
                        fk.accumulate_t(scores + static_cast<size_t>(k) * ss + p0, vt, kVChunk, mi,
                                        acc + static_cast<size_t>(k) * kPrefillRows * hd, hd);
                    }
                }
            }
            for (int i = 0; i < it.nt; ++i) {
                for (int g = 0; g < nh; ++g) {
                    fk.reduce_prefill_t(acc + static_cast<size_t>(i * nh + g) * kPrefillRows * hd,
                                        s.att.data() + static_cast<size_t>(it.t0 + i) * hp.q_dim() + (it.h0 + g) * hd, hd);
                }
            }
        }
    });
}

void Model::attention_q8_0(const Batch& batch, KvStorage& kv, int il) {
    const ModelHParams& hp = w_.hp;
    const int n_tok = static_cast<int>(batch.tokens.size());
    const int hd = hp.head_dim;
    const int group = hp.n_head / hp.n_head_kv;
    const int bs = kv.geometry().block_size;
    const size_t head_bytes = kv.head_bytes(hd);
    const float scale = hp.kq_scale;
    const int n_swa = hp.is_swa(il) ? hp.n_swa : 0;
    const float cap = hp.attn_logit_softcap;
    const std::vector<float>& sinks = w_.layers[il].attn_sinks;
    const auto sink = [&](int h) { return sinks.empty() ? -std::numeric_limits<float>::infinity() : sinks[h]; };
    const QuantKernels& kq = quant_kernels(DType::kQ8_0);
    Scratch& s = *s_;
    pool_->run([&](int i_thread, int n_threads) {
        float* scores = s.scores.data() + static_cast<size_t>(i_thread) * opts_.max_ctx;
        float* acc = s.attn_acc.data() + static_cast<size_t>(i_thread) * kAccRowsPerThread * hd;
        float* vbuf = acc + hd;
        uint8_t qq[kMaxHeadDim / 32 * 34];
        const int64_t n_items = static_cast<int64_t>(n_tok) * hp.n_head;
        for (int64_t w = i_thread; w < n_items; w += n_threads) {  // in turn, as attention()
            const int t = static_cast<int>(w / hp.n_head);
            const int h = static_cast<int>(w % hp.n_head);
            const int kvh = h / group;
            const BatchSeq& sq = batch.seqs[s.seq[t]];
            const int n_kv = s.pos[t] + 1;
            const int first_kv = n_swa > 0 ? std::max(0, n_kv - n_swa) : 0;
            kq.quantize_act_row(s.q.data() + static_cast<size_t>(t) * hp.q_dim() + h * hd, qq, hd);
            for (int p = first_kv; p < n_kv; ++p) {
                const uint8_t* krow = kv.head_rows(false, sq.block_table[p / bs], il, kvh, hd) + (p % bs) * head_bytes;
                scores[p] = kq.vec_dot(hd, krow, qq) * scale;
            }
            window_softmax(scores, first_kv, n_kv, cap, sink(h));
            std::fill(acc, acc + hd, 0.0f);
            for (int p = first_kv; p < n_kv; ++p) {
                const uint8_t* vrow = kv.head_rows(true, sq.block_table[p / bs], il, kvh, hd) + (p % bs) * head_bytes;
                kq.dequantize_row(vrow, vbuf, hd);
                const float sp = scores[p];
                for (int d = 0; d < hd; ++d) acc[d] += sp * vbuf[d];
            }
            std::copy(acc, acc + hd, s.att.data() + static_cast<size_t>(t) * hp.q_dim() + h * hd);
        }
    });
}

}  // namespace ferrox
