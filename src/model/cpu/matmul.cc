// The CPU model's matrix products: a step's activations quantized once per input and type,
// then every matrix of a call applied to them by the packed many-column kernels or row dots,
// its tiles shared between threads by work stealing.
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

// Bytes between a matmul's activation rows: a row's bytes rounded up to 64, plus 64 where that
// is a multiple of 4 KiB. A prompt kernel reads several rows side by side; at a 4 KiB multiple
// (F16's F32 rows of 2048 elements are 8 KiB) they would all fall in the same L1 sets.
int64_t act_row_stride(int64_t row_bytes) {
    const int64_t s = (row_bytes + 63) / 64 * 64;
    return s % 4096 == 0 ? s + 64 : s;
}

// Each distinct (input, activation type) of a call to matmuls: its quantized rows' place in the
// activation scratch.
Model::ActSlots Model::act_slots(const MatJob* jobs, int n_jobs, int n_tok) const {
    CHECK(n_jobs >= 1 && n_jobs <= kMaxMatJobs);
    ActSlots a;
    uint8_t* free_space = s_->act.data();
    for (int j = 0; j < n_jobs; ++j) {
        const QuantKernels& kq = quant_kernels(jobs[j].w->type);
        const bool packed = jobs[j].w->packed8;
        const DType at = packed ? kq.packed_act_type : kq.act_type;
        int k = 0;
        const auto quantize = packed ? kq.quantize_packed_act_row : kq.quantize_act_row;
        // Keyed by the quantizer too: F16's packed rows and F32's rows are both F32, not the same numbers.
        while (k < a.n_slots &&
               !(a.slots[k].x == jobs[j].x && a.slots[k].act_type == at && a.slots[k].quantize == quantize))
            ++k;
        if (k == a.n_slots) {
            const int64_t n_in = jobs[j].w->ne[0];
            const int64_t rb = act_row_stride(dtype_row_bytes(at, n_in));
            CHECK(free_space + rb * n_tok <= s_->act.data() + s_->act.size());
            a.slots[a.n_slots++] = {jobs[j].x, at, n_in, rb, free_space, quantize};
            free_space += (rb * n_tok + 63) / 64 * 64;
        }
        a.slot_of[j] = k;
    }
    return a;
}

void Model::quantize_inputs(const MatJob* jobs, int n_jobs, int n_tok, int t0, int t1) {
    const ActSlots a = act_slots(jobs, n_jobs, n_tok);
    for (int k = 0; k < a.n_slots; ++k) {
        const ActSlot& sl = a.slots[k];
        for (int64_t t = t0; t < t1; ++t) sl.quantize(sl.x + t * sl.n_in, sl.data + t * sl.row_bytes, sl.n_in);
    }
}

