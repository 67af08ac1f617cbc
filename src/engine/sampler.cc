#include "engine/sampler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "kernels/ops.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferrox {

namespace {

// The samplers a request turns on, in its order (temperature always: it also sets the draw).
std::vector<SamplerKind> active_order(const SamplingParams& p, const std::vector<SamplerKind>& order) {
    std::vector<SamplerKind> out;
    for (SamplerKind k : order) {
        bool on = true;
        switch (k) {
            case SamplerKind::kPenalties:
                on = p.penalty_last_n != 0 &&
                     (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f);
                break;
            case SamplerKind::kDry:
                on = p.dry_multiplier != 0.0f && p.dry_base >= 1.0f && p.dry_penalty_last_n != 0;
                break;
            case SamplerKind::kTopNSigma: on = p.top_n_sigma > 0.0f; break;
            case SamplerKind::kTopK: on = p.top_k > 0; break;
            case SamplerKind::kTypicalP: on = p.typical_p < 1.0f; break;
            case SamplerKind::kTopP: on = p.top_p < 1.0f; break;
            case SamplerKind::kMinP: on = p.min_p > 0.0f; break;
            case SamplerKind::kXtc: on = p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f; break;
            case SamplerKind::kTemperature: on = true; break;
        }
        if (on) out.push_back(k);
    }
    return out;
}

}  // namespace

