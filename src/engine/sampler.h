#pragma once
// Token sampling: logit bias, repetition/presence/frequency penalties over the last n tokens,
// then top-k, top-p, min-p, temperature and a seeded draw, in llama.cpp's order. A
// temperature <= 0 is greedy (argmax after bias and penalties). The same seed, parameters and
// logits give the same tokens on every run.
//
// Threading: one Sampler per sequence, used by the engine thread only. Buffers are sized at
// construction; sample() does not allocate.

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace ferrox {

struct SamplingParams {
    float temperature = 0.8f;
    int top_k = 40;          // <= 0: off
    float top_p = 0.95f;     // >= 1: off
    float min_p = 0.05f;     // <= 0: off
    float repeat_penalty = 1.0f;  // 1: off (llama.cpp's repeat_penalty)
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int penalty_last_n = 64;  // window of past tokens the penalties look at; -1: all
    std::vector<std::pair<int32_t, float>> logit_bias;  // token id, added logit (-inf bans)
    uint64_t seed = 0xFE770C5;
};

// A lower bound on the k-th largest finite logit of l[0, n), from the largest of each chunk of
// 64 (the k largest chunk maxima are k distinct logits, so at least k logits reach the k-th
// of them); -inf when it cannot bound (fewer chunks than k, or a chunk whose maximum is +inf).
// `scratch` holds the chunk maxima.
float top_k_logit_floor(const float* l, int32_t n, int k, std::vector<float>& scratch);

class Sampler {
public:
    Sampler(const SamplingParams& params, int n_vocab);

    // Picks the next token from `logits` (n_vocab, modified in place by bias and penalties).
    // `history` is the sequence so far (prompt and generated); the penalties look at its last
    // penalty_last_n tokens.
    int32_t sample(std::span<float> logits, std::span<const int32_t> history);

    // After sample(): the probability the chosen distribution gave the token (1 for greedy).
    float last_prob() const { return last_prob_; }
    // After sample(): the distribution the token was drawn from, after the whole chain (the
    // candidates top-k, top-p and min-p left, at the temperature; greedy: the chosen token at
    // 1), its `k` most likely tokens with probability > 0, most likely first (ties: lower id).
    // llama-server's post_sampling_probs. Allocates: only for requests that ask.
    void chain_probs(int k, std::vector<std::pair<int32_t, float>>* out) const;
    const SamplingParams& params() const { return params_; }

private:
    void apply_penalties(std::span<float> logits, std::span<const int32_t> history);
    double uniform();
    // sample() without top-k: every finite logit is a candidate (see sampler.cc).
    int32_t sample_without_top_k(const float* logits);
    // Draws from cand_ (logits, after the filters) at the temperature.
    int32_t draw(float mx);
    void collect(const float* logits, float th);
    void min_p_prefix(float mx);

    SamplingParams params_;
    int n_vocab_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> cand_;  // (logit or prob, id)
    std::vector<int32_t> counts_;                  // occurrences in the penalty window
    std::vector<float> chunk_max_;                 // top_k_floor's scratch
    std::vector<float> weights_;                   // exp(logit - max) of every id (no top-k)
    std::vector<int32_t> ids_;                     // collect()'s scratch
    float last_prob_ = 1.0f;
    // What chain_probs reads: where the last draw's weights are, and their sum.
    enum class Drawn { kNone, kGreedy, kCandidates, kWeights };
    Drawn drawn_ = Drawn::kNone;
    int32_t last_token_ = -1;
    double last_sum_ = 0;
};

}  // namespace ferrox
