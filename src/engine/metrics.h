#pragma once
// The engine's counters and gauges: written on the engine thread (relaxed atomics), read from
// any thread by stats() and the Prometheus text of /metrics.

#include <atomic>
#include <cstdint>
#include <string>

#include "engine/histogram.h"

namespace ferrox {

struct EngineStats {
    int n_running = 0, n_waiting = 0;
    int kv_blocks_used = 0, kv_blocks_total = 0, kv_blocks_cached = 0;
    uint64_t n_prompt_tokens = 0, n_generated_tokens = 0, n_requests = 0;
    uint64_t prefix_lookups = 0, prefix_lookup_tokens = 0, prefix_hit_tokens = 0;
    uint64_t n_preemptions = 0;
    uint64_t disk_hit_blocks = 0, ram_hit_blocks = 0;
    int64_t ram_cache_bytes = 0;
    int kv_blocks_pinned = 0;       // unreferenced cached blocks under a cache_control pin
    uint64_t pins_broken = 0;       // pinned blocks evicted early: nothing else was left
    // Speculative decoding: draft tokens verified, and those accepted (emitted without a step
    // of their own).
    uint64_t spec_drafted = 0, spec_accepted = 0;
    // With a draft model: the acceptance rate a new request starts from (0 without one), and
    // tokens whose draft KV came from the draft pool's prefix cache.
    bool has_draft_model = false;
    double draft_model_rate = 0;
    uint64_t draft_prefix_hit_tokens = 0;
    // Wall time of the engine steps that ran a forward pass (admission, batch building, the
    // forward, sampling, detokenizing and the events), and of those forward passes alone:
    // 1 - forward / step is the engine's per-step overhead.
    double step_seconds = 0, forward_seconds = 0;
    uint64_t n_steps = 0;
};

struct EngineMetrics {
    template <class T>
    static void add(std::atomic<T>& a, T v) { a.fetch_add(v, std::memory_order_relaxed); }

    std::atomic<int> n_running{0}, n_waiting{0}, kv_used{0}, kv_cached{0}, kv_total{0};
    std::atomic<uint64_t> n_prompt_tokens{0}, n_generated_tokens{0}, n_requests{0};
    std::atomic<uint64_t> prefix_lookups{0}, prefix_lookup_tokens{0}, prefix_hit_tokens{0};
    std::atomic<uint64_t> n_preemptions{0};
    std::atomic<uint64_t> disk_hit_blocks{0};  // prefix blocks read back from the disk cache
    std::atomic<uint64_t> ram_hit_blocks{0};   // ... and from host memory (--cache-ram)
    std::atomic<int64_t> ram_cache_bytes{0};
    std::atomic<int> kv_pinned{0};
    std::atomic<uint64_t> pins_broken{0};
    std::atomic<uint64_t> spec_drafted{0}, spec_accepted{0};
    std::atomic<bool> has_draft_model{false};
    std::atomic<double> draft_rate{0};
    std::atomic<uint64_t> draft_hit_tokens{0};
    std::atomic<uint64_t> step_ns{0}, forward_ns{0}, n_steps{0};
    Histogram ttft;  // submit to first token
    Histogram itl;   // between consecutive tokens of one request

    EngineStats snapshot() const;
    // Prometheus text for /metrics: gauges, counters and the latency histograms.
    std::string prometheus() const;
};

// A mixture of experts' routing for /metrics: per layer and expert, the tokens routed there
// (ferrox_moe_routed_tokens_total{layer,expert}), and per layer the busiest expert's share
// against an even split (ferrox_moe_layer_max_load_ratio: 1 = balanced, n_expert / n_used at
// worst). Empty for a dense model.
struct ExpertRouting;
std::string expert_routing_prometheus(const ExpertRouting& r);

}  // namespace ferrox