// The vectorized path runs penalties, top-k, top-p, min-p and the temperature in that order:
// a request whose active samplers are exactly those, in that order, gets it.
Sampler::Sampler(const SamplingParams& params, int n_vocab, std::shared_ptr<const DryBreakers> breakers)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed), breakers_(std::move(breakers)) {
    cand_.reserve(n_vocab);
    counts_.assign(n_vocab, 0);
    const std::vector<SamplerKind> fast = {SamplerKind::kPenalties, SamplerKind::kTopK, SamplerKind::kTopP,
                                           SamplerKind::kMinP, SamplerKind::kTemperature};
    general_ = params.mirostat != 0 || params.dynatemp_range > 0.0f ||
               active_order(params, params.samplers) != active_order(params, fast);
    if (general_) {
        chain_.reserve(static_cast<size_t>(n_vocab));
        dry_max_.assign(static_cast<size_t>(n_vocab), 0);
        mu_ = 2.0f * params.mirostat_tau;
    }
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
    if (general_) return sample_chain(logits, history);
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


// ---- llama.cpp's general chain ------------------------------------------------------------
// Each step below transcribes the llama.cpp sampler of the same name (src/llama-sampler.cpp,
// min_keep 0 as llama-server sets it), over chain_ as its llama_token_data_array. The kept
// candidates and their probabilities are llama.cpp's (tests/engine/sampler_golden_test.cc);
// how they are found differs where llama.cpp sorts more than it needs (top-k, typical-p and
// mirostat select, then sort only what they keep), and sums may round in another order
// (top-n-sigma's lanes). Departures where llama.cpp's result is unspecified or NaN: sorts
// break ties by the lower id; typical-p's entropy skips candidates of probability 0 (llama.cpp's
// 0 * log 0 is NaN). The random draws are ferrox's own (the same seed gives the same tokens
// here, not llama.cpp's).

std::vector<SamplerKind> default_sampler_order() {
    return {SamplerKind::kPenalties, SamplerKind::kDry,  SamplerKind::kTopNSigma,
            SamplerKind::kTopK,      SamplerKind::kTypicalP, SamplerKind::kTopP,
            SamplerKind::kMinP,      SamplerKind::kXtc,  SamplerKind::kTemperature};
}

const char* sampler_name(SamplerKind k) {
    switch (k) {
        case SamplerKind::kPenalties: return "penalties";
        case SamplerKind::kDry: return "dry";
        case SamplerKind::kTopNSigma: return "top_n_sigma";
        case SamplerKind::kTopK: return "top_k";
        case SamplerKind::kTypicalP: return "typ_p";
        case SamplerKind::kTopP: return "top_p";
        case SamplerKind::kMinP: return "min_p";
        case SamplerKind::kXtc: return "xtc";
        case SamplerKind::kTemperature: return "temperature";
    }
    return "";
}

bool parse_sampler_names(const std::vector<std::string>& names, std::vector<SamplerKind>* out, std::string* bad) {
    out->clear();
    for (const std::string& name : names) {
        std::string n = name;
        for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        bool found = false;
        for (SamplerKind k : default_sampler_order()) {
            // llama.cpp's aliases of a name with '_': kebab-case and without the '_'.
            std::string canon = sampler_name(k), kebab = canon, bare;
            std::replace(kebab.begin(), kebab.end(), '_', '-');
            for (char c : canon) {
                if (c != '_') bare += c;
            }
            if (n == canon || (canon.find('_') != std::string::npos && (n == kebab || n == bare))) {
                out->push_back(k);
                found = true;
                break;
            }
        }
        if (!found && (n == "nucleus" || n == "temp" || n == "typ")) {
            out->push_back(n == "nucleus" ? SamplerKind::kTopP
                           : n == "temp"  ? SamplerKind::kTemperature
                                          : SamplerKind::kTypicalP);
            found = true;
        }
        if (!found) {
            *bad = name;
            return false;
        }
    }
    return true;
}

bool parse_sampler_chars(std::string_view chars, std::vector<SamplerKind>* out, std::string* bad) {
    static constexpr std::pair<char, SamplerKind> kChars[] = {
        {'e', SamplerKind::kPenalties}, {'d', SamplerKind::kDry},  {'s', SamplerKind::kTopNSigma},
        {'k', SamplerKind::kTopK},      {'y', SamplerKind::kTypicalP}, {'p', SamplerKind::kTopP},
        {'m', SamplerKind::kMinP},      {'x', SamplerKind::kXtc},  {'t', SamplerKind::kTemperature}};
    out->clear();
    for (char c : chars) {
        const auto* it = std::find_if(std::begin(kChars), std::end(kChars), [c](const auto& e) { return e.first == c; });
        if (it == std::end(kChars)) {
            *bad = std::string(1, c);
            return false;
        }
        out->push_back(it->second);
    }
    return true;
}

std::shared_ptr<const DryBreakers> build_dry_breakers(
    const std::vector<std::string>& breakers, int n_vocab, const std::function<std::string_view(int32_t)>& piece,
    const std::function<std::vector<int32_t>(std::string_view)>& tokenize) {
    constexpr size_t kMaxChars = 40, kMaxTail = 20;
    auto out = std::make_shared<DryBreakers>();
    for (std::string str : breakers) {
        if (str.empty()) continue;
        if (str.size() > kMaxChars) str.resize(kMaxChars);
        for (int32_t id = 0; id < n_vocab; ++id) {
            const std::string_view word = piece(id);
            if (word.find(str) != std::string_view::npos) {
                out->heads.emplace(id, std::vector<int32_t>());
                continue;
            }
            // A suffix of the token that is a prefix of the breaker: the breaker's rest tokenized.
            for (size_t pos = word.find(str[0]); pos != std::string_view::npos; pos = word.find(str[0], pos + 1)) {
                size_t i = 1;
                bool match = true;
                for (; i < str.size() && i + pos < word.size(); ++i) {
                    if (word[pos + i] != str[i]) {
                        match = false;
                        break;
                    }
                }
                if (!match) continue;
                std::vector<int32_t> tail = tokenize(std::string_view(str).substr(i));
                if (tail.size() > kMaxTail) tail.resize(kMaxTail);
                auto [b, e] = out->heads.equal_range(id);
                if (std::none_of(b, e, [&](const auto& kv) { return kv.second == tail; })) {
                    out->heads.emplace(id, std::move(tail));
                }
            }
        }
    }
    return out;
}

namespace {

bool data_by_logit(const auto& a, const auto& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

// llama.cpp's common_sampler: logit bias (done by sample()), then the order's samplers and a
// draw, or with mirostat the temperature and mirostat alone (no penalties or DRY there).
int32_t Sampler::sample_chain(std::span<float> logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    full_ = true;
    sorted_ = false;
    drawn_ = Drawn::kNone;
    if (p.mirostat != 0) return chain_mirostat(logits.data());
    for (SamplerKind k : p.samplers) {
        switch (k) {
            case SamplerKind::kPenalties: chain_penalties(logits, history); break;
            case SamplerKind::kDry: chain_dry(logits, history); break;
            case SamplerKind::kTopNSigma: chain_top_n_sigma(logits); break;
            case SamplerKind::kTopK: chain_top_k(logits.data(), p.top_k); break;
            case SamplerKind::kTypicalP:
                if (p.typical_p < 1.0f) materialize(logits.data()), chain_typical();
                break;
            case SamplerKind::kTopP:
                if (p.top_p < 1.0f) materialize(logits.data()), chain_top_p();
                break;
            case SamplerKind::kMinP:
                if (p.min_p > 0.0f) materialize(logits.data()), chain_min_p();
                break;
            case SamplerKind::kXtc:
                if (p.xtc_probability > 0.0f && p.xtc_threshold <= 0.5f) materialize(logits.data()), chain_xtc();
                break;
            case SamplerKind::kTemperature: materialize(logits.data()), chain_temp_ext(); break;
        }
    }
    materialize(logits.data());
    return chain_draw();
}

// The whole row as candidates, in id order (llama.cpp's starting array).
void Sampler::materialize(const float* logits) {
    if (!full_) return;
    full_ = false;
    sorted_ = false;
    chain_.resize(static_cast<size_t>(n_vocab_));
    for (int32_t i = 0; i < n_vocab_; ++i) chain_[static_cast<size_t>(i)] = {i, logits[i], 0.0f};
}

void Sampler::chain_sort() {
    if (sorted_) return;
    std::sort(chain_.begin(), chain_.end(), data_by_logit<TokenData, TokenData>);
    sorted_ = true;
}

// llama_sampler_softmax_impl: p = exp(logit - max) / sum, in float.
void Sampler::chain_softmax(bool sort) {
    if (chain_.empty()) return;
    if (sort) chain_sort();
    float mx = chain_[0].logit;
    if (!sorted_) {
        for (const TokenData& t : chain_) mx = std::max(mx, t.logit);
    }
    float sum = 0.0f;
    for (TokenData& t : chain_) {
        t.p = std::exp(t.logit - mx);
        sum += t.p;
    }
    for (TokenData& t : chain_) t.p /= sum;
}

void Sampler::chain_penalties(std::span<float> logits, std::span<const int32_t> history) {
    if (full_) {
        apply_penalties(logits, history);
        return;
    }
    const SamplingParams& p = params_;
    if (p.penalty_last_n == 0 ||
        (p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f)) {
        return;
    }
    size_t n = history.size();
    if (p.penalty_last_n >= 0) n = std::min(n, static_cast<size_t>(p.penalty_last_n));
    const std::span<const int32_t> window = history.subspan(history.size() - n);
    for (int32_t t : window) {
        if (t >= 0 && t < n_vocab_) ++counts_[t];
    }
    for (TokenData& t : chain_) {
        const int c = counts_[t.id];
        if (c == 0) continue;
        if (p.repeat_penalty != 1.0f) t.logit = t.logit <= 0 ? t.logit * p.repeat_penalty : t.logit / p.repeat_penalty;
        t.logit -= static_cast<float>(c) * p.frequency_penalty + static_cast<float>(c > 0) * p.presence_penalty;
    }
    for (int32_t t : window) {
        if (t >= 0 && t < n_vocab_) counts_[t] = 0;
    }
    sorted_ = false;
}

// llama_sampler_dry_apply over the last dry_penalty_last_n tokens of the sequence (llama-server
// feeds the sampler the prompt and every generated token). rat(i): the i-th token from the end.
void Sampler::chain_dry(std::span<float> logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    if (p.dry_multiplier == 0.0f || p.dry_base < 1.0f || p.dry_penalty_last_n == 0) return;
    const int n_hist = static_cast<int>(std::min<size_t>(history.size(), INT32_MAX));
    const int last_n = p.dry_penalty_last_n < 0 ? n_hist : std::min(n_hist, p.dry_penalty_last_n);
    if (last_n <= p.dry_allowed_length) return;
    auto rat = [&](int i) { return history[history.size() - 1 - static_cast<size_t>(i)]; };
    static const std::vector<int32_t> kNoTail;

    // Step 1: the nearest sequence breaker bounds how far back a repeat may reach.
    int rep_limit = last_n;
    if (breakers_) {
        for (int i = 0; i < last_n; ++i) {
            auto [b, e] = breakers_->heads.equal_range(rat(i));
            if (b == e) continue;
            int longest = -1;
            for (auto it = b; it != e; ++it) {
                const int seq_len = static_cast<int>(it->second.size());
                if (seq_len > longest && seq_len <= i) {
                    bool match = true;
                    for (int off = 0; off < seq_len; ++off) {
                        if (it->second[static_cast<size_t>(off)] != rat(i - off - 1)) {
                            match = false;
                            break;
                        }
                    }
                    if (match) longest = seq_len;
                }
            }
            if (longest >= 0) {
                rep_limit = i - longest;
                break;
            }
        }
    }
    if (rep_limit < p.dry_allowed_length) return;

    // Step 2: the Z-algorithm, backwards: dry_count_[last - k] = how long the suffix repeats
    // ending k tokens back.
    dry_count_.assign(static_cast<size_t>(last_n), 0);
    {
        const int last = last_n - 1;
        int rt = 0, lt = 0;
        for (int k = 1; k < last_n; ++k) {
            if (k > rt) {
                int n = 0;
                while (n + k < last_n && rat(n) == rat(n + k)) ++n;
                dry_count_[static_cast<size_t>(last - k)] = std::min(n, rep_limit);
                if (n > 0) {
                    lt = k;
                    rt = k + n - 1;
                }
            } else {
                const int pair = k - lt;
                const int right_part_len = rt - k + 1;
                if (dry_count_[static_cast<size_t>(last - pair)] < right_part_len) {
                    dry_count_[static_cast<size_t>(last - k)] =
                        std::min(dry_count_[static_cast<size_t>(last - pair)], rep_limit);
                } else {
                    int i = rt + 1;
                    while (i < last_n && rat(i) == rat(i - k)) ++i;
                    dry_count_[static_cast<size_t>(last - k)] = std::min(i - k, rep_limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }
    }

    // Step 3: the token after each repeat would extend it: its longest such repeat.
    for (int i = 0; i < last_n - 1; ++i) {
        const int repeat_len = dry_count_[static_cast<size_t>(i)];
        if (repeat_len < p.dry_allowed_length) continue;
        const int32_t tok = rat(last_n - 2 - i);
        if (tok < 0 || tok >= n_vocab_) continue;
        int32_t& m = dry_max_[static_cast<size_t>(tok)];
        if (m == 0) dry_touched_.push_back(tok);
        m = std::max(m, repeat_len + 1);  // stored +1: 0 means none (repeat_len may be 0)
    }

    // Step 4: multiplier * base^(length - allowed), the exponent capped below float overflow;
    // a token that alone is a sequence breaker is never penalized.
    constexpr float kFloatMaxLog = 88.7228391f;
    int max_exponent = 0;
    if (p.dry_base > 1.000001f) max_exponent = static_cast<int>(kFloatMaxLog / std::log(p.dry_base));
    auto penalty_of = [&](int32_t id, float* pen) {
        const int32_t m = dry_max_[static_cast<size_t>(id)];
        if (m == 0) return false;
        if (breakers_) {
            auto [b, e] = breakers_->heads.equal_range(id);
            for (auto it = b; it != e; ++it) {
                if (it->second.empty()) return false;
            }
        }
        int repeat_exp = (m - 1) - p.dry_allowed_length;
        if (max_exponent > 0 && repeat_exp > max_exponent) repeat_exp = max_exponent;
        *pen = p.dry_multiplier * std::pow(p.dry_base, static_cast<float>(repeat_exp));
        return true;
    };
    float pen = 0;
    if (full_) {
        for (int32_t id : dry_touched_) {
            if (penalty_of(id, &pen)) logits[static_cast<size_t>(id)] -= pen;
        }
    } else {
        for (TokenData& t : chain_) {
            if (penalty_of(t.id, &pen)) t.logit -= pen;
        }
        sorted_ = false;
    }
    for (int32_t id : dry_touched_) dry_max_[static_cast<size_t>(id)] = 0;
    dry_touched_.clear();
}

// llama_sampler_top_n_sigma_apply: drops (-inf) what lies more than n standard deviations of
// the logits (-inf ones left out) below the largest. Over a whole vocabulary llama.cpp's loops
// (one float sum, a branch per logit) cost ~140 us a token on 49,152 logits, which -O2 leaves
// scalar; here each pass is branch-free over 4 float lanes (SSE2, every x86-64). The sums round
// in another order than llama.cpp's single float chain, so the cut can differ only for a
// logit within ~1e-6 of it.
void Sampler::chain_top_n_sigma(std::span<float> logits) {
    const float n = params_.top_n_sigma;
    float* l = full_ ? logits.data() : nullptr;
    const size_t size = full_ ? static_cast<size_t>(n_vocab_) : chain_.size();
    if (n <= 0.0f || size <= 1) return;
    if (!full_) {  // a few candidates: their logits in a row
        weights_.resize(size);
        for (size_t i = 0; i < size; ++i) weights_[i] = chain_[i].logit;
        l = weights_.data();
    }
    const float kNegInf = -std::numeric_limits<float>::infinity();
    size_t i0 = 0;
    float mx = l[0];
    double s = 0, valid = 0, a = 0;
#if defined(__SSE2__)
    const size_t body = size / 4 * 4;
    const __m128 neg_inf = _mm_set1_ps(kNegInf), one = _mm_set1_ps(1.0f);
    __m128 vmx = _mm_set1_ps(l[0]), vsum = _mm_setzero_ps(), vcnt = _mm_setzero_ps();
    for (size_t i = 0; i < body; i += 4) {
        const __m128 x = _mm_loadu_ps(l + i);
        const __m128 ok = _mm_cmpneq_ps(x, neg_inf);
        vmx = _mm_max_ps(vmx, x);
        vsum = _mm_add_ps(vsum, _mm_and_ps(ok, x));
        vcnt = _mm_add_ps(vcnt, _mm_and_ps(ok, one));
    }
    alignas(16) float t[4];
    _mm_store_ps(t, vmx);
    for (float v : t) mx = std::max(mx, v);
    _mm_store_ps(t, vsum);
    for (float v : t) s += v;
    _mm_store_ps(t, vcnt);
    for (float v : t) valid += v;
    i0 = body;
#endif
    for (size_t i = i0; i < size; ++i) {
        if (l[i] != kNegInf) {
            mx = std::max(mx, l[i]);
            s += l[i];
            valid += 1;
        }
    }
    const float mean = valid > 0 ? static_cast<float>(s / valid) : 0;
#if defined(__SSE2__)
    const __m128 vmean = _mm_set1_ps(mean);
    __m128 vacc = _mm_setzero_ps();
    for (size_t i = 0; i < body; i += 4) {
        const __m128 x = _mm_loadu_ps(l + i);
        const __m128 d = _mm_and_ps(_mm_cmpneq_ps(x, neg_inf), _mm_sub_ps(x, vmean));
        vacc = _mm_add_ps(vacc, _mm_mul_ps(d, d));
    }
    _mm_store_ps(t, vacc);
    for (float v : t) a += v;
#endif
    for (size_t i = i0; i < size; ++i) {
        if (l[i] != kNegInf) a += static_cast<double>(l[i] - mean) * (l[i] - mean);
    }
    const float sd = valid > 0 ? static_cast<float>(std::sqrt(a / valid)) : 0;
    const float cut = mx - n * sd;
#if defined(__SSE2__)
    const __m128 vcut = _mm_set1_ps(cut);
    for (size_t i = 0; i < body; i += 4) {
        const __m128 x = _mm_loadu_ps(l + i);
        const __m128 drop = _mm_cmplt_ps(x, vcut);
        _mm_storeu_ps(l + i, _mm_or_ps(_mm_and_ps(drop, neg_inf), _mm_andnot_ps(drop, x)));
    }
#endif
    for (size_t i = i0; i < size; ++i) l[i] = l[i] < cut ? kNegInf : l[i];
    if (!full_) {
        for (size_t i = 0; i < size; ++i) chain_[i].logit = l[i];
    }
}

// llama_sampler_top_k_impl. From the whole row, only the logits that can be among the k
// largest are collected (top_k_logit_floor).
void Sampler::chain_top_k(const float* logits, int k) {
    if (k <= 0) return;
    if (full_) {
        // (a floor of -inf: fewer than k chunks hold a finite logit, as after top-n-sigma; the
        // finite ones are then the candidates, not the whole row)
        const float floor = top_k_logit_floor(logits, n_vocab_, k, chunk_max_);
        collect(logits, std::max(floor, std::numeric_limits<float>::lowest()));
        full_ = false;
        chain_.clear();
        for (const auto& [l, id] : cand_) chain_.push_back({id, l, 0.0f});
        // Fewer finite logits than k: llama.cpp's top k then holds -inf ones too (which of
        // them is unspecified; they weigh 0), and the count matters to dynamic temperature.
        const float kNegInf = -std::numeric_limits<float>::infinity();
        for (int32_t i = 0; i < n_vocab_ && chain_.size() < static_cast<size_t>(k); ++i) {
            if (logits[i] == kNegInf) chain_.push_back({i, kNegInf, 0.0f});
        }
        sorted_ = false;
    }
    const size_t kk = std::min(chain_.size(), static_cast<size_t>(k));
    if (!sorted_) {
        std::partial_sort(chain_.begin(), chain_.begin() + static_cast<std::ptrdiff_t>(kk), chain_.end(),
                          data_by_logit<TokenData, TokenData>);
    }
    chain_.resize(kk);
    sorted_ = true;
}

// llama_sampler_typical_apply: the tokens whose surprise is closest to the entropy, until their
// mass exceeds typical_p.
void Sampler::chain_typical() {
    if (chain_.empty()) return;
    // llama.cpp sorts by logit for the softmax, then by score: one sort by (score, logit, id)
    // gives that order (ties of score in logit order) at half the cost.
    chain_softmax(false);
    float entropy = 0.0f;
    for (const TokenData& t : chain_) {
        if (t.p > 0.0f) entropy += -t.p * std::log(t.p);
    }
    const size_t n = chain_.size();
    scores_.resize(n);
    order_.resize(n);
    for (size_t i = 0; i < n; ++i) scores_[i] = std::fabs(-std::log(chain_[i].p) - entropy);
    std::iota(order_.begin(), order_.end(), 0);
    auto less = [&](int32_t a, int32_t b) {
        if (scores_[a] != scores_[b]) return scores_[a] < scores_[b];
        return data_by_logit(chain_[static_cast<size_t>(a)], chain_[static_cast<size_t>(b)]);
    };
    // The shortest prefix in that order whose mass exceeds typical_p, by selection (each round
    // partitions the range left, halving it) instead of sorting all n; then only it is sorted.
    const double want = params_.typical_p;
    size_t lo = 0, hi = n, last = n;
    double base = 0;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const auto first = order_.begin();
        std::nth_element(first + static_cast<std::ptrdiff_t>(lo), first + static_cast<std::ptrdiff_t>(mid),
                         first + static_cast<std::ptrdiff_t>(hi), less);
        double left = 0;
        for (size_t i = lo; i < mid; ++i) left += chain_[static_cast<size_t>(order_[i])].p;
        if (base + left > want) {  // within [lo, mid): at most mid kept, whatever rounding does
            hi = mid;
            last = mid;
            continue;
        }
        base += left + chain_[static_cast<size_t>(order_[mid])].p;
        if (base > want) {
            last = mid + 1;
            break;
        }
        lo = mid + 1;
    }
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(last), less);
    chain_tmp_.clear();
    for (size_t i = 0; i < last; ++i) chain_tmp_.push_back(chain_[static_cast<size_t>(order_[i])]);
    chain_.swap(chain_tmp_);
    sorted_ = false;
}

// llama_sampler_top_p_apply: the smallest prefix (by logit) whose mass reaches top_p.
void Sampler::chain_top_p() {
    if (chain_.empty()) return;
    chain_softmax(false);
    chain_sort();
    float cum = 0.0f;
    size_t last = chain_.size();
    for (size_t i = 0; i < chain_.size(); ++i) {
        cum += chain_[i].p;
        if (cum >= params_.top_p) {
            last = i + 1;
            break;
        }
    }
    chain_.resize(last);
}

// llama_sampler_min_p_apply: the tokens whose logit is at least max + log(min_p), in place.
void Sampler::chain_min_p() {
    if (chain_.empty()) return;
    float mx = -std::numeric_limits<float>::max();
    for (const TokenData& t : chain_) mx = std::max(mx, t.logit);
    const float min_logit = mx + std::log(params_.min_p);
    size_t w = 0;
    for (size_t i = 0; i < chain_.size(); ++i) {
        if (chain_[i].logit >= min_logit) chain_[w++] = chain_[i];
    }
    if (w > 0) chain_.resize(w);  // (llama.cpp's sorted fallback keeps the first: the same)
}

// llama_sample_xtc_apply: with probability xtc_probability, drops every token at or above the
// threshold but the least likely of them.
void Sampler::chain_xtc() {
    if (chain_.size() < 2) return;
    const float chance = static_cast<float>(uniform());
    if (chance > params_.xtc_probability) return;
    chain_softmax(true);
    size_t pos_last = 0;
    for (size_t i = 0; i < chain_.size(); ++i) {
        if (chain_[i].p >= params_.xtc_threshold) {
            pos_last = i;
        } else {
            break;
        }
    }
    if (pos_last > 0) chain_.erase(chain_.begin(), chain_.begin() + static_cast<std::ptrdiff_t>(pos_last));
}

// llama_sampler_temp_impl: divides, or at <= 0 keeps only the first largest logit.
void Sampler::chain_temp(float temp) {
    if (chain_.empty()) return;
    if (temp <= 0.0f) {
        const float kNegInf = -std::numeric_limits<float>::infinity();
        size_t max_i = 0;
        float max_l = chain_[0].logit;
        for (size_t i = 1; i < chain_.size(); ++i) {
            if (chain_[i].logit > max_l) {
                chain_[max_i].logit = kNegInf;
                max_i = i;
                max_l = chain_[i].logit;
            } else {
                chain_[i].logit = kNegInf;
            }
        }
        return;
    }
    for (TokenData& t : chain_) t.logit /= temp;
}

// llama_sampler_temp_ext_apply: with dynatemp_range > 0 the temperature moves within
// [temp - range, temp + range] with the normalized entropy of the candidates, to the exponent.
void Sampler::chain_temp_ext() {
    const SamplingParams& p = params_;
    if (!(p.dynatemp_range > 0.0f)) {
        chain_temp(p.temperature);
        return;
    }
    const float min_temp = std::max(0.0f, p.temperature - p.dynatemp_range);
    const float max_temp = p.temperature + p.dynatemp_range;
    if (chain_.size() <= 1) return;
    const float max_entropy = -std::log(1.0f / static_cast<float>(chain_.size()));
    chain_softmax(true);
    float entropy = 0.0f;
    for (const TokenData& t : chain_) {
        if (t.p > 0.0f) entropy -= t.p * std::log(t.p);
    }
    const float normalized = entropy / max_entropy;
    chain_temp(min_temp + (max_temp - min_temp) * std::pow(normalized, p.dynatemp_exponent));
}

// llama_sampler_dist_apply: softmax over the candidates and one draw; what chain_probs reads
// is left in cand_ as (weight, id).
int32_t Sampler::chain_draw() {
    if (chain_.empty()) {
        drawn_ = Drawn::kNone;
        last_prob_ = 1.0f;
        return 0;
    }
    float mx = chain_[0].logit;
    for (const TokenData& t : chain_) mx = std::max(mx, t.logit);
    cand_.clear();
    double sum = 0;
    for (const TokenData& t : chain_) {
        const float w = std::isfinite(mx) ? std::exp(t.logit - mx) : (t.logit == mx ? 1.0f : 0.0f);
        cand_.emplace_back(w, t.id);
        sum += w;
    }
    drawn_ = Drawn::kCandidates;
    last_sum_ = sum;
    const double r = uniform() * sum;
    double acc = 0;
    for (const auto& c : cand_) {
        acc += c.first;
        if (r < acc && c.first > 0) {
            last_prob_ = static_cast<float>(c.first / sum);
            return last_token_ = c.second;
        }
    }
    size_t last = cand_.size() - 1;
    while (last > 0 && !(cand_[last].first > 0)) --last;
    last_prob_ = static_cast<float>(cand_[last].first / sum);
    return last_token_ = cand_[last].second;
}

// Mirostat (v1: llama_sampler_mirostat_apply, m = 100; v2: llama_sampler_mirostat_v2_apply)
// after the temperature; mu moves by eta toward the target surprise tau after each draw.
// llama.cpp sorts the whole vocabulary for it each token (a few ms on 49,152 tokens); the same
// kept set comes from the probabilities in one vectorized pass and only the tokens that can
// be kept collected and sorted: v2 keeps the prefix of surprise <= mu, those at or above a
// logit bound; v1 estimates s from the 100 most likely and keeps its top k.
int32_t Sampler::chain_mirostat(const float* logits) {
    const SamplingParams& p = params_;
    const int32_t n = n_vocab_;
    const float mx = max_finite(logits, n);
    auto finish = [&](int32_t tok) {
        float p_sel = 0;
        for (const TokenData& t : chain_) {
            if (t.id == tok) p_sel = t.p;
        }
        mu_ -= p.mirostat_eta * (-std::log2(p_sel) - p.mirostat_tau);
        return tok;
    };
    full_ = false;
    if (!std::isfinite(mx) || p.temperature <= 0.0f) {  // one token left: surprise 0
        chain_.assign(1, {static_cast<int32_t>(argmax_first(logits, n)), 0.0f, 1.0f});
        sorted_ = true;
        chain_softmax(true);
        return finish(chain_draw());
    }
    const float inv_t = 1.0f / p.temperature;
    weights_.resize(static_cast<size_t>(n));
    const double sum = exp_shifted(logits, mx, inv_t, weights_.data(), n);
    // The candidates at or above a raw-logit floor, sorted, with their probabilities in the
    // whole distribution (llama.cpp's softmax before the cut).
    // top: keep only the `top` largest (a selection, not a sort of everything: mirostat v1's k
    // runs to thousands at common targets).
    auto take = [&](float floor, size_t top = SIZE_MAX, bool sort = true) {
        collect(logits, floor);
        if (cand_.size() > top) {
            std::nth_element(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(top), cand_.end(), by_logit);
            cand_.resize(top);
        }
        chain_.clear();
        for (const auto& [l, id] : cand_) {
            chain_.push_back({id, l * inv_t, static_cast<float>(weights_[static_cast<size_t>(id)] / sum)});
        }
        // Sorted only where order matters: v1's s estimate and v2's prefix. The draw needs the
        // set and its weights, not their order.
        if (sort) std::sort(chain_.begin(), chain_.end(), data_by_logit<TokenData, TokenData>);
        sorted_ = sort;
    };
    if (p.mirostat == 1) {
        constexpr int kM = 100;
        take(top_k_logit_floor(logits, n, kM, chunk_max_), kM);
        float sum_ti_bi = 0.0f, sum_ti_sq = 0.0f;
        for (size_t i = 0; i < static_cast<size_t>(kM - 1) && i + 1 < chain_.size(); ++i) {
            const float t_i = std::log(static_cast<float>(i + 2) / static_cast<float>(i + 1));
            const float b_i = std::log(chain_[i].p / chain_[i + 1].p);
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
        }
        const float s_hat = sum_ti_bi / sum_ti_sq;
        const float epsilon_hat = s_hat - 1;
        const float k = std::pow((epsilon_hat * std::pow(2.0f, mu_)) /
                                     (1 - std::pow(static_cast<float>(n), -epsilon_hat)),
                                 1 / s_hat);
        // top-k with max(int(k), 1): llama.cpp converts the float as x86 does, NaN and values
        // out of int's range to INT_MIN, so those keep one token.
        const int kk = k > -2147483648.0f && k < 2147483648.0f ? std::max(static_cast<int>(k), 1) : 1;
        if (static_cast<size_t>(kk) > chain_.size() && chain_.size() < static_cast<size_t>(n)) {
            take(kk >= n ? -std::numeric_limits<float>::infinity() : top_k_logit_floor(logits, n, kk, chunk_max_),
                 static_cast<size_t>(kk), false);
        }
        chain_.resize(std::min(chain_.size(), static_cast<size_t>(kk)));
    } else {
        // surprise -log2(w / sum) <= mu  <=>  logit >= mx + t (ln sum - mu ln 2); a little
        // below that bound, then llama.cpp's test on each. Its prefix of the sorted list is
        // that set (the surprise falls with the logit), so no sort: mu grows to where
        // thousands of tokens pass on a real model.
        const float bound = mx + p.temperature * static_cast<float>(std::log(sum) - mu_ * std::log(2.0));
        take(bound - 1e-3f * (1.0f + std::fabs(bound)), SIZE_MAX, false);
        size_t w = 0;
        for (size_t i = 0; i < chain_.size(); ++i) {
            if (!(-std::log2(chain_[i].p) > mu_)) chain_[w++] = chain_[i];
        }
        chain_.resize(w);
        if (chain_.empty()) {  // none: the most likely alone
            take(mx);
            chain_.resize(std::min<size_t>(chain_.size(), 1));
        }
    }
    // llama.cpp's softmax over what is left, from the probabilities already known (p / their
    // sum equals exp(l - max) / sum exp over the set): the set may hold thousands of tokens, and
    // two more exps of each cost more than the rest of the step. Then the draw from them.
    double kept = 0;
    for (const TokenData& t : chain_) kept += t.p;
    cand_.clear();
    for (TokenData& t : chain_) {
        t.p = static_cast<float>(t.p / kept);
        cand_.emplace_back(t.p, t.id);
    }
    drawn_ = Drawn::kCandidates;
    last_sum_ = 1.0;
    const double r = uniform();
    double acc = 0;
    int32_t tok = cand_.back().second;
    last_prob_ = cand_.back().first;
    for (const auto& c : cand_) {
        acc += c.first;
        if (r < acc && c.first > 0) {
            tok = c.second;
            last_prob_ = c.first;
            break;
        }
    }
    last_token_ = tok;
    return finish(tok);
}

}  // namespace ferrox
