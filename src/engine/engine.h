#pragma once
// The engine: one thread that owns the model's forward pass and the KV pool, serving many
// requests at once by continuous batching. HTTP threads reach it only through submit() (a
// request queue) and the per-request event sink; cancellation is a flag the engine checks
// between steps.
//
// Each step the scheduler takes every running sequence's next token plus prefill chunks of
// newly admitted prompts, under a token budget (chunked prefill: a long prompt does not stall
// the streams already running), runs one batched forward, samples, and emits events.
//
// KV: a request is admitted (first come, first served, up to n_parallel at once) when the pool
// has room for its prompt, less what the prefix cache already holds, plus one token. Running
// sequences then take one block at a time as they grow; when the pool is exhausted, the
// sequence admitted last is preempted: its blocks go back (the full ones stay in the prefix
// cache), and it waits at the head of the queue to recompute its tokens and continue. The
// recomputation takes what is still cached, computes the rest of the prompt in chunks and
// replays the generated tokens one per step, so a preempted sequence continues exactly as it
// would have.
//
// Full blocks of every sequence (prompt and generated tokens) are published to the prefix
// cache as soon as they are computed, so a request that repeats an earlier prefix (a
// multi-turn chat, a shared system prompt) computes only the rest. The match always leaves at
// least two prompt tokens to compute, so the first token's logits come from a chunk of two or
// more tokens, whose attention sums in the same order as a cold prefill: greedy output is the
// same alone, batched or from a warm cache. (Prefill chunks are never a single token either.)
// Blocks holding generated tokens were computed one token per step (the decode order), so a
// later prompt that repeats those tokens (the next turn of a chat) reuses KV that differs from
// a cold prefill's by rounding, as llama.cpp's prompt cache does.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/histogram.h"
#include "engine/loaded_model.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace ferrox {

struct EngineOptions {
    int n_parallel = 4;           // sequences generating at once
    int n_ctx = 4096;             // KV pool capacity, in tokens, shared by all sequences
    int64_t kv_budget_mib = 0;    // when > 0: the pool's size in MiB (replaces n_ctx)
    KvType kv_type = KvType::kF16;
    bool prefix_cache = true;     // false: no request shares KV blocks
    int block_size = 32;          // KV block size, in tokens
    int max_batch_tokens = 512;   // tokens per forward step (decode tokens + prefill chunks)
    int max_queue = 64;           // waiting requests beyond this are refused (HTTP 429)
    // Speculative decoding by prompt lookup: a decoding sequence whose last spec_ngram (down to
    // 2) tokens occurred earlier in its prompt or output drafts the tokens that followed them,
    // up to draft_max, and the step verifies them with the sequence's own next token. Each
    // draft position is computed as a decode step of its own (a one-token entry of the batch
    // over the same KV blocks), so its logits are bit for bit those of plain decoding, and the
    // sampler draws every position in order as it would have: the output is the same tokens
    // with and without speculation, greedy or sampled, seeded or not. How many tokens a
    // sequence drafts is decided per step from its acceptance so far and the measured cost of
    // a batch token (engine.cc, draft_length). spec_ngram 0 or draft_max 0: no speculation.
    // With a draft model (Engine::create's `draft`), the drafts come from it instead: each
    // drafting sequence keeps its own KV in a pool of the draft model (as many tokens as the
    // target's pool), catches up on the tokens it has not seen, and proposes its greedy next
    // tokens one batched draft step at a time; verification is the same as for prompt lookup,
    // so the output is again exactly the target's. The number of draft tokens is priced with
    // the measured cost of draft steps added.
    int spec_ngram = 3;
    int draft_max = 8;
    // Verify every draft token the lookup finds, unpriced (tests and measurements).
    bool spec_unpriced = false;
};

