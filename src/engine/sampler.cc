#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/ops.h"

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

namespace {

// A lower bound on the k-th largest finite logit, from the largest of each chunk of 64: the k
// largest chunk maxima are k distinct logits, so at least k logits reach the k-th of them.
// -inf when it cannot bound (fewer chunks than k, or a chunk whose maximum is not finite).
float top_k_floor(const float* l, int32_t n, int k, std::vector<float>& scratch) {
    constexpr int32_t kChunk = 64;
    const float kNegInf = -std::numeric_limits<float>::infinity();
    scratch.clear();
    for (int32_t c = 0; c < n; c += kChunk) {
        float m = kNegInf;  // NaN never taken
        if (c + kChunk <= n) {
            float lanes[16];
            for (float& v : lanes) v = kNegInf;
            for (int32_t i = c; i < c + kChunk; i += 16) {
                for (int j = 0; j < 16; ++j) lanes[j] = lanes[j] < l[i + j] ? l[i + j] : lanes[j];
            }
            for (float v : lanes) m = m < v ? v : m;
        } else {
            for (int32_t i = c; i < n; ++i) m = m < l[i] ? l[i] : m;
        }
        if (m == std::numeric_limits<float>::infinity()) return kNegInf;
        scratch.push_back(m);
    }
    if (static_cast<int>(scratch.size()) < k) return kNegInf;
    std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), std::greater<float>());
    return scratch[k - 1];
}

}  // namespace

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    for (const auto& [id, bias] : p.logit_bias) {
        if (id >= 0 && id < n_vocab_) logits[id] += bias;
    }
    apply_penalties(logits, history);

    if (p.temperature <= 0.0f) {
        last_prob_ = 1.0f;
        return static_cast<int32_t>(argmax_first(logits.data(), n_vocab_));  // kernels/ops.h
    }

    // Candidates: the finite logits, or with top-k only those that can be among the k largest
    // (at or above top_k_floor): the same top k after the partial sort, from a few hundred
    // entries instead of the whole vocabulary.
    const float floor = p.top_k > 0 ? top_k_floor(logits.data(), n_vocab_, p.top_k, chunk_max_)
                                    : -std::numeric_limits<float>::infinity();
    cand_.clear();
    const float* l = logits.data();
    int32_t i = 0;
    for (; i + 16 <= n_vocab_; i += 16) {  // most groups of 16 hold no candidate: one test each
        int hit = 0;
        for (int j = 0; j < 16; ++j) hit |= l[i + j] >= floor;
        if (!hit) continue;
        for (int j = 0; j < 16; ++j) {
            if (l[i + j] >= floor && std::isfinite(l[i + j])) cand_.emplace_back(l[i + j], i + j);
        }
    }
    for (; i < n_vocab_; ++i) {
        if (l[i] >= floor && std::isfinite(l[i])) cand_.emplace_back(l[i], i);
    }
    if (cand_.empty()) return 0;  // every token banned: nothing sensible is left
    auto by_logit = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    // top-k: the k best, in order. Without top-k the candidates stay in id order, and are
    // ordered only as far as top-p needs (below): sorting a whole vocabulary cost 4.7 ms a token
    // at 49,152 entries. The distribution is the same; which token a given draw lands on is not
    // the order-dependent one of a fully sorted list.
    bool sorted = false;
    if (p.top_k > 0) {
        const size_t k = std::min(cand_.size(), static_cast<size_t>(p.top_k));
        std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(), by_logit);
        cand_.resize(k);
        sorted = true;
    }
    float mx = cand_[0].first;
    if (!sorted) {
        for (const auto& c : cand_) mx = std::max(mx, c.first);
    }

    // Probabilities over the survivors before temperature, as llama.cpp's top-p and min-p
    // see them.
    {
        double sum = 0;
        if (p.top_p < 1.0f) {
            for (const auto& c : cand_) sum += std::exp(c.first - mx);
        }
        // top-p: the smallest prefix (by logit) whose probability mass reaches top_p. Unsorted
        // candidates are ordered a growing prefix at a time (the nucleus is usually small).
        if (p.top_p < 1.0f) {
            size_t k = sorted ? cand_.size() : std::min<size_t>(cand_.size(), 64);
            for (;;) {
                if (!sorted) {
                    const auto end_k = cand_.begin() + static_cast<std::ptrdiff_t>(k);
                    if (k < cand_.size()) std::nth_element(cand_.begin(), end_k, cand_.end(), by_logit);
                    std::sort(cand_.begin(), end_k, by_logit);
                }
                double cum = 0;
                size_t keep = 0;
                for (size_t i = 0; i < k; ++i) {
                    cum += std::exp(cand_[i].first - mx) / sum;
                    if (cum >= p.top_p) {
                        keep = i + 1;
                        break;
                    }
                }
                if (keep > 0) {
                    cand_.resize(keep);
                    break;
                }
                if (k == cand_.size()) break;  // rounding kept the mass below top_p: keep all
                k = std::min(cand_.size(), k * 8);
            }
            sorted = true;
        }
        // min-p: drop tokens with probability below min_p times the top token's
        if (p.min_p > 0.0f) {
            const float cut = mx + std::log(p.min_p);
            if (sorted) {
                size_t keep = 1;
                while (keep < cand_.size() && cand_[keep].first >= cut) ++keep;
                cand_.resize(keep);
            } else {  // the same set, in id order (the top token is always kept: cut <= mx)
                cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [cut](const auto& c) { return c.first < cut; }),
                            cand_.end());
            }
        }
    }
    // temperature, then draw
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
