#pragma once
// The engine: one thread that owns the model's forward pass and the KV pool, serving many
// requests at once by continuous batching. It runs an EngineCore (engine_core.h: schedule,
// propose, forward, postprocess, update) on its own thread; HTTP threads reach it only through
// submit() (a request queue) and the per-request event sink, which the engine thread calls;
// cancellation is a flag the core checks between steps.

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"
#include "engine/loaded_model.h"
#include "engine/metrics.h"
#include "engine/request.h"

namespace ferrox {

class Engine {
public:
    using Stats = EngineStats;

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
    int context_ceiling() const { return core_->context_ceiling(); }
    int block_size() const { return core_->options().block_size; }
    const EngineOptions& options() const { return core_->options(); }
    // Blocks of the KV pool and bytes of one block.
    int kv_blocks() const { return core_->kv_blocks(); }
    size_t kv_block_bytes() const { return core_->kv_block_bytes(); }
    const LoadedModel& model() const { return core_->model(); }
    std::shared_ptr<LoadedModel> model_ptr() const { return core_->model_ptr(); }
    // The draft model (null without one) and the bytes of its KV pool.
    const LoadedModel* draft_model() const { return core_->draft_model(); }
    size_t draft_kv_bytes() const { return core_->draft_kv_bytes(); }

    Stats stats() const { return core_->metrics().snapshot(); }
    // Prometheus text for /metrics: gauges, counters and the latency histograms.
    // A mixture of experts adds its routing counts (expert_routing_prometheus).
    std::string prometheus() const {
        return core_->metrics().prometheus() + expert_routing_prometheus(core_->model().forward_model().expert_routing());
    }

    // Cancels every request (each gets its kDone) and joins the engine thread.
    void shutdown();

private:
    explicit Engine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {}
    void run();

    std::unique_ptr<EngineCore> core_;  // engine thread only, but for its const accessors
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Sequence>> incoming_;  // guarded by mu_
    bool stop_ = false;                               // guarded by mu_
    std::thread thread_;
};

}  // namespace ferrox