class Engine {
public:
    // `draft`: a smaller model of the same vocabulary (ids and texts; llama.cpp's rule of at
    // most 128 extra ids) that drafts for speculative decoding; null: prompt lookup.
    static Expected<std::unique_ptr<Engine>> create(std::shared_ptr<LoadedModel> model,
                                                    const EngineOptions& opts,
                                                    std::shared_ptr<LoadedModel> draft = nullptr);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Any thread. Fails with kInvalidArgument (prompt empty, or prompt + max_tokens beyond
    // the context ceiling: the message gives both numbers) or kResourceExhausted (queue full).
    Expected<std::shared_ptr<RequestHandle>> submit(std::vector<int32_t> prompt,
                                                    GenerationParams params, EventSink sink);

    // The longest context (prompt + generated tokens) one request can ever get.
    int context_ceiling() const { return ceiling_; }
    int block_size() const { return opts_.block_size; }
    const EngineOptions& options() const { return opts_; }
    // Blocks of the KV pool and bytes of one block.
    int kv_blocks() const { return kv_->n_blocks(); }
    size_t kv_block_bytes() const { return kv_->geometry().block_bytes(); }
    const LoadedModel& model() const { return *model_; }
    // The draft model (null without one) and the bytes of its KV pool.
    const LoadedModel* draft_model() const { return draft_.get(); }
    size_t draft_kv_bytes() const { return draft_kv_ ? draft_kv_->geometry().block_bytes() * draft_kv_->n_blocks() : 0; }
    std::shared_ptr<LoadedModel> model_ptr() const { return model_; }

    struct Stats {
        int n_running = 0, n_waiting = 0;
        int kv_blocks_used = 0, kv_blocks_total = 0, kv_blocks_cached = 0;
        uint64_t n_prompt_tokens = 0, n_generated_tokens = 0, n_requests = 0;
        uint64_t prefix_lookups = 0, prefix_lookup_tokens = 0, prefix_hit_tokens = 0;
        uint64_t n_preemptions = 0;
        // Speculative decoding: draft tokens verified, and those accepted (emitted without a
        // step of their own).
        uint64_t spec_drafted = 0, spec_accepted = 0;
        // With a draft model: the acceptance rate a new request starts from (0 without one).
        double draft_model_rate = 0;
        // With a draft model: tokens whose draft KV came from the draft pool's prefix cache.
        uint64_t draft_prefix_hit_tokens = 0;
        // Wall time of the engine loop's iterations that ran a forward pass (admission,
        // batch building, the forward, sampling, detokenizing and the events), and of those
        // forward passes alone: 1 - forward / step is the engine's per-step overhead.
        double step_seconds = 0, forward_seconds = 0;
        uint64_t n_steps = 0;
    };
    Stats stats() const;
    // Prometheus text for /metrics: gauges, counters and the latency histograms.
    std::string prometheus() const;

    // Cancels every request (each gets its kDone) and joins the engine thread.
    void shutdown();

private:
    struct Seq;
    explicit Engine(std::shared_ptr<LoadedModel> model, const EngineOptions& opts);
    void run();
    void admit();
    bool step();
    bool grow(Seq& s);
    void add_drafts(int n_decode, int budget);
    void drift_model_rate();
    double model_rate() const;  // the draft model's decayed acceptance, with the prior
    void model_drafts();
    void draft_prefills(int n_decode, int n_main);
    void add_draft_entry(Seq& s, const int32_t* toks, int n, bool logits);
    void preempt(Seq& s);
    void publish_blocks(Seq& s);
    void begin_draft_kv(Seq& s, int limit);
    void publish_draft_blocks(Seq& s);
    void update_gauges();
    void finish(Seq& s, FinishReason why, Status error = Status::ok());
    void emit_token(Seq& s, int32_t token, const float* logits);
    // The runtime of a request's grammar (shared by the requests with the same grammar).
    std::shared_ptr<grammar::GrammarRuntime> grammar_runtime(const std::shared_ptr<const grammar::Grammar>& g,
                                                             bool special);

    std::shared_ptr<LoadedModel> model_;
    EngineOptions opts_;
    int ceiling_ = 0;
    std::unique_ptr<KvPool> kv_;
    // Speculation by a draft model: the model, its KV pool (declared before the sequences,
    // whose draft KV returns to it), its batch, logits and the cost of its steps.
    std::shared_ptr<LoadedModel> draft_;
    std::unique_ptr<KvPool> draft_kv_;
    int draft_vocab_ = 0;  // ids a draft token may take: those both vocabularies have
    int draft_ctx_ = 0;    // the draft model's context: no drafts past it
    double model_trials_ = 0, model_hits_ = 0;  // decayed counts over every sequence's drafts

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Seq>> incoming_;  // guarded by mu_
    bool stop_ = false;                          // guarded by mu_
    std::atomic<uint64_t> next_id_{1};

    // Engine thread only.
    std::deque<std::unique_ptr<Seq>> waiting_;
    std::vector<std::unique_ptr<Seq>> running_;
    std::vector<float> logits_;
    Batch batch_;
    std::vector<Seq*> in_batch_;  // the sequences of batch_'s first entries, in order
    std::vector<Seq*> draft_owner_;  // the sequences of the draft entries after them
    std::vector<Seq*> draft_order_;  // add_drafts' scratch
    struct DraftCandidate {
        Seq* s;
        double alpha, p;  // acceptance estimate; the probability of its next draft token
        int taken;        // draft tokens chosen
        int limit;        // draft tokens it may take (its lookup's, or the draft model's limit)
    };
    std::vector<DraftCandidate> draft_cands_;

    uint64_t next_order_ = 0;     // admission order, for choosing whom to preempt
    // Constrained decoding: the vocabulary's bytes (without and with control tokens' text),
    // built at the first constrained request, and the runtimes of recent grammars.
    std::shared_ptr<const grammar::TokenVocab> grammar_vocab_[2];
    struct GrammarEntry {
        std::shared_ptr<grammar::GrammarRuntime> rt;
        bool special;
        uint64_t last_use;
    };
    std::vector<GrammarEntry> grammars_;
    uint64_t grammar_clock_ = 0;
    // The masks a step will need are computed on this thread while the forward pass runs
    // (the engine thread touches no grammar runtime meanwhile). Started at the first grammar.
    void mask_main();
    std::thread mask_thread_;
    std::mutex mask_mu_;
    std::condition_variable mask_cv_;
    std::vector<grammar::Matcher*> mask_jobs_;  // guarded by mask_mu_
    bool mask_busy_ = false, mask_stop_ = false;  // guarded by mask_mu_

    std::atomic<int> n_running_{0}, n_waiting_{0}, kv_used_{0}, kv_cached_{0};
    std::atomic<uint64_t> n_prompt_tokens_{0}, n_generated_tokens_{0}, n_requests_{0};
    std::atomic<uint64_t> prefix_lookups_{0}, prefix_lookup_tokens_{0}, prefix_hit_tokens_{0};
    std::atomic<uint64_t> n_preemptions_{0};
    std::atomic<uint64_t> spec_drafted_{0}, spec_accepted_{0};
    std::atomic<uint64_t> draft_hit_tokens_{0};  // Stats::draft_prefix_hit_tokens
    std::atomic<double> draft_rate_{0};  // model_rate(), for stats()
    // Stats::step_seconds / forward_seconds in nanoseconds; forward_ns_step_ is the last
    // step's forward (engine thread only), 0 when it ran none.
    std::vector<float> lp_weights_;                // emit_token(): exp_shifted's output
    std::vector<float> lp_chunks_;                 // emit_token(): top_k_logit_floor's scratch
    std::vector<int32_t> lp_ids_;                  // emit_token(): the top logprobs' candidates
    std::vector<int32_t> pre_;                     // step(): each entry's first token, drawn in parallel
    std::vector<std::pair<int, int>> pre_rows_;    // step(): (entry, logits row) drawn in parallel
    std::atomic<uint64_t> step_ns_{0}, forward_ns_{0}, n_steps_{0};
    uint64_t forward_ns_step_ = 0;
    // What a forward step of n tokens costs (n <= kMax): a decayed mean of the steps timed
    // with exactly n tokens, else scaled from the nearest timed n by a prior shape. Prices the
    // draft tokens against what they are expected to return (add_drafts).
    struct StepCost {
        static constexpr int kMax = 64;
        double t[kMax + 1] = {};  // seconds; 0: no step of n tokens timed yet
        void observe(int n, double seconds);
        double predict(int n) const;  // 0 when nothing is known
    } step_cost_, draft_cost_;  // draft_cost_: the draft model's steps
    Batch draft_batch_;
    std::vector<float> draft_logits_;
    std::vector<Seq*> draft_active_;
    Histogram ttft_;  // submit to first token
    Histogram itl_;   // between consecutive tokens of one request
    std::thread thread_;
};

}  // namespace ferrox
