#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace ferrox {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(Sampler, GreedyIsArgmax) {
    SamplingParams p;
    p.temperature = 0;
    Sampler s(p, 5);
    auto l = logits_of({0.1f, 2.0f, -1.0f, 1.99f, 0.0f});
    EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
    SamplingParams p;
    p.temperature = 1.5f;
    p.top_k = 1;
    Sampler s(p, 4);
    for (int i = 0; i < 20; ++i) {
        auto l = logits_of({0.5f, 0.4f, 3.0f, 2.9f});
        EXPECT_EQ(s.sample(l, {}), 2);
    }
}

TEST(Sampler, SameSeedSameTokens) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.seed = 42;
    auto run = [&](uint64_t seed) {
        p.seed = seed;
        Sampler s(p, 8);
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) {
            auto l = logits_of({0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f});
            out.push_back(s.sample(l, {}));
        }
        return out;
    };
    EXPECT_EQ(run(42), run(42));
    EXPECT_NE(run(42), run(43));
}

TEST(Sampler, FrequenciesFollowSoftmax) {
    SamplingParams p;
    p.temperature = 0.5f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    Sampler s(p, 3);
    const float base[3] = {0.0f, 0.5f, 1.0f};
    std::map<int, int> counts;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
        auto l = logits_of({base[0], base[1], base[2]});
        ++counts[s.sample(l, {})];
    }
    double z = 0;
    for (float b : base) z += std::exp(b / 0.5);
    for (int t = 0; t < 3; ++t) {
        const double want = std::exp(base[t] / 0.5) / z;
        EXPECT_NEAR(counts[t] / double(n), want, 0.015) << "token " << t;
    }
}

TEST(Sampler, TopPKeepsSmallestPrefix) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.min_p = 0;
    p.top_p = 0.5f;  // token 0 alone has ~0.84 of the mass
    Sampler s(p, 3);
    for (int i = 0; i < 50; ++i) {
        auto l = logits_of({3.0f, 1.0f, 0.5f});
        EXPECT_EQ(s.sample(l, {}), 0);
    }
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.5f;  // token 2 has e^-3 of token 0's probability
    Sampler s(p, 3);
    for (int i = 0; i < 200; ++i) {
        auto l = logits_of({1.0f, 0.9f, -2.0f});
        EXPECT_NE(s.sample(l, {}), 2);
    }
}

TEST(Sampler, LogitBiasBans) {
    SamplingParams p;
    p.temperature = 0;
    p.logit_bias = {{1, -INFINITY}};
    Sampler s(p, 3);
    auto l = logits_of({0.0f, 5.0f, 1.0f});
    EXPECT_EQ(s.sample(l, {}), 2);
}

TEST(Sampler, PenaltiesOnlyInsideWindow) {
    SamplingParams p;
    p.temperature = 0;
    p.repeat_penalty = 10.0f;
    p.penalty_last_n = 2;
    Sampler s(p, 3);
    // Token 0 is best but was just generated: penalised below token 1.
    std::vector<int32_t> hist = {2, 0};
    auto l = logits_of({2.0f, 1.0f, 0.0f});
    EXPECT_EQ(s.sample(l, hist), 1);
    // Outside the window (last 2 are 1, 2): token 0 is not penalised.
    hist = {0, 1, 2};
    l = logits_of({2.0f, 1.0f, 0.0f});
    EXPECT_EQ(s.sample(l, hist), 0);
}

TEST(Sampler, FrequencyAndPresencePenalties) {
    SamplingParams p;
    p.temperature = 0;
    p.frequency_penalty = 0.6f;
    p.penalty_last_n = -1;
    Sampler s(p, 2);
    std::vector<int32_t> hist = {0, 0};  // token 0: -1.2
    auto l = logits_of({2.0f, 1.0f});
    EXPECT_EQ(s.sample(l, hist), 1);
    EXPECT_FLOAT_EQ(l[0], 0.8f);
    SamplingParams q;
    q.temperature = 0;
    q.presence_penalty = 0.5f;
    Sampler s2(q, 2);
    l = logits_of({2.0f, 1.0f});
    hist = {0, 0, 0};
    s2.sample(l, hist);
    EXPECT_FLOAT_EQ(l[0], 1.5f);  // once, however often it occurred
}

}  // namespace
}  // namespace ferrox
