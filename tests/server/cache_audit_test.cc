// Why a turn re-read more than its new tokens: each reason the audit gives, from token-level
// turns (no model): a continued conversation is no miss; an evicted prefix, a changed system
// prompt, reordered or changed tools, a clock, an edited history and another model each are,
// counted by reason; without the client's key, another conversation sharing only a system
// prompt is not taken for an edit.
#include "server/cache_audit.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/messages.h"

namespace ferrox {
namespace {

constexpr int kBs = 16;

std::vector<int32_t> range(int first, int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(first + i);
    return v;
}
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Token ids 0..9 are "digits".
bool clock(const void*, int32_t id) { return id >= 0 && id <= 9; }

struct Audit {
    PromptCacheAudit audit;
    CacheMiss turn(const std::vector<int32_t>& prompt, int n_cached, const std::string& key = "k",
                   PromptFingerprint fp = {}, const std::string& model = "m#1", bool cache = true) {
        PromptCacheAudit::Turn t;
        t.model = model;
        t.key = key;
        t.prompt = &prompt;
        t.fingerprint = fp;
        t.n_cached = n_cached;
        t.block_size = kBs;
        t.cache_prompt = cache;
        t.is_clock_token = clock;
        return audit.record(t);
    }
};

TEST(PromptCacheAudit, AContinuedConversationIsNoMiss) {
    Audit a;
    const auto t1 = range(100, 200);
    EXPECT_EQ(a.turn(t1, 0).reason, "");  // the first turn: nothing to compare with
    const auto t2 = cat(t1, range(400, 50));
    EXPECT_EQ(a.turn(t2, 192).reason, "");  // re-read 58 = 50 new + a partial block
    EXPECT_NE(a.audit.prometheus().find("ferrox_prompt_cache_misses_total{reason=\"evicted\"} 0"), std::string::npos);
}

TEST(PromptCacheAudit, EachReason) {
    const auto sys = range(100, 64), hist = range(1000, 128), tail = range(3000, 20);
    {
        Audit a;
        a.turn(cat(sys, hist), 0);
        const CacheMiss m = a.turn(cat(cat(sys, hist), tail), 32);  // the cache lost most of it
        EXPECT_EQ(m.reason, "evicted");
        EXPECT_EQ(m.at, 32);
        EXPECT_EQ(m.missed, 192 - 32);
    }
    {
        Audit a;
        PromptFingerprint f1{.system = 11}, f2{.system = 12};
        auto sys2 = sys;
        sys2[10] = 77;
        a.turn(cat(sys, hist), 0, "k", f1);
        const CacheMiss m = a.turn(cat(cat(sys2, hist), tail), 0, "k", f2);
        EXPECT_EQ(m.reason, "system_changed");
        EXPECT_EQ(m.at, 10);
    }
    {
        Audit a;
        auto sys2 = sys, sys1 = sys;
        sys1[20] = 5;  // "...12:05" then "...12:09"
        sys2[20] = 9;
        a.turn(cat(sys1, hist), 0, "k", {.system = 1});
        EXPECT_EQ(a.turn(cat(cat(sys2, hist), tail), 16, "k", {.system = 2}).reason, "timestamp");
    }
    {
        Audit a;
        auto tools2 = hist;
        std::swap(tools2[0], tools2[64]);
        a.turn(cat(sys, hist), 0, "k", {.system = 1, .tools = 5, .tools_set = 9});
        EXPECT_EQ(a.turn(cat(cat(sys, tools2), tail), 64, "k", {.system = 1, .tools = 6, .tools_set = 9}).reason,
                  "tools_reordered");
        a.turn(cat(sys, hist), 0, "k", {.system = 1, .tools = 5, .tools_set = 9});
        EXPECT_EQ(a.turn(cat(cat(sys, tools2), tail), 64, "k", {.system = 1, .tools = 7, .tools_set = 8}).reason,
                  "tools_changed");
    }
    {
        Audit a;
        auto hist2 = hist;
        hist2[40] = 55;  // an earlier turn edited
        a.turn(cat(sys, hist), 0);
        const CacheMiss m = a.turn(cat(cat(sys, hist2), tail), 96);
        EXPECT_EQ(m.reason, "history_changed");
        EXPECT_EQ(m.at, 64 + 40);
    }
    {
        Audit a;
        a.turn(cat(sys, hist), 0, "k", {}, "m#1");
        EXPECT_EQ(a.turn(cat(cat(sys, hist), tail), 0, "k", {}, "m#2").reason, "model_changed");  // reloaded
        a.turn(cat(cat(sys, hist), tail), 0, "k", {}, "m#2", /*cache=*/false);
        const std::string text = a.audit.prometheus();
        EXPECT_NE(text.find("ferrox_prompt_cache_misses_total{reason=\"model_changed\"} 1"), std::string::npos) << text;
        EXPECT_NE(text.find("ferrox_prompt_cache_misses_total{reason=\"cache_off\"} 1"), std::string::npos) << text;
    }
}

TEST(PromptCacheAudit, WithoutAKeyAnotherConversationIsNotAnEdit) {
    Audit a;
    const auto sys = range(100, 64);
    a.turn(cat(sys, range(1000, 300)), 0, "");
    // Another user's first turn after the same system prompt: shares 64 of 364 tokens.
    EXPECT_EQ(a.turn(cat(sys, range(5000, 40)), 64, "").reason, "");
    // ... and when the shared system prompt was not even cached, that is an eviction.
    EXPECT_EQ(a.turn(cat(sys, range(7000, 40)), 0, "").reason, "evicted");
    // The first conversation continues, found by its beginning: no miss.
    EXPECT_EQ(a.turn(cat(cat(sys, range(1000, 300)), range(9000, 30)), 352, "").reason, "");
}

TEST(PromptCacheAudit, ConversationFingerprints) {
    Conversation c1, c2, c3;
    c1.messages.push_back({.role = "system", .content = "Be brief."});
    c1.tools = {{"a", "first", "{}"}, {"b", "second", "{}"}};
    c2 = c1;
    std::swap(c2.tools[0], c2.tools[1]);
    c3 = c1;
    c3.tools[1].description = "changed";
    const auto f1 = fingerprint_of(c1), f2 = fingerprint_of(c2), f3 = fingerprint_of(c3);
    EXPECT_EQ(f1.system, f2.system);
    EXPECT_NE(f1.tools, f2.tools);
    EXPECT_EQ(f1.tools_set, f2.tools_set);
    EXPECT_NE(f1.tools_set, f3.tools_set);
    EXPECT_EQ(fingerprint_of(Conversation{}).system, 0u);
}

}  // namespace
}  // namespace ferrox
