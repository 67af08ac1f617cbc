#pragma once
// What crosses from the server into the engine and back: a request's generation parameters,
// the events of its answer and the handle that cancels it. Nothing here names the model, the
// tokenizer or the KV pool, so protocol adapters include this and never engine.h.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"

namespace ferrox {

struct GenerationParams {
    SamplingParams sampling;
    int max_tokens = -1;             // -1: until end of generation or the context ceiling;
                                     // 0: only compute the prompt (fills the prefix cache)
    // max_tokens is the server's default (-n), not the request's: where the prompt plus it
    // exceeds the context, the answer is capped to what fits instead of refused.
    bool max_tokens_soft = false;
    std::vector<std::string> stop;   // stop strings (never part of the output)
    bool ignore_eos = false;
    int top_logprobs = -1;           // -1: no logprobs; 0..20: logprob plus that many alternatives
    // -1: none; 0..20: the log-probability of every prompt token after the first under the
    // model's raw distribution (temperature 1, no bias or penalty), plus that many alternatives,
    // in kPromptLogprobs events before the first token (echo, vLLM's prompt_logprobs). Such a
    // request computes its whole prompt: it takes nothing from the prefix cache.
    int prompt_logprobs = -1;
    // The logprobs are those of the distribution after the sampler chain (top-k, top-p, min-p,
    // temperature), as llama-server's post_sampling_probs reports them: only the candidates
    // left, summing to 1; greedy gives the chosen token log 1 = 0.
    bool post_sampling_probs = false;
    bool cache_prompt = true;        // false: neither reuse cached KV nor publish this request's
    // Render control tokens' text (tool-call and reasoning markup that the vocab stores as
    // control tokens, e.g. gpt-oss's <|channel|>); end-of-generation tokens are never text.
    bool render_special = false;
    // > 0: the request ends (finish kLength, with what it has) this many seconds after submit.
    double timeout_s = 0;
    // Constrained decoding: every token must continue this grammar (over the tokens' bytes;
    // control tokens count by their text when render_special). End of generation is allowed
    // only where the grammar is complete, and generation ends (kStop) where it must.
    std::shared_ptr<const grammar::Grammar> grammar;
    // Speculative decoding (EngineOptions::spec_ngram): -1 as the engine decides, 0 never,
    // N > 0 at most N draft tokens per step (and never more than the engine's draft_max).
    // Speculation never changes the output, only how many steps it takes.
    int draft_max = -1;
    // Anthropic's cache_control breakpoints: the prompt's first n_tokens stay in the prefix
    // cache for ttl_s seconds after the request, ahead of other traffic (block_manager.h: pins).
    struct CachePin {
        int n_tokens = 0;
        double ttl_s = 300;
    };
    std::vector<CachePin> cache_pins;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // best alternatives, most likely first
    int32_t rank = 0;  // prompt logprobs: 1 + the number of tokens more likely (0: not computed)
};

struct EngineEvent {
    enum class Kind {
        kText,      // new visible text (possibly empty) and the tokens behind it
        kProgress,  // a prefill chunk was processed (lets streams send keep-alives)
        // With GenerationParams::prompt_logprobs: `logprobs` of the next prompt tokens, in
        // order. The events of a request carry tokens 1 .. n_prompt-1 of its prompt, once
        // each, before its first kText (token 0 has none).
        kPromptLogprobs,
        kDone,      // the last event of a request
    };
    Kind kind = Kind::kText;
    std::string text;
    int32_t token = -1;                  // kText: the token this event is for
    std::vector<TokenLogprob> logprobs;  // kText with logprobs requested; kPromptLogprobs
    // kDone:
    FinishReason finish = FinishReason::kStop;
    Status error;  // when finish == kError
    int n_prompt = 0, n_completion = 0, n_cached = 0;
    // Speculative decoding: draft tokens verified for this request, and those accepted.
    int n_draft = 0, n_draft_accepted = 0;
    std::string stop_matched;
};

// Called on the engine thread for every event of one request, in order; must not block.
using EventSink = std::function<void(EngineEvent&&)>;

class RequestHandle {
public:
    explicit RequestHandle(uint64_t id) : id_(id) {}
    uint64_t id() const { return id_; }
    // Any thread; the request ends at the engine's next step with finish kCancelled.
    void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
    bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

private:
    uint64_t id_;
    std::atomic<bool> cancelled_{false};
};

}  // namespace ferrox
