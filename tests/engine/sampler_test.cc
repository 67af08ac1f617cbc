#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

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

// llama-server's post_sampling_probs: the distribution after top-k / top-p / min-p and the
// temperature, computed by hand for four logits.
TEST(Sampler, ChainProbsAreTheFilteredDistribution) {
    SamplingParams p;
    p.temperature = 0.5f;
    p.top_k = 3;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    Sampler s(p, 4);
    auto l = logits_of({1.0f, 3.0f, 2.0f, 0.5f});
    const int32_t tok = s.sample(l, {});
    std::vector<std::pair<int32_t, float>> out;
    s.chain_probs(8, &out);
    // top-k 3 keeps ids 1, 2, 0; at temperature 0.5 their weights are e^(2*(l - 3)).
    const double w1 = 1, w2 = std::exp(-2.0), w0 = std::exp(-4.0), z = w1 + w2 + w0;
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].first, 1);
    EXPECT_EQ(out[1].first, 2);
    EXPECT_EQ(out[2].first, 0);
    EXPECT_NEAR(out[0].second, w1 / z, 1e-6);
    EXPECT_NEAR(out[1].second, w2 / z, 1e-6);
    EXPECT_NEAR(out[2].second, w0 / z, 1e-6);
    for (const auto& [id, pr] : out) {
        if (id == tok) {
            EXPECT_NEAR(pr, s.last_prob(), 1e-6);
        }
    }
    s.chain_probs(1, &out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].first, 1);

    // Without top-k: every finite token is a candidate (the weights path).
    p.top_k = 0;
    Sampler all(p, 4);
    auto l2 = logits_of({1.0f, 3.0f, 2.0f, -std::numeric_limits<float>::infinity()});
    all.sample(l2, {});
    all.chain_probs(8, &out);
    ASSERT_EQ(out.size(), 3u);  // the banned token has probability 0 and is left out
    double sum = 0;
    for (const auto& [id, pr] : out) sum += pr;
    EXPECT_NEAR(sum, 1.0, 1e-6);

    // Greedy: the chosen token at 1.
    p.temperature = 0;
    Sampler g(p, 4);
    auto l3 = logits_of({1.0f, 3.0f, 2.0f, 0.5f});
    EXPECT_EQ(g.sample(l3, {}), 1);
    g.chain_probs(5, &out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].first, 1);
    EXPECT_EQ(out[0].second, 1.0f);
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

// The sampler before its candidate filter and vectorized argmax (a copy of its code as it was:
// every finite logit a candidate, a partial sort over all of them, the plain argmax loop),
// without bias and penalties, which run before both and are unchanged.
struct PlainSampler {
    SamplingParams p;
    std::mt19937_64 rng;
    float last_prob = 1.0f;
    explicit PlainSampler(const SamplingParams& params) : p(params), rng(params.seed) {}
    double uniform() { return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0); }
    // What sample() draws from: (probability, id) after every filter and the temperature.
    std::vector<std::pair<double, int32_t>> kept;
    int32_t sample(const std::vector<float>& logits) {
        kept.clear();
        const int32_t n = static_cast<int32_t>(logits.size());
        if (p.temperature <= 0.0f) {
            int32_t best = 0;
            for (int32_t i = 1; i < n; ++i)
                if (logits[i] > logits[best]) best = i;
            last_prob = 1.0f;
            return best;
        }
        std::vector<std::pair<float, int32_t>> cand;
        for (int32_t i = 0; i < n; ++i)
            if (std::isfinite(logits[i])) cand.emplace_back(logits[i], i);
        if (cand.empty()) return 0;
        auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
        size_t k = cand.size();
        if (p.top_k > 0) k = std::min(k, static_cast<size_t>(p.top_k));
        std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k), cand.end(), by_logit);
        cand.resize(k);
        {
            const float mx = cand[0].first;
            double sum = 0;
            for (const auto& c : cand) sum += std::exp(c.first - mx);
            if (p.top_p < 1.0f) {
                double cum = 0;
                size_t keep = cand.size();
                for (size_t i = 0; i < cand.size(); ++i) {
                    cum += std::exp(cand[i].first - mx) / sum;
                    if (cum >= p.top_p) {
                        keep = i + 1;
                        break;
                    }
                }
                cand.resize(keep);
            }
            if (p.min_p > 0.0f) {
                const float cut = mx + std::log(p.min_p);
                size_t keep = 1;
                while (keep < cand.size() && cand[keep].first >= cut) ++keep;
                cand.resize(keep);
            }
        }
        const float mx = cand[0].first;
        double sum = 0;
        for (auto& c : cand) {
            c.first = static_cast<float>(std::exp((c.first - mx) / p.temperature));
            sum += c.first;
        }
        for (const auto& c : cand) kept.emplace_back(c.first / sum, c.second);
        const double r = uniform() * sum;
        double acc = 0;
        for (const auto& c : cand) {
            acc += c.first;
            if (r < acc) {
                last_prob = static_cast<float>(c.first / sum);
                return c.second;
            }
        }
        last_prob = static_cast<float>(cand.back().first / sum);
        return cand.back().second;
    }
};

