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

float top_k_logit_floor(const float* l, int32_t n, int k, std::vector<float>& scratch) {
    constexpr int32_t kChunk = 64;
    const float kNegInf = -std::numeric_limits<float>::infinity();
    const int32_t n_chunks = (n + kChunk - 1) / kChunk;
    if (n_chunks < k || k < 1) return kNegInf;
    scratch.resize(static_cast<size_t>(n_chunks));
    chunk_max(l, n, kChunk, scratch.data());  // kernels/ops.h; NaN never taken
    for (float m : scratch) {
        if (m == std::numeric_limits<float>::infinity()) return kNegInf;
    }
    std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), std::greater<float>());
    return scratch[k - 1];
}

namespace {

bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// top-p over candidates sorted by logit: the length of the smallest prefix whose probability
// (before the temperature: exp(logit - mx) / sum, with sum over every candidate the earlier
// filters left) reaches top_p; 0 when rounding keeps the whole list below it.
size_t nucleus(const std::vector<std::pair<float, int32_t>>& cand, float mx, double sum, float top_p) {
    double cum = 0;
    for (size_t i = 0; i < cand.size(); ++i) {
        cum += std::exp(cand[i].first - mx) / sum;
        if (cum >= top_p) return i + 1;
    }
    return 0;
}

}  // namespace

// The filters run in llama.cpp's order on the logits before the temperature: top-k, top-p,
// min-p; then the temperature and one draw.
int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    for (const auto& [id, bias] : p.logit_bias) {
        if (id >= 0 && id < n_vocab_) logits[id] += bias;
    }
    apply_penalties(logits, history);
    drawn_ = Drawn::kNone;
    if (p.temperature <= 0.0f) {
        last_prob_ = 1.0f;
        drawn_ = Drawn::kGreedy;
        last_token_ = static_cast<int32_t>(argmax_first(logits.data(), n_vocab_));  // kernels/ops.h
        return last_token_;
    }
    if (p.top_k <= 0) return sample_without_top_k(logits.data());

    // Candidates: those that can be among the k largest (at or above top_k_floor), the same top
    // k after the partial sort, from a few hundred entries instead of the whole vocabulary.
    const float* l = logits.data();
    collect(l, top_k_logit_floor(l, n_vocab_, p.top_k, chunk_max_));
    if (cand_.empty()) return 0;  // every token banned: nothing sensible is left
    const size_t k = std::min(cand_.size(), static_cast<size_t>(p.top_k));
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(), by_logit);
    cand_.resize(k);
    const float mx = cand_[0].first;
    if (p.top_p < 1.0f) {
        double sum = 0;
        for (const auto& c : cand_) sum += std::exp(c.first - mx);
        const size_t keep = nucleus(cand_, mx, sum, p.top_p);
        if (keep > 0) cand_.resize(keep);
    }
    min_p_prefix(mx);
    return draw(mx);
}

