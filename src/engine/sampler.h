#pragma once
// Token sampling: logit bias, repetition/presence/frequency penalties over the last n tokens,
// then top-k, top-p, min-p, temperature and a seeded draw, in llama.cpp's order. A
// temperature <= 0 is greedy (argmax after bias and penalties). The same seed, parameters and
// logits give the same tokens on every run.
//
// The rest of llama.cpp's set (DRY, XTC, typical-p, top-n-sigma, dynamic temperature,
// mirostat v1/v2) and its `samplers` order run as llama.cpp's common_sampler chain does, each
// sampler transcribed from llama.cpp's src/llama-sampler.cpp over a candidate array
// (tests/engine/sampler_reference.py is the Python transcription the golden test checks
// against). A request that turns none of them on and keeps the default order takes the
// vectorized path above.
//
// Threading: one Sampler per sequence, used by the engine thread only. Buffers are sized at
// construction; sample() does not allocate.

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <span>
#include <utility>
#include <vector>

namespace ferrox {

// llama.cpp's common_sampler_type, the names of its `samplers` field.
enum class SamplerKind { kPenalties, kDry, kTopNSigma, kTopK, kTypicalP, kTopP, kMinP, kXtc, kTemperature };

// llama.cpp's default order: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc,
// temperature ("edskypmxt").
std::vector<SamplerKind> default_sampler_order();
// llama.cpp's names and their aliases ("top_k", "top-k", "topk", "nucleus", "temp", "typ", ...;
// case-insensitive), or its one-letter form ("edskypmxt"). False on a name or letter ferrox
// does not run (llama.cpp's "infill" and "adaptive_p" among them); *bad gets it.
bool parse_sampler_names(const std::vector<std::string>& names, std::vector<SamplerKind>* out, std::string* bad);
bool parse_sampler_chars(std::string_view chars, std::vector<SamplerKind>* out, std::string* bad);
const char* sampler_name(SamplerKind k);

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
    // llama.cpp's further samplers, with its defaults (each off as set here).
    float dry_multiplier = 0.0f;   // 0: off
    float dry_base = 1.75f;        // < 1: off
    int dry_allowed_length = 2;
    int dry_penalty_last_n = 64;   // -1: the whole sequence (llama-server: the context); 0: off
    // Tokenized where the sampler is built (Postprocessor::prepare), as llama.cpp does.
    std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
    float xtc_probability = 0.0f;  // 0: off
    float xtc_threshold = 0.1f;    // > 0.5: off
    float typical_p = 1.0f;        // >= 1: off
    float top_n_sigma = -1.0f;     // <= 0: off
    float dynatemp_range = 0.0f;   // 0: off
    float dynatemp_exponent = 1.0f;
    int mirostat = 0;              // 0 off, 1 mirostat, 2 mirostat 2.0 (replaces the order's chain)
    float mirostat_tau = 5.0f;
    float mirostat_eta = 0.1f;
    std::vector<SamplerKind> samplers = default_sampler_order();
};

// DRY's sequence breakers as llama.cpp processes them (get_overlapping_token_sequences): each
// token whose text contains a breaker, or ends with a prefix of one, maps to the tokens of the
// breaker's rest (empty: the token alone breaks). Built once per breaker list.
struct DryBreakers {
    std::unordered_multimap<int32_t, std::vector<int32_t>> heads;
};
// piece(id): the token's text (control tokens' included); tokenize(text): without BOS or
// special-token parsing. Breakers longer than 40 bytes are cut, tails to 20 tokens, empty
// breakers skipped (llama.cpp's limits).
std::shared_ptr<const DryBreakers> build_dry_breakers(
    const std::vector<std::string>& breakers, int n_vocab, const std::function<std::string_view(int32_t)>& piece,
    const std::function<std::vector<int32_t>(std::string_view)>& tokenize);

// A lower bound on the k-th largest finite logit of l[0, n), from the largest of each chunk of
// 64 (the k largest chunk maxima are k distinct logits, so at least k logits reach the k-th
// of them); -inf when it cannot bound (fewer chunks than k, or a chunk whose maximum is +inf).
// `scratch` holds the chunk maxima.
float top_k_logit_floor(const float* l, int32_t n, int k, std::vector<float>& scratch);

class Sampler {
public:
    // breakers: DRY's processed sequence breakers (null: none).
    Sampler(const SamplingParams& params, int n_vocab, std::shared_ptr<const DryBreakers> breakers = nullptr);

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
    // Mirostat's state (2 tau at the start; updated by each draw). The setter is for tests.
    float mirostat_mu() const { return mu_; }
    void set_mirostat_mu(float mu) { mu_ = mu; }
    // Whether the request runs llama.cpp's general chain rather than the vectorized path.
    bool general_chain() const { return general_; }

private:
    // llama.cpp's llama_token_data.
    struct TokenData {
        int32_t id;
        float logit;
        float p;
    };
    int32_t sample_chain(std::span<float> logits, std::span<const int32_t> history);
    void materialize(const float* logits);
    void chain_softmax(bool sort);
    void chain_sort();
    void chain_penalties(std::span<float> logits, std::span<const int32_t> history);
    void chain_dry(std::span<float> logits, std::span<const int32_t> history);
    void chain_top_n_sigma(std::span<float> logits);
    void chain_top_k(const float* logits, int k);
    void chain_typical();
    void chain_top_p();
    void chain_min_p();
    void chain_xtc();
    void chain_temp(float temp);
    void chain_temp_ext();
    int32_t chain_mirostat(const float* logits);
    int32_t chain_draw();  // llama.cpp's dist, then what chain_probs reads
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

    // The general chain's state: full_ while the candidates are still every id of the logits
    // row (penalties, DRY and top-n-sigma work on it in place; top-k collects from it), else
    // chain_ (sorted_: by logit, descending).
    bool general_ = false;
    std::shared_ptr<const DryBreakers> breakers_;
    bool full_ = true;
    bool sorted_ = false;
    std::vector<TokenData> chain_;
    std::vector<TokenData> chain_tmp_;
    std::vector<float> scores_;      // typical-p's shifted scores
    std::vector<int32_t> order_;     // typical-p's order
    std::vector<int32_t> dry_count_;     // DRY's repeat counts over its window
    std::vector<int32_t> dry_max_;       // by id: the longest repeat a token would extend (0: none)
    std::vector<int32_t> dry_touched_;   // ids with dry_max_ set
    float mu_ = 0;                   // mirostat
};

}  // namespace ferrox
