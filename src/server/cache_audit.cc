#include "server/cache_audit.h"

#include <algorithm>
#include <cstdio>

#include "chat/messages.h"

namespace ferrox {
namespace {

constexpr size_t kMaxEntries = 256;
constexpr size_t kMaxTokens = size_t{4} << 20;

uint64_t fnv(const std::string& s, uint64_t h = 1469598103934665603ULL) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
    return h;
}

int common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    return static_cast<int>(std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(n), b.begin()).first - a.begin());
}

int reason_index(const char* r) {
    for (int i = 0; i < PromptCacheAudit::kNumReasons; ++i)
        if (std::string(PromptCacheAudit::kReasons[i]) == r) return i;
    return 0;
}

}  // namespace

PromptFingerprint fingerprint_of(const Conversation& conv) {
    PromptFingerprint fp;
    if (!conv.messages.empty() && conv.messages[0].role == "system") fp.system = fnv(conv.messages[0].content) | 1;
    if (!conv.tools.empty()) {
        uint64_t ordered = 1469598103934665603ULL, set = 0;
        for (const ToolSpec& t : conv.tools) {
            const uint64_t h = fnv(t.parameters, fnv(t.description, fnv(t.name)));
            ordered = fnv(std::to_string(h), ordered);
            set += h * 0x9e3779b97f4a7c15ULL;  // order-free
        }
        fp.tools = ordered | 1;
        fp.tools_set = set | 1;
    }
    return fp;
}

// The conversation's previous turn: the latest entry under the client's key; without a key, the
// entry of the same model sharing the longest beginning (at least a block) with this prompt.
const PromptCacheAudit::Entry* PromptCacheAudit::previous(const Turn& t) const {
    if (!t.key.empty()) {
        for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
            if (it->key == t.key) return &*it;
        return nullptr;
    }
    const Entry* best = nullptr;
    int best_lcp = t.block_size - 1;
    const std::vector<int32_t>& p = *t.prompt;
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        if (!it->key.empty() || it->model != t.model || it->prompt.empty() || p.empty() || it->prompt[0] != p[0]) continue;
        const int lcp = common_prefix(it->prompt, p);
        if (lcp > best_lcp) {
            best = &*it;
            best_lcp = lcp;
        }
    }
    return best;
}

CacheMiss PromptCacheAudit::record(const Turn& t) {
    std::lock_guard<std::mutex> lock(mu_);
    CacheMiss m;
    const Entry* prev = previous(t);
    bool same_conversation = prev != nullptr;
    if (prev) {
        const std::vector<int32_t>& a = prev->prompt;
        const std::vector<int32_t>& b = *t.prompt;
        const int bs = std::max(1, t.block_size);
        const int n_prompt = static_cast<int>(b.size());
        const int n_prev = static_cast<int>(a.size());
        const int lcp = common_prefix(a, b);
        // Without the client's key, a prompt that shares less than half of another is another
        // conversation with the same beginning (a system prompt), not an edit of it.
        if (t.key.empty() && lcp < n_prev / 2) same_conversation = false;
        // What the cache could serve (the shared beginning in whole blocks, two tokens left to
        // compute), what it did, and the tokens re-read beyond the turn's new ones.
        const int reusable = std::max(0, std::min(lcp, n_prompt - 2)) / bs * bs;
        const int new_tokens = std::max(0, n_prompt - n_prev);
        const int missed = (n_prompt - t.n_cached) - new_tokens;
        const int lost = reusable - t.n_cached;  // shared, yet not served
        const int changed = n_prev - lcp;        // the previous prompt's tokens this one dropped
        if (missed > bs) {
            const char* reason = nullptr;
            if (!t.cache_prompt) {
                reason = "cache_off";
                m.at = 0;
            } else if (prev->model != t.model) {
                reason = "model_changed";
                m.at = 0;
            } else if (lost > bs && (lost >= changed || !same_conversation)) {
                reason = "evicted";
                m.at = t.n_cached;
            } else if (changed > bs && same_conversation) {
                m.at = lcp;
                const PromptFingerprint &fa = prev->fingerprint, &fb = t.fingerprint;
                if (t.is_clock_token && lcp < n_prev && lcp < n_prompt && t.is_clock_token(t.clock_ctx, a[lcp]) &&
                    t.is_clock_token(t.clock_ctx, b[lcp])) {
                    reason = "timestamp";  // (in the system prompt or not: the clock is the cause)
                } else if (fa.system && fb.system && fa.system != fb.system) {
                    reason = "system_changed";
                } else if (fa.tools != fb.tools && fa.tools_set == fb.tools_set) {
                    reason = "tools_reordered";
                } else if (fa.tools != fb.tools) {
                    reason = "tools_changed";
                } else {
                    reason = "history_changed";
                }
            }
            if (reason) {
                m.reason = reason;
                m.missed = missed;
                const int i = reason_index(reason);
                ++misses_[i];
                missed_tokens_[i] += static_cast<uint64_t>(missed);
            }
        }
        if (same_conversation) {
            // The conversation's older turn makes way for this one.
            for (auto e = entries_.begin(); e != entries_.end(); ++e) {
                if (&*e == prev) {
                    n_tokens_ -= e->prompt.size();
                    entries_.erase(e);
                    break;
                }
            }
        }
    }
    keep(t);
    return m;
}

void PromptCacheAudit::keep(const Turn& t) {
    if (t.prompt->size() > kMaxTokens) return;
    entries_.push_back({t.model, t.key, *t.prompt, t.fingerprint});
    n_tokens_ += t.prompt->size();
    while (entries_.size() > kMaxEntries || n_tokens_ > kMaxTokens) {
        n_tokens_ -= entries_.front().prompt.size();
        entries_.pop_front();
    }
}

std::string PromptCacheAudit::prometheus() const {
    std::array<uint64_t, kNumReasons> misses, tokens;
    {
        std::lock_guard<std::mutex> lock(mu_);
        misses = misses_;
        tokens = missed_tokens_;
    }
    std::string out;
    const auto family = [&](const char* name, const char* help, const std::array<uint64_t, kNumReasons>& v) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n";
        char buf[160];
        for (int i = 0; i < kNumReasons; ++i) {
            std::snprintf(buf, sizeof buf, "%s{reason=\"%s\"} %llu\n", name, kReasons[i],
                          static_cast<unsigned long long>(v[i]));
            out += buf;
        }
    };
    family("ferrox_prompt_cache_misses_total", "Turns that re-read more than their new tokens, by reason.", misses);
    family("ferrox_prompt_cache_missed_tokens_total", "Prompt tokens re-read beyond each turn's new ones, by reason.",
           tokens);
    return out;
}

}  // namespace ferrox
