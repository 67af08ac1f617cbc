#include "engine/metrics.h"

#include <algorithm>
#include <cstdio>

#include "model/forward_model.h"

namespace ferrox {

EngineStats EngineMetrics::snapshot() const {
    EngineStats st;
    st.n_running = n_running.load();
    st.n_waiting = n_waiting.load();
    st.kv_blocks_used = kv_used.load();
    st.kv_blocks_total = kv_total.load();
    st.kv_blocks_cached = kv_cached.load();
    st.n_prompt_tokens = n_prompt_tokens.load();
    st.n_generated_tokens = n_generated_tokens.load();
    st.n_requests = n_requests.load();
    st.prefix_lookups = prefix_lookups.load();
    st.prefix_lookup_tokens = prefix_lookup_tokens.load();
    st.prefix_hit_tokens = prefix_hit_tokens.load();
    st.n_preemptions = n_preemptions.load();
    st.disk_hit_blocks = disk_hit_blocks.load();
    st.ram_hit_blocks = ram_hit_blocks.load();
    st.ram_cache_bytes = ram_cache_bytes.load();
    st.kv_blocks_pinned = kv_pinned.load();
    st.pins_broken = pins_broken.load();
    st.spec_drafted = spec_drafted.load();
    st.spec_accepted = spec_accepted.load();
    st.has_draft_model = has_draft_model.load();
    st.draft_model_rate = draft_rate.load(std::memory_order_relaxed);
    st.draft_prefix_hit_tokens = draft_hit_tokens.load();
    st.step_seconds = static_cast<double>(step_ns.load()) * 1e-9;
    st.forward_seconds = static_cast<double>(forward_ns.load()) * 1e-9;
    st.n_steps = n_steps.load();
    return st;
}

std::string EngineMetrics::prometheus() const {
    const EngineStats st = snapshot();
    std::string out;
    char buf[256];
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
        std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
        out += buf;
    };
    auto counter = [&](const char* name, const char* help, uint64_t v) {
        metric(name, "counter", help, static_cast<double>(v));
    };
    metric("ferrox_requests_running", "gauge", "Requests generating now.", st.n_running);
    metric("ferrox_requests_waiting", "gauge", "Requests queued for a slot or KV room.", st.n_waiting);
    metric("ferrox_kv_blocks_used", "gauge", "KV cache blocks referenced by sequences.", st.kv_blocks_used);
    metric("ferrox_kv_blocks_total", "gauge", "KV cache blocks in the pool.", st.kv_blocks_total);
    metric("ferrox_kv_blocks_cached", "gauge", "KV cache blocks indexed by the prefix cache.", st.kv_blocks_cached);
    // The model server protocol's KV utilization: one fraction (a scorer takes 1 - usage), blocks
    // held by live sequences; cached blocks no sequence holds are evictable, so they count as free.
    metric("ferrox_kv_cache_usage_ratio", "gauge",
           "KV cache blocks held by live sequences over the pool's blocks (evictable cached blocks are free).",
           st.kv_blocks_total > 0 ? static_cast<double>(st.kv_blocks_used) / st.kv_blocks_total : 0.0);
    counter("ferrox_requests_total", "Requests admitted to generation.", st.n_requests);
    counter("ferrox_prompt_tokens_total", "Prompt tokens processed.", st.n_prompt_tokens);
    counter("ferrox_generated_tokens_total", "Tokens generated.", st.n_generated_tokens);
    counter("ferrox_prefix_cache_lookups_total", "Prefix cache lookups (one per admitted request).", st.prefix_lookups);
    counter("ferrox_prefix_cache_lookup_tokens_total", "Prompt tokens of the prefix cache lookups.",
            st.prefix_lookup_tokens);
    counter("ferrox_prefix_cache_hit_tokens_total", "Prompt tokens reused from the prefix cache.", st.prefix_hit_tokens);
    counter("ferrox_preemptions_total", "Sequences preempted for KV room.", st.n_preemptions);
    counter("ferrox_prompt_cache_disk_hit_blocks_total", "Prefix KV blocks read back from the disk cache (--cache-dir).",
            st.disk_hit_blocks);
    counter("ferrox_prompt_cache_ram_hit_blocks_total", "Prefix KV blocks read back from host memory (--cache-ram).",
            st.ram_hit_blocks);
    metric("ferrox_prompt_cache_ram_bytes", "gauge", "Bytes of evicted KV blocks kept in host memory (--cache-ram).",
           static_cast<double>(st.ram_cache_bytes));
    metric("ferrox_kv_blocks_pinned", "gauge",
           "Cached KV blocks no request holds that a cache_control breakpoint keeps (evicted last).",
           st.kv_blocks_pinned);
    counter("ferrox_prompt_cache_pins_broken_total",
            "Pinned KV blocks evicted before their time because no other block was left.", st.pins_broken);
    counter("ferrox_spec_draft_tokens_total", "Draft tokens verified by speculative decoding.", st.spec_drafted);
    counter("ferrox_spec_accepted_tokens_total", "Draft tokens accepted (tokens without a step of their own).",
            st.spec_accepted);
    if (st.has_draft_model) {
        metric("ferrox_spec_draft_model_acceptance", "gauge",
               "The draft model's recent acceptance rate: where a new request's estimate starts.",
               st.draft_model_rate);
        counter("ferrox_spec_draft_prefix_hit_tokens_total",
                "Tokens whose draft-model KV came from the draft pool's prefix cache.", st.draft_prefix_hit_tokens);
    }
    counter("ferrox_engine_steps_total", "Engine steps that ran a forward pass.", st.n_steps);
    metric("ferrox_engine_step_seconds_total", "counter",
           "Wall time of those steps: admission, batching, forward, sampling, detokenizing, events.",
           st.step_seconds);
    metric("ferrox_engine_forward_seconds_total", "counter", "Wall time of their forward passes alone.",
           st.forward_seconds);
    out += ttft.prometheus("ferrox_time_to_first_token_seconds", "Time from submission to the first token.");
    out += itl.prometheus("ferrox_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
    return out;
}

std::string expert_routing_prometheus(const ExpertRouting& r) {
    if (r.n_expert == 0) return "";
    std::string out =
        "# HELP ferrox_moe_routed_tokens_total Tokens routed to each expert of each layer (one per chosen expert).\n"
        "# TYPE ferrox_moe_routed_tokens_total counter\n";
    std::string ratio =
        "# HELP ferrox_moe_layer_max_load_ratio The busiest expert's routed tokens over the layer's mean per expert.\n"
        "# TYPE ferrox_moe_layer_max_load_ratio gauge\n";
    for (int il = 0; il < r.n_layer; ++il) {
        const uint64_t* t = r.tokens.data() + static_cast<size_t>(il) * r.n_expert;
        uint64_t sum = 0, max = 0;
        for (int e = 0; e < r.n_expert; ++e) {
            out += "ferrox_moe_routed_tokens_total{layer=\"" + std::to_string(il) + "\",expert=\"" + std::to_string(e) +
                   "\"} " + std::to_string(t[e]) + "\n";
            sum += t[e];
            max = std::max(max, t[e]);
        }
        const double mean = static_cast<double>(sum) / r.n_expert;
        char v[32];
        std::snprintf(v, sizeof v, "%.4g", mean > 0 ? static_cast<double>(max) / mean : 0.0);
        ratio += "ferrox_moe_layer_max_load_ratio{layer=\"" + std::to_string(il) + "\"} " + v + "\n";
    }
    return out + ratio;
}

}  // namespace ferrox