// The fast paths choose exactly what the plain code chose: random vocabularies (odd sizes, not
// multiples of the 16-lane groups or 64-logit chunks), logits rounded to few values so that
// ties abound, banned (-inf), NaN and +inf entries, every sampling setting, long runs of seeds.
// Without top-k the candidates are no longer fully sorted, so a draw may land on another token
// of the same distribution: there the token must be one the plain code could draw, with its
// probability.
TEST(Sampler, FastPathsChooseAsThePlainCode) {
    std::mt19937 rng(2026);
    const float inf = std::numeric_limits<float>::infinity();
    int n_checked = 0;
    for (int trial = 0; trial < 400; ++trial) {
        const int32_t n = 1 + static_cast<int32_t>(rng() % (trial % 4 == 0 ? 70 : 5000));
        std::vector<float> base(static_cast<size_t>(n));
        std::normal_distribution<float> nd(0.0f, 1.0f + static_cast<float>(trial % 7));
        const float step = trial % 3 == 0 ? 0.5f : trial % 3 == 1 ? 0.0f : 1e-3f;
        for (float& x : base) x = step > 0 ? std::round(nd(rng) / step) * step : nd(rng);
        if (trial % 5 == 1) base[rng() % n] = -inf;
        if (trial % 5 == 2) base[rng() % n] = std::nanf("");
        if (trial % 11 == 3) base[0] = std::nanf("");
        if (trial % 13 == 4) base[rng() % n] = inf;
        if (trial % 17 == 5) std::fill(base.begin(), base.end(), -inf);
        SamplingParams p;
        p.seed = 1000 + static_cast<uint64_t>(trial);
        p.temperature = trial % 6 == 0 ? 0.0f : 0.3f + 0.2f * static_cast<float>(trial % 8);
        const int ks[] = {0, 1, 2, 5, 40, 100, 1000};
        p.top_k = ks[trial % 7];
        p.top_p = trial % 4 == 0 ? 1.0f : 0.9f;
        p.min_p = trial % 3 == 0 ? 0.0f : 0.05f;
        Sampler fast(p, n);
        PlainSampler plain(p);
        for (int step_i = 0; step_i < 6; ++step_i) {
            std::vector<float> a = base, b = base;
            const int32_t got = fast.sample(a, {});
            const int32_t want = plain.sample(b);
            ++n_checked;
            if (p.top_k <= 0 && p.temperature > 0.0f && !plain.kept.empty()) {
                const auto it = std::find_if(plain.kept.begin(), plain.kept.end(),
                                             [got](const auto& k) { return k.second == got; });
                ASSERT_NE(it, plain.kept.end()) << "trial " << trial << ": token " << got << " was filtered out";
                ASSERT_NEAR(fast.last_prob(), it->first, 1e-6 + 1e-5 * it->first) << "trial " << trial;
                continue;
            }
            ASSERT_EQ(got, want) << "trial " << trial << " step " << step_i << " n " << n << " top_k " << p.top_k;
            ASSERT_EQ(fast.last_prob(), plain.last_prob) << "trial " << trial;
        }
    }
    EXPECT_EQ(n_checked, 2400);
}

// Without top-k over a whole vocabulary (49,152 ids, the default model's), where the sampler no
// longer sorts every candidate: top-p alone, with min-p, min-p alone and no filter at all, on
// a flat and a peaked distribution with banned, NaN and +inf entries; each draw is a token the
// plain code keeps, with its probability.
TEST(Sampler, WithoutTopKOverAWholeVocabularyKeepsThePlainSet) {
    const int32_t n = 49152;
    std::mt19937 rng(7);
    struct Cfg {
        float top_p, min_p, temperature;
    };
    const Cfg cfgs[] = {{0.9f, 0.0f, 1.0f}, {0.95f, 0.05f, 0.8f}, {1.0f, 0.05f, 0.7f}, {1.0f, 0.0f, 1.0f},
                        {1.0f, 0.0f, 0.6f}};
    int n_checked = 0;
    for (int dist = 0; dist < 2; ++dist) {
        std::normal_distribution<float> nd(0.0f, dist == 0 ? 1.0f : 3.0f);
        std::vector<float> base(static_cast<size_t>(n));
        for (float& x : base) x = nd(rng);
        if (dist == 1) base[123] += 12.0f, base[4567] += 11.0f;  // a few clear favourites
        base[5] = -std::numeric_limits<float>::infinity();
        base[6] = std::nanf("");
        base[n - 1] = std::numeric_limits<float>::infinity();
        for (const Cfg& c : cfgs) {
            SamplingParams p;
            p.top_k = 0;
            p.top_p = c.top_p;
            p.min_p = c.min_p;
            p.temperature = c.temperature;
            p.seed = 99 + static_cast<uint64_t>(dist);
            Sampler fast(p, n);
            PlainSampler plain(p);
            for (int draw = 0; draw < 4; ++draw) {
                std::vector<float> a = base, b = base;
                const int32_t got = fast.sample(a, {});
                plain.sample(b);
                const auto it = std::find_if(plain.kept.begin(), plain.kept.end(),
                                             [got](const auto& k) { return k.second == got; });
                ASSERT_NE(it, plain.kept.end()) << "dist " << dist << " top_p " << c.top_p << " min_p " << c.min_p
                                                << ": token " << got << " was filtered out";
                ASSERT_NEAR(fast.last_prob(), it->first, 1e-6 + 1e-5 * it->first);
                ++n_checked;
            }
        }
    }
    EXPECT_EQ(n_checked, 40);
}

}  // namespace
}  // namespace ferrox
