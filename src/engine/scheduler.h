#pragma once
// The scheduler: the waiting and running queues, admission, KV growth and preemption, and the
// main entries of each step's batch. Pure policy over the block manager: no thread, no clock
// (the caller passes the time), no model, no bytes, so its tests drive it step by step.
//
// Admission: first come, first served, up to n_parallel running, when the pool has room for the
// prompt, less what the prefix cache already holds, plus one token, and one block more for each
// running sequence (they grow as they decode, and a newcomer must not preempt them at once).
// Running sequences take one block at a time as they grow; when the pool is exhausted the
// sequence admitted last is preempted: its blocks go back (the full ones stay in the prefix
// cache), and it waits at the head of the queue to recompute its tokens and continue. The
// recomputation takes what is still cached, computes the rest of the prompt in chunks and
// replays the generated tokens one per step, so a preempted sequence continues exactly as it
// would have.
//
// Prompt logprobs (GenerationParams::prompt_logprobs): the request's prompt chunks ask for a
// logits row per token (BatchSeq::all_logits), at most max_prompt_rows a step over all such
// chunks, and it takes no prefix-cache match (cached positions have no logits).
//
// Prefix cache: a match always leaves at least two prompt tokens to compute, and prompt chunks
// are never a single token, so the first token's logits come from a chunk of two or more
// tokens, whose attention sums in the same order as a cold prefill: greedy output is the same
// alone, batched or from a warm cache. Blocks holding generated tokens were computed one token
// per step (the decode order), so a later prompt that repeats those tokens (the next turn of a
// chat) reuses KV that differs from a cold prefill's by rounding, as llama.cpp's prompt cache does.

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "engine/batch_plan.h"
#include "engine/block_manager.h"
#include "engine/metrics.h"
#include "engine/prefix_store.h"
#include "engine/sequence.h"

namespace ferrox {

struct SchedulerConfig {
    int n_parallel = 4;          // sequences running at once
    int max_batch_tokens = 512;  // tokens per step (decode tokens + prompt chunks + drafts)
    bool prefix_cache = true;
    // Logits rows per step for the prompt chunks of requests that want their prompt's logprobs
    // (a row per token): such chunks are cut to fit (EngineCore sizes its logits buffer for it).
    int max_prompt_rows = 64;
};

class Scheduler {
public:
    Scheduler(const SchedulerConfig& cfg, BlockManager& blocks, EngineMetrics& metrics)
        : cfg_(cfg), blocks_(blocks), metrics_(metrics) {}

    // Queues a submitted sequence (already counted in metrics.n_waiting).
    void add(std::unique_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }

    struct Ended {
        std::unique_ptr<Sequence> seq;
        FinishReason why;
    };
    // Takes out the sequences, waiting or running, whose request was cancelled or ran past its
    // time limit at `now` (kLength: the answer so far), still holding their blocks.
    std::vector<Ended> take_ended(std::chrono::steady_clock::time_point now);
    // Admits waiting sequences, makes room for every decoding sequence's next token (preempting
    // the newest while the pool has none), and writes the step's main entries to `plan`:
    // decoding sequences first (one token each), then prompt chunks in admission order. False
    // when nothing runs.
    bool schedule(BatchPlan* plan);
    // After the step: sequences that finished leave the running queue.
    void update();

    // Gauges of the queues and the pool.
    void update_gauges();
    bool has_work() const { return !waiting_.empty() || !running_.empty(); }
    const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
    const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
    // Every sequence, running then waiting (shutdown ends them all).
    std::vector<std::unique_ptr<Sequence>> take_all();

    // Publishes the sequence's newly completed blocks to the prefix cache (and offers them to
    // the second tier, when there is one).
    void publish_blocks(Sequence& s);
    // The prefix cache's further tiers (prefix_store.h), or null.
    void set_store(PrefixStore* store) { store_ = store; }
    bool caching(const Sequence& s) const { return s.caching(cfg_.prefix_cache); }

private:
    void admit();
    // The prefix cache's blocks for s's leading tokens (retained), as admission may take them.
    std::vector<int32_t> match(Sequence& s);
    void fetch_stored(const Sequence& s, int max_blocks, std::vector<int32_t>* matched);
    void start(Sequence& s, const std::vector<int32_t>& matched);
    bool grow(Sequence& s);
    void preempt(Sequence& s);
    // The size of s's prompt chunk in a step with `budget` tokens left; 0 when none fits.
    static int chunk_size(const Sequence& s, int budget);

    SchedulerConfig cfg_;
    BlockManager& blocks_;
    PrefixStore* store_ = nullptr;
    EngineMetrics& metrics_;
    std::deque<std::unique_ptr<Sequence>> waiting_;
    std::vector<std::unique_ptr<Sequence>> running_;
    uint64_t next_order_ = 0;  // admission order, for choosing whom to preempt
};

}  // namespace ferrox
