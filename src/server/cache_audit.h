#pragma once
// Why a turn re-read more than its new tokens. Each generating request's prompt is compared,
// when it ends, with the previous prompt of the same conversation: the client's key
// (prompt_cache_key, Anthropic's metadata.user_id, `user`) when it sends one, else the recent
// prompt of the same model that shares the longest beginning with it. What the previous prompt
// and this one share is what the prefix cache could have served; when it served less than that
// by more than a block, or when the client changed the shared history, the miss gets a reason:
//
//   evicted          the shared prefix was no longer cached (the pool needed the room)
//   timestamp        the first difference is digits (a clock or a counter in the prompt)
//   system_changed   the system prompt differs otherwise
//   tools_reordered  the same tools, in another order
//   tools_changed    tools added, removed or edited
//   history_changed  an earlier turn differs (edited, dropped or re-rendered)
//   model_changed    the conversation's previous turn ran on another model (or load of it)
//   cache_off        the request asked for no caching (cache_prompt: false)
//
// Each miss is counted (ferrox_prompt_cache_misses_total{reason} and the tokens re-read beyond
// the new ones, ferrox_prompt_cache_missed_tokens_total{reason}) and put in the access log
// line: {"cache_miss": {"reason", "at" (first divergent token), "missed" (tokens)}}.
//
// Memory: the last 256 prompts, at most 4M tokens together, oldest first out.
// Threading: any thread (one mutex).

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace ferrox {

struct Conversation;

// What of a conversation decides the prompt's beginning, hashed (0: not known, a raw prompt).
struct PromptFingerprint {
    uint64_t system = 0;     // the leading system message's text
    uint64_t tools = 0;      // the tool list in order
    uint64_t tools_set = 0;  // the tool list in any order
};
PromptFingerprint fingerprint_of(const Conversation& conv);

struct CacheMiss {
    std::string reason;  // empty: no miss
    int at = -1;         // the first token where this prompt differs from the previous one
    int missed = 0;      // tokens re-read beyond the turn's new ones
};

class PromptCacheAudit {
public:
    static constexpr const char* kReasons[] = {"evicted",         "system_changed", "tools_reordered", "tools_changed",
                                               "timestamp",       "history_changed", "model_changed", "cache_off"};
    static constexpr int kNumReasons = 8;

    struct Turn {
        std::string model;           // the model's id and load ("id#generation")
        std::string key;             // the client's conversation key, or empty
        const std::vector<int32_t>* prompt = nullptr;
        PromptFingerprint fingerprint;
        int n_cached = 0;
        int block_size = 32;
        bool cache_prompt = true;
        // Whether token `id`'s text is a digit (or a clock's ':' '-' '/' '.' 'T' 'Z'): tells a
        // timestamp from other edits. Null: never.
        bool (*is_clock_token)(const void* ctx, int32_t id) = nullptr;
        const void* clock_ctx = nullptr;
    };
    // Judges a finished turn against the conversation's previous one, counts a miss, and keeps
    // this prompt as the conversation's latest.
    CacheMiss record(const Turn& t);
    // Prometheus text: the two counters by reason (every reason, zeros included).
    std::string prometheus() const;

private:
    struct Entry {
        std::string model, key;
        std::vector<int32_t> prompt;
        PromptFingerprint fingerprint;
    };
    const Entry* previous(const Turn& t) const;
    void keep(const Turn& t);

    mutable std::mutex mu_;
    std::deque<Entry> entries_;  // oldest first
    size_t n_tokens_ = 0;
    std::array<uint64_t, kNumReasons> misses_{}, missed_tokens_{};
};

}  // namespace ferrox
