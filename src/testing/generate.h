#pragma once
// One sequence straight through a model, for the golden tests: chunked prefill, then decode
// with a sampler, until n_predict tokens, an end-of-generation token, or the callback says
// stop; and a prompt's last logits. (`ferrox run` and the server go through the engine.)
//
// Threading: runs on the calling thread (which drives the model's thread pool).

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace ferrox {

struct GenerateOptions {
    int n_predict = 128;  // < 0: until end of generation or context
    SamplingParams sampling;
};

struct GenerateStats {
    int n_prompt = 0;
    double prompt_ms = 0;
    int n_gen = 0;       // tokens sampled
    double gen_ms = 0;   // time of the decode steps after the first token
};

// on_token(id) is called for every sampled token (including the end-of-generation one, after
// which generation stops); returning false stops early. is_eog(id) says which tokens end it.
Expected<GenerateStats> generate(Model& model, KvStorage& kv, std::span<const int32_t> prompt,
                                 const GenerateOptions& opts,
                                 const std::function<bool(int32_t)>& on_token,
                                 const std::function<bool(int32_t)>& is_eog);

// Logits of the last prompt position (n_vocab floats) after a fresh prefill; for tests.
Expected<std::vector<float>> prompt_logits(Model& model, KvStorage& kv, std::span<const int32_t> prompt);

}  // namespace ferrox