// Several products y_j (n_tok, n_out_j) = x_j (n_tok, n_in_j) · W_j^T in one parallel region
// (one barrier, not one per matrix: on a busy machine every barrier may wait for a
// descheduled thread). Each distinct (input, activation type) is quantized once (unless the
// caller did, see quantize_inputs), on this thread for a few tokens and in parallel for more;
// then threads split every matrix's rows, each thread walking 16-row tiles for every token so
// a tile is read from memory once per call.
void Model::matmuls(const MatJob* jobs, int n_jobs, int n_tok, bool rows_are_tokens, bool quantized, bool kv_feed) {
    const ActSlots a = act_slots(jobs, n_jobs, n_tok);
    const ActSlot* slots = a.slots;
    const int* slot_of = a.slot_of;
    if (!quantized) {
        if (n_tok <= 8) {
            quantize_inputs(jobs, n_jobs, n_tok, 0, n_tok);
        } else {
            pool_->run([&](int i_thread, int n_threads) {
                int64_t t0, t1;
                ThreadPool::split(n_tok, i_thread, n_threads, 1, &t0, &t1);
                quantize_inputs(jobs, n_jobs, n_tok, static_cast<int>(t0), static_cast<int>(t1));
            });
        }
    }
    // Decode and small batches (one token chunk, every matrix packed): memory-bound, each
    // matrix read once. The 64-row tiles of all the jobs, in order, are dealt out as contiguous
    // shares (long streams for the prefetchers); a thread that is done takes tiles from the
    // back of the others' shares, so a core the machine slowed down for a while does not hold
    // the other at the barrier. Who computes a tile changes none of its bits.
    constexpr int64_t kPackedTile = 64;
    // A batch of 3+ tokens goes through the many-column kernels: tiles twice as long measured
    // faster (`ferrox bench -np 16` +5 %, -np 8 +4 %; 4x as long lost the balance of the
    // few-tile matrices). Not for the per-call column tables: building those once per matmul
    // instead gained nothing; longer weight runs per call, it seems.
    const int64_t steal_tile = n_tok >= 3 ? 2 * kPackedTile : kPackedTile;
    // Claimed in units of 16 rows: a whole tile at a time, then shorter runs at the end of a
    // share (StealingRanges::next_span), so the threads finish closer together; for one or two
    // tokens (16 rows are ~0.1 us of work, less than what the finer claims cost: single-stream
    // decode lost 3-4 %) whole tiles only.
    const int64_t steal_unit = n_tok >= 3 ? 16 : steal_tile;
    constexpr int kPackedTokChunk = 64;
    bool steal = n_tok <= kPackedTokChunk && pool_->n_threads() > 1;
    int64_t unit_begin[kMaxMatJobs + 1] = {0};
    for (int j = 0; j < n_jobs; ++j) {
        steal = steal && jobs[j].w->packed8;
        unit_begin[j + 1] = unit_begin[j] + (jobs[j].w->ne[1] + steal_unit - 1) / steal_unit;
    }
    if (steal) {
        s_->tiles->reset(unit_begin[n_jobs]);
        pool_->run([&](int i_thread, int) {
            if (kv_feed) t_prefetch_feed = &s_->kv_feeds[i_thread].feed;
            struct Unset {
                ~Unset() { t_prefetch_feed = nullptr; }
            } unset;
            for (int64_t ub, ue; s_->tiles->next_span(i_thread, steal_tile / steal_unit, &ub, &ue);) {
                for (int j = 0; j < n_jobs; ++j) {  // the span's part in each job
                    const int64_t b = std::max(ub, unit_begin[j]), e = std::min(ue, unit_begin[j + 1]);
                    if (b >= e) continue;
                    const TensorView& w = *jobs[j].w;
                    const ActSlot& sl = slots[slot_of[j]];
                    const int64_t r = (b - unit_begin[j]) * steal_unit;
                    const int64_t nr = std::min((e - unit_begin[j]) * steal_unit, w.ne[1]) - r;
                    packed_gemm(quant_kernels(w.type))(sl.n_in, static_cast<const uint8_t*>(w.data) + r * w.row_bytes(),
                                                       nr, sl.data, sl.row_bytes, n_tok, jobs[j].y + r, w.ne[1]);
                }
            }
        });
        return;
    }
    pool_->run([&](int i_thread, int n_threads) {
        constexpr int64_t kTile = 16;
        for (int j = 0; j < n_jobs; ++j) {
            const TensorView& w = *jobs[j].w;
            const QuantKernels& kq = quant_kernels(w.type);
            const ActSlot& sl = slots[slot_of[j]];
            const int64_t n_out = w.ne[1];
            const int64_t w_row = w.row_bytes();
            const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
            float* y = jobs[j].y;
            int64_t r0, r1;
            ThreadPool::split(n_out, i_thread, n_threads, kTile, &r0, &r1);
            if (w.packed8) {
                // Rows interleaved by 8 (place_weights); r0, r1 and every tile are multiples of 8.
                // One kernel for decode, batches and prompts: its per-output order does not
                // depend on the tile, so a sequence's bits do not depend on its batch. Tokens in
                // chunks so their activations stay in cache while the thread's rows stream past;
                // F16's kernel blocks the elements itself and keeps a 64-row tile's chunk in L2
                // for every token, so it takes them all (pp512 on the 1B F16 model ~+12 %, so the
                // weights are read once, not once per 64 tokens).
                CHECK(kq.gemm_packed8 != nullptr);
                // F16 prompts (compute-bound, 2 bytes a weight) split tokens between threads
                // rather than rows: each thread reads every weight (cheap against the arithmetic
                // from 64 tokens a thread on) and half the activations, with no imbalance
                // between the matrices' row ranges. pp512 on the 1B F16 model, 2 threads: ~+8 %.
                int tok_begin = 0, tok_end = n_tok;
                if (w.type == DType::kF16 && n_threads > 1 && n_tok >= 64 * n_threads) {
                    int64_t a, b;
                    ThreadPool::split(n_tok, i_thread, n_threads, 6, &a, &b);
                    tok_begin = static_cast<int>(a);
                    tok_end = static_cast<int>(b);
                    r0 = 0;
                    r1 = n_out;
                }
                const int tok_chunk = w.type == DType::kF16 ? n_tok : kPackedTokChunk;
                for (int t0 = tok_begin; t0 < tok_end; t0 += tok_chunk) {
                    const int nt = std::min(tok_chunk, tok_end - t0);
                    for (int64_t r = r0; r < r1; r += kPackedTile) {
                        const int64_t nr = std::min(kPackedTile, r1 - r);
                        packed_gemm(kq)(sl.n_in, wdata + r * w_row, nr, sl.data + t0 * sl.row_bytes, sl.row_bytes,
                                        nt, y + static_cast<int64_t>(t0) * n_out + r, n_out);
                    }
                }
                continue;
            }
            // (A type whose llama.cpp order is its vec_dot's keeps the prompt tiles, which give
            // vec_dot's bits.)
            const bool x86_tiles = kq.vec_dot_tile && !kq.vec_dot_rows_x86_batch && n_tok >= 4;
            if (opts_.ggml_order && kq.vec_dot_rows_x86 && !x86_tiles) {
                // llama.cpp's order, as it computes each sequence batched alone: its batch kernel
                // (if the type has one) for the first rows of a long enough run of a sequence's
                // tokens, its other kernel for the rest (QuantKernels::vec_dot_rows_x86).
                const auto batch_kernel = [&](int t) {
                    if (!kq.vec_dot_rows_x86_batch || !rows_are_tokens) return false;
                    const int n = s_->run_len[t];
                    return n >= kq.x86_batch_from && s_->run_at[t] < n - n % kq.x86_batch_group;
                };
                for (int64_t r = r0; r < r1; r += kTile) {
                    const int64_t nr = std::min(kTile, r1 - r);
                    for (int t = 0; t < n_tok; ++t) {
                        (batch_kernel(t) ? kq.vec_dot_rows_x86_batch : kq.vec_dot_rows_x86)(
                            sl.n_in, wdata + r * w_row, w_row, nr, sl.data + t * sl.row_bytes, y + t * n_out + r);
                    }
                }
                continue;
            }
            if (kq.vec_dot_tile && n_tok >= 4) {
                // Prompt: tiles of rows x tokens, a chunk of tokens at a time so its activations
                // stay in cache while the thread's rows stream past.
                constexpr int kTokChunk = 64;
                for (int t0 = 0; t0 < n_tok; t0 += kTokChunk) {
                    const int nt = std::min(kTokChunk, n_tok - t0);
                    for (int64_t r = r0; r < r1; r += kTile) {
                        const int64_t nr = std::min(kTile, r1 - r);
                        kq.vec_dot_tile(sl.n_in, wdata + r * w_row, w_row, nr, sl.data + t0 * sl.row_bytes,
                                        sl.row_bytes, nt, y + static_cast<int64_t>(t0) * n_out + r, n_out);
                    }
                }
                continue;
            }
            for (int64_t r = r0; r < r1; r += kTile) {
                const int64_t nr = std::min(kTile, r1 - r);
                for (int t = 0; t < n_tok; ++t) {
                    kq.vec_dot_rows(sl.n_in, wdata + r * w_row, w_row, nr, sl.data + t * sl.row_bytes,
                                    y + t * n_out + r);
                }
            }
        }
    });
}

}  // namespace ferrox
