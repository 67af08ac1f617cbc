#pragma once
// One request's state inside the engine, from admission to its kDone: its tokens, its KV
// blocks, its place in the prefix cache, its sampler and text stream, and what speculation
// keeps of it. Engine thread only; the scheduler, the proposers and the postprocessor each own
// the fields their comments name.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"
#include "grammar/grammar.h"

namespace ferrox {

// A sequence's leading blocks in a prefix cache: how many are published (or were matched), and
// the cache's block for the last of them with its epoch (the sequence may hold no reference to
// it: when another sequence published the same prefix first, the chain continues from that one).
class PrefixStore;

struct PrefixChain {
    int n_published = 0;
    int32_t block = -1;
    uint32_t epoch = 0;

    // Starts from a prefix-cache match (the sequence's first blocks).
    void start(const BlockManager& bm, const std::vector<int32_t>& matched);
    // Publishes the blocks of `blocks` that the first n_tokens of `tokens` fill and that are not
    // published yet, offering each one it publishes to `store` (the disk tier) when given.
    void publish(BlockManager& bm, const std::vector<int32_t>& blocks, const int32_t* tokens, int n_tokens,
                 PrefixStore* store = nullptr);
    void reset() { *this = PrefixChain{}; }
};

// Speculation's per-sequence state (engine/spec/).
struct SeqSpec {
    std::vector<int32_t> draft;  // this step's draft tokens
    int draft_row0 = 0;          // the logits row of the first
    // Decayed counts of draft tokens verified and accepted: the acceptance estimate.
    double trials = 0, hits = 0;
    // Draft tokens verified and accepted over the request (kDone's n_draft, n_draft_accepted).
    int n_drafted = 0, n_accepted = 0;
    // With a draft model: the sequence's KV in the draft model's pool and how many of its
    // leading tokens it holds (tokens[0, d_in_kv); past a rejected draft token it holds no more).
    std::unique_ptr<SeqBlocks> dkv;
    int d_in_kv = 0;
    bool d_off = false;  // it holds a token the draft model lacks: no draft model for it
    PrefixChain d_chain;  // its leading blocks in the draft pool's prefix cache

    void drop_draft_kv() {
        dkv.reset();
        d_in_kv = 0;
        d_chain.reset();
    }
};

// Where the engine reads the time: steady_clock, or a test's fake clock (EngineCore::set_clock).
using EngineClock = std::function<std::chrono::steady_clock::time_point()>;

struct Sequence {
    using Clock = std::chrono::steady_clock;

    // What the request brought.
    std::shared_ptr<RequestHandle> handle;
    GenerationParams params;
    EventSink sink;
    Clock::time_point t_submit, t_last_token;
    std::vector<int32_t> tokens;  // prompt, then generated tokens
    int n_prompt = 0;
    int max_total = 0;            // prompt + generated never exceeds this

    // Scheduler: KV and queue state.
    std::unique_ptr<SeqBlocks> kv;
    int n_in_kv = 0;              // positions whose K/V are computed
    bool admitted = false;        // admitted at least once (counted in the statistics)
    bool preempted = false;       // set during a step; the sequence goes back to the queue
    uint64_t order = 0;           // admission order: the highest is preempted first
    PrefixChain chain;            // its blocks in the prefix cache
    int n_cached = 0;             // prompt tokens reused from the cache at first admission
    bool pinned = false;          // its cache_pins are applied (once its prompt is published)

    // Postprocessor: sampling, text and the end.
    int n_generated = 0;
    int n_prompt_lp = 1;          // prompt tokens whose logprob was sent (prompt_logprobs)
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<grammar::Matcher> matcher;  // with a grammar
    std::unique_ptr<TextStream> text;
    bool done = false;
    std::string stop_matched;     // the stop string that ended it

    SeqSpec spec;

    // Past its wall-clock limit (GenerationParams::timeout_s), counted from submit().
    bool expired(Clock::time_point now) const {
        return params.timeout_s > 0 && std::chrono::duration<double>(now - t_submit).count() > params.timeout_s;
    }
    // Positions to compute before decoding: the prompt, or, after a preemption, every token
    // but the last sampled one (which the next decode step feeds).
    int n_fill() const { return n_generated > 0 ? static_cast<int>(tokens.size()) - 1 : n_prompt; }
    bool prefilling() const { return n_in_kv < n_fill(); }
    bool caching(bool prefix_cache) const { return prefix_cache && params.cache_prompt; }
    // Its prompt chunks need a logits row per token: prompt logprobs not all sent yet.
    bool wants_prompt_logits() const { return params.prompt_logprobs >= 0 && n_generated == 0 && n_prompt_lp < n_prompt; }
};

}  // namespace ferrox
