#pragma once
// The engine's step without its thread: schedule, propose, forward, postprocess, update, on
// the calling thread. Engine (engine.h) runs one on its own thread behind a request queue;
// `ferrox run` and the scheduler tests drive one directly, step by step.
//
// Each step the scheduler takes every running sequence's next token plus prefill chunks of
// newly admitted prompts under a token budget (chunked prefill: a long prompt does not stall
// the streams already running), speculation adds draft tokens, the model computes the batch
// in one forward pass, and the postprocessor samples, accepts drafts and emits events.
//
// Threading: one thread at a time calls everything but make_sequence() (any thread).

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/batch_plan.h"
#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "engine/metrics.h"
#include "engine/postprocess.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/spec/speculation.h"

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
    // Speculative decoding (engine/spec/): by prompt lookup, a decoding sequence whose last
    // spec_ngram (down to 2) tokens occurred earlier in its prompt or output drafts the tokens
    // that followed them, up to draft_max; with a draft model (EngineCore::create's `draft`)
    // the drafts come from it instead. The output is the same tokens with and without it.
    // spec_ngram 0 (without a draft model) or draft_max 0: no speculation.
    int spec_ngram = 3;
    int draft_max = 8;
    // Verify every draft token the lookup finds, unpriced (tests and measurements).
    bool spec_unpriced = false;
    // The prompt cache on disk (kv_disk_cache.h): every published KV block also written under
    // cache_dir (at most cache_disk_mib MiB, least recently used first), read back for a prefix
    // the pool lost or computed before a restart. Empty: none.
    std::string cache_dir;
    int64_t cache_disk_mib = 8192;
    // The prompt cache in host memory (kv_ram_cache.h): blocks the pool evicts are kept, up to
    // cache_ram_mib MiB, least recently used first; 0: none.
    int64_t cache_ram_mib = 0;
};

class DraftModelProposer;
class KvDiskCache;
class KvRamCache;

class EngineCore {
public:
    // `draft`: a smaller model of the same vocabulary that drafts for speculative decoding;
    // null: prompt lookup.
    static Expected<std::unique_ptr<EngineCore>> create(std::shared_ptr<LoadedModel> model, const EngineOptions& opts,
                                                        std::shared_ptr<LoadedModel> draft = nullptr);
    ~EngineCore();

    // Any thread. A request's sequence, or kInvalidArgument (prompt empty, an id out of range,
    // or prompt + max_tokens beyond the context ceiling: the message gives both numbers).
    Expected<std::unique_ptr<Sequence>> make_sequence(std::vector<int32_t> prompt, GenerationParams params,
                                                      EventSink sink);
    // Queues a sequence that make_sequence made and metrics().n_waiting already counts.
    void enqueue(std::unique_ptr<Sequence> s) { scheduler_->add(std::move(s)); }
    // kResourceExhausted when max_queue requests are waiting (metrics().n_waiting counts them).
    Status check_queue() const;
    // make_sequence, counted and queued (kResourceExhausted when max_queue are waiting).
    Expected<std::shared_ptr<RequestHandle>> submit(std::vector<int32_t> prompt, GenerationParams params,
                                                    EventSink sink);
    // One step: ends cancelled and expired requests, then schedule, propose, forward,
    // postprocess, update. False when no forward pass ran.
    bool step();
    bool has_work() const { return scheduler_->has_work(); }
    // Steps until no request is left.
    void run_until_idle() {
        while (has_work()) step();
    }
    // Ends every request (kCancelled).
    void cancel_all();
    // The clock behind request time limits, latencies and the timed forward passes whose costs
    // price the drafts: steady_clock unless set. Tests set a fake one that their fake models
    // advance by a modeled cost, so that pricing and time limits do not depend on the machine's
    // speed. Set it before the first request (make_sequence reads it on any thread).
    void set_clock(EngineClock clock) { clock_ = std::move(clock); }

    int context_ceiling() const { return ceiling_; }
    const EngineOptions& options() const { return opts_; }
    int kv_blocks() const { return blocks_->n_blocks(); }
    size_t kv_block_bytes() const { return storage_->geometry().block_bytes(); }
    const LoadedModel& model() const { return *model_; }
    std::shared_ptr<LoadedModel> model_ptr() const { return model_; }
    const LoadedModel* draft_model() const;
    size_t draft_kv_bytes() const;
    EngineMetrics& metrics() { return metrics_; }
    const EngineMetrics& metrics() const { return metrics_; }
    const BlockManager& blocks() const { return *blocks_; }
    const KvDiskCache* disk_cache() const { return disk_cache_.get(); }
    const KvRamCache* ram_cache() const { return ram_cache_.get(); }
    // The draft model's pool (null without one).
    const BlockManager* draft_blocks() const;

private:
    EngineCore(std::shared_ptr<LoadedModel> model, const EngineOptions& opts);
    Status init(std::shared_ptr<LoadedModel> draft);
    Status forward();

    std::shared_ptr<LoadedModel> model_;
    EngineOptions opts_;
    int ceiling_ = 0;
    std::atomic<uint64_t> next_id_{1};
    // (Before the parts that hold a reference to it.)
    EngineClock clock_ = [] { return std::chrono::steady_clock::now(); };
    EngineMetrics metrics_;
    std::unique_ptr<BlockManager> blocks_;
    std::unique_ptr<KvStorage> storage_;
    std::unique_ptr<KvDiskCache> disk_cache_;  // with EngineOptions::cache_dir
    std::unique_ptr<KvRamCache> ram_cache_;    // with EngineOptions::cache_ram_mib
    std::unique_ptr<PrefixTiers> tiers_;       // ram_cache_ then disk_cache_, as the scheduler asks
    // Before the scheduler: the sequences it still holds when the core goes give their draft
    // KV back to the draft model's pool, which spec_ owns.
    std::unique_ptr<Speculation> spec_;
    DraftModelProposer* draft_ = nullptr;  // spec_'s proposer, with a draft model
    std::unique_ptr<Scheduler> scheduler_;
    std::unique_ptr<Postprocessor> post_;
    BatchPlan plan_;
    std::vector<float> logits_;  // (rows, n_vocab): one row per entry that wants logits
};

}  // namespace ferrox
