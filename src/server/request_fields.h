#pragma once
// Fields several protocols share under the same names: the sampler's knobs (OpenAI, llama.cpp
// and vLLM spell them alike), logit_bias, token-id prompts. Each protocol reads its own
// length and stop fields.

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "engine/served_model.h"
#include "server/json_util.h"

namespace ferrox {

struct SamplingDefaults;  // server/context.h

struct SamplingLimits {
    double max_temperature = 2;  // Anthropic allows 1
    const SamplingDefaults* defaults = nullptr;  // null: SamplingParams' own
};

// temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,
// repetition_penalty / repeat_penalty, repeat_last_n, llama.cpp's further samplers (dry_*,
// xtc_*, typical_p, top_n_sigma, dynatemp_*, mirostat*, samplers), seed (the server's default seed, else a
// random one, when absent; *seeded says whether the client gave it), ignore_eos, cache_prompt;
// each field a request does not set keeps limits.defaults' value.
bool read_sampling(const Fields& f, const SamplingLimits& limits, GenerationParams* params, bool* seeded,
                   ApiError* err);

// llama-server's generation_settings entries of the further samplers (dry_*, xtc_*, typical_p,
// top_n_sigma, dynatemp_*, mirostat*, samplers by name), added to `settings`.
void add_sampler_settings(const SamplingParams& sp, json* settings);

// A float parameter as the client wrote it (0.8f prints as 0.800000011920929 otherwise).
inline double echo_float(float v) { return static_cast<double>(static_cast<float>(std::round(v * 1e6) / 1e6)) == v ? std::round(v * 1e6) / 1e6 : v; }

// OpenAI's {"token id": bias} object, or llama.cpp's [[id, bias], ...] / [[id, false]] (false:
// never) list. Ids are checked against the vocabulary.
bool read_logit_bias(const Fields& f, const ServedModel& model, SamplingParams* sp, ApiError* err);

// A prompt item of token ids: every element an integer id in the vocabulary (400 naming the
// position otherwise).
bool read_token_ids(const json& arr, const std::string& param, const ServedModel& model,
                    std::vector<int32_t>* out, ApiError* err);

}  // namespace ferrox
