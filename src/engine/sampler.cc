#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace ferrox {

Sampler::Sampler(const SamplingParams& params, int n_vocab)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed) {
    cand_.reserve(n_vocab);
    counts_.assign(n_vocab, 0);
}

double Sampler::uniform() {
    // 53 random bits -> [0, 1): the same on every platform, unlike std distributions.
    return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    if (p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) {
        return;
    }
    size_t n = history.size();
    if (p.penalty_last_n >= 0) n = std::min(n, static_cast<size_t>(p.penalty_last_n));
    std::span<const int32_t> window = history.subspan(history.size() - n);
    for (int32_t t : window) {
        if (t >= 0 && t < n_vocab_) ++counts_[t];
    }
    for (int32_t t : window) {
        if (t < 0 || t >= n_vocab_ || counts_[t] == 0) continue;
        const int c = counts_[t];
        counts_[t] = 0;  // apply once per distinct token
        float& l = logits[t];
        if (p.repeat_penalty != 1.0f) l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
        l -= static_cast<float>(c) * p.frequency_penalty + (c > 0 ? p.presence_penalty : 0.0f);
    }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    for (const auto& [id, bias] : p.logit_bias) {
        if (id >= 0 && id < n_vocab_) logits[id] += bias;
    }
    apply_penalties(logits, history);

    if (p.temperature <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n_vocab_; ++i) {
            if (logits[i] > logits[best]) best = i;
        }
        last_prob_ = 1.0f;
        return best;
    }

    cand_.clear();
    for (int32_t i = 0; i < n_vocab_; ++i) {
        if (std::isfinite(logits[i])) cand_.emplace_back(logits[i], i);
    }
    if (cand_.empty()) return 0;  // every token banned: nothing sensible is left
    auto by_logit = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    // top-k
    size_t k = cand_.size();
    if (p.top_k > 0) k = std::min(k, static_cast<size_t>(p.top_k));
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(), by_logit);
    cand_.resize(k);

    // Probabilities over the survivors before temperature, as llama.cpp's top-p and min-p
    // see them.
    {
        const float mx = cand_[0].first;
        double sum = 0;
        for (const auto& c : cand_) sum += std::exp(c.first - mx);
        // top-p: the smallest prefix whose probability mass reaches top_p
        if (p.top_p < 1.0f) {
            double cum = 0;
            size_t keep = cand_.size();
            for (size_t i = 0; i < cand_.size(); ++i) {
                cum += std::exp(cand_[i].first - mx) / sum;
                if (cum >= p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            cand_.resize(keep);
        }
        // min-p: drop tokens with probability below min_p times the top token's
        if (p.min_p > 0.0f) {
            const float cut = mx + std::log(p.min_p);
            size_t keep = 1;
            while (keep < cand_.size() && cand_[keep].first >= cut) ++keep;
            cand_.resize(keep);
        }
    }
    // temperature, then draw
    const float mx = cand_[0].first;
    double sum = 0;
    for (auto& c : cand_) {
        c.first = static_cast<float>(std::exp((c.first - mx) / p.temperature));
        sum += c.first;
    }
    const double r = uniform() * sum;
    double acc = 0;
    for (const auto& c : cand_) {
        acc += c.first;
        if (r < acc) {
            last_prob_ = static_cast<float>(c.first / sum);
            return c.second;
        }
    }
    last_prob_ = static_cast<float>(cand_.back().first / sum);
    return cand_.back().second;
}

}  // namespace ferrox