// Without top-k every finite logit is a candidate. Sorting 49,152 of them took ~3 ms a token
// and their exps ~0.7 ms (16 streams of such requests: 10-40 ms of sampling per step on the
// engine thread, more than the forward pass), so: the weights of the whole vocabulary in one
// vectorized pass (kernels/ops.h's exp_shifted), then only what each filter needs sorted. The
// top-p nucleus is a prefix of the logit order: one pass bins the mass by depth below the
// maximum, and only the candidates down to the bin where it reaches top_p are sorted; min-p
// alone keeps the candidates at or above its cut; with neither, the draw walks the weights in
// id order. The kept set and the probabilities are the full sort's (up to the exp's rounding:
// tests/engine/sampler_test.cc); which token of equal probability mass a draw lands on
// follows the candidates' order.
int32_t Sampler::sample_without_top_k(const float* l) {
    const SamplingParams& p = params_;
    const int32_t n = n_vocab_;
    const float mx = max_finite(l, n);
    if (!std::isfinite(mx)) return 0;  // every token banned (or NaN): nothing sensible is left
    weights_.resize(static_cast<size_t>(n));
    float* w = weights_.data();
    cand_.clear();
    if (p.top_p < 1.0f) {
        const double sum = exp_shifted(l, mx, 1.0f, w, n);
        const double want = static_cast<double>(p.top_p) * sum;
        // The mass by depth below the maximum, in bins of 1/32 over [0, 32) and one for deeper:
        // the first depth where it reaches top_p bounds the nucleus.
        constexpr int kBins = 1024;
        constexpr float kPerUnit = 32.0f;
        double bins[kBins + 1] = {};
        for (int32_t i = 0; i < n; ++i) {
            const float v = l[i];
            if (v <= mx && v >= mx - kBins / kPerUnit) {  // finite and within the binned depth
                const int b = static_cast<int>((mx - v) * kPerUnit);
                bins[b < kBins ? b : kBins - 1] += w[i];
            } else {
                bins[kBins] += w[i];  // deeper (NaN and +-inf weigh 0)
            }
        }
        double cum = 0;
        int b = 0;
        while (b < kBins && (cum += bins[b]) < want) ++b;
        // The candidates at or above the bin's floor, a prefix of the logit order holding the
        // nucleus (unless rounding put its end a little lower: then a bin more, down to all).
        for (;; ++b) {
            const bool all = b >= kBins;
            const float th = all ? -std::numeric_limits<float>::infinity() : mx - static_cast<float>(b + 1) / kPerUnit;
            collect(l, th);
            std::sort(cand_.begin(), cand_.end(), by_logit);
            const size_t keep = nucleus(cand_, mx, sum, p.top_p);
            if (keep > 0) {
                cand_.resize(keep);
                break;
            }
            if (all) break;  // rounding kept the mass below top_p: keep every candidate
        }
        min_p_prefix(mx);
        return draw(mx);
    }
    if (p.min_p > 0.0f) {  // the candidates at or above the cut, in id order
        collect(l, mx + std::log(p.min_p));
        return draw(mx);
    }
    // No filter: every finite token, drawn at the temperature from the weights in id order.
    const double sum = exp_shifted(l, mx, 1.0f / p.temperature, w, n);
    drawn_ = Drawn::kWeights;
    last_sum_ = sum;
    const double r = uniform() * sum;
    double acc = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; ++i) {
        if (!std::isfinite(l[i])) continue;
        last = i;
        acc += w[i];
        if (r < acc) {
            last_prob_ = static_cast<float>(w[i] / sum);
            return i;
        }
    }
    last_prob_ = static_cast<float>(w[last] / sum);
    return last;
}

// cand_ = the finite logits at or above th, in id order (kernels/ops.h: a vector compare each
// 8 logits; with a floor near the top few are).
void Sampler::collect(const float* l, float th) {
    ids_.resize(static_cast<size_t>(n_vocab_));
    const int64_t k = ids_at_or_above(l, n_vocab_, th, ids_.data());
    cand_.clear();
    for (int64_t j = 0; j < k; ++j) {
        const int32_t i = ids_[static_cast<size_t>(j)];
        if (std::isfinite(l[i])) cand_.emplace_back(l[i], i);
    }
}

// min-p on candidates sorted by logit (mx the first's): drops tokens with probability below
// min_p times the top token's, the top token always kept.
void Sampler::min_p_prefix(float mx) {
    if (params_.min_p <= 0.0f) return;
    const float cut = mx + std::log(params_.min_p);
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].first >= cut) ++keep;
    cand_.resize(keep);
}

// The temperature over the candidates left, then one draw; mx is the largest logit among them.
int32_t Sampler::draw(float mx) {
    const SamplingParams& p = params_;
    double sum = 0;
    for (auto& c : cand_) {
        c.first = static_cast<float>(std::exp((c.first - mx) / p.temperature));
        sum += c.first;
    }
    drawn_ = Drawn::kCandidates;
    last_sum_ = sum;
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

void Sampler::chain_probs(int k, std::vector<std::pair<int32_t, float>>* out) const {
    out->clear();
    if (k <= 0) return;
    if (drawn_ == Drawn::kGreedy) {
        out->emplace_back(last_token_, 1.0f);
        return;
    }
    std::vector<std::pair<float, int32_t>> w;  // (weight, id)
    if (drawn_ == Drawn::kCandidates) {
        w = cand_;
    } else if (drawn_ == Drawn::kWeights) {
        for (int32_t i = 0; i < n_vocab_; ++i) {
            if (weights_[static_cast<size_t>(i)] > 0) w.emplace_back(weights_[static_cast<size_t>(i)], i);
        }
    }
    if (w.empty() || !(last_sum_ > 0)) return;
    const size_t n = std::min(w.size(), static_cast<size_t>(k));
    std::partial_sort(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n), w.end(), by_logit);
    for (size_t i = 0; i < n && w[i].first > 0; ++i) {
        out->emplace_back(w[i].second, static_cast<float>(w[i].first / last_sum_));
    }
}

}  // namespace ferrox
