#include "server/request_fields.h"

#include "server/context.h"

#include <cstdlib>
#include <random>

namespace ferrox {

namespace {

bool read_float(const Fields& f, const char* key, double lo, double hi, float* out, ApiError* err) {
    double d = *out;
    if (!f.number(key, lo, hi, &d, err)) return false;
    *out = static_cast<float>(d);
    return true;
}

bool read_int(const Fields& f, const char* key, int64_t lo, int64_t hi, int* out, ApiError* err) {
    int64_t i = *out;
    if (!f.integer(key, lo, hi, &i, err)) return false;
    *out = static_cast<int>(i);
    return true;
}

// llama.cpp's further samplers under llama-server's names (its OpenAI routes take the same).
bool read_llama_samplers(const Fields& f, SamplingParams* sp, ApiError* err) {
    constexpr int64_t kIntMax = INT32_MAX;
    const float default_dry_base = sp->dry_base;
    if (!read_float(f, "dry_multiplier", 0, 100, &sp->dry_multiplier, err) ||
        !read_float(f, "dry_base", 0, 100, &sp->dry_base, err) ||
        !read_int(f, "dry_allowed_length", 0, kIntMax, &sp->dry_allowed_length, err) ||
        !read_int(f, "dry_penalty_last_n", -1, kIntMax, &sp->dry_penalty_last_n, err) ||
        !read_float(f, "xtc_probability", 0, 1, &sp->xtc_probability, err) ||
        !read_float(f, "xtc_threshold", 0, 1, &sp->xtc_threshold, err) ||
        !read_float(f, "typical_p", 0, 1, &sp->typical_p, err) ||
        !read_float(f, "top_n_sigma", -1, 100, &sp->top_n_sigma, err) ||
        !read_float(f, "dynatemp_range", 0, 100, &sp->dynatemp_range, err) ||
        !read_float(f, "dynatemp_exponent", 0, 100, &sp->dynatemp_exponent, err) ||
        !read_int(f, "mirostat", 0, 2, &sp->mirostat, err) ||
        !read_float(f, "mirostat_tau", 0, 100, &sp->mirostat_tau, err) ||
        !read_float(f, "mirostat_eta", 0, 10, &sp->mirostat_eta, err)) {
        return false;
    }
    if (sp->dry_base < 1.0f) sp->dry_base = default_dry_base;  // llama.cpp: < 1 takes the default
    const json* v = nullptr;
    if (!f.array("dry_sequence_breakers", &v, err)) return false;
    if (v) {
        constexpr size_t kMaxBreakers = 64;
        const std::string param = f.name("dry_sequence_breakers");
        if (v->empty() || v->size() > kMaxBreakers) {
            *err = bad_param(param, "Invalid '" + param + "': expected a non-empty array of at most " +
                                        std::to_string(kMaxBreakers) + " strings.");
            return false;
        }
        sp->dry_sequence_breakers.clear();
        for (size_t i = 0; i < v->size(); ++i) {
            if (!(*v)[i].is_string()) {
                *err = wrong_type(param + "[" + std::to_string(i) + "]", "a string", (*v)[i]);
                return false;
            }
            sp->dry_sequence_breakers.push_back((*v)[i].get<std::string>());
        }
    }
    // The order: llama.cpp's names (["top_k", "temperature"]) or its letters ("kt").
    if (const json* o = f.find("samplers")) {
        const std::string param = f.name("samplers");
        std::string bad;
        bool ok = false;
        if (o->is_string()) {
            ok = parse_sampler_chars(o->get<std::string>(), &sp->samplers, &bad);
        } else if (o->is_array() && o->size() <= 64) {
            std::vector<std::string> names;
            for (const json& n : *o) {
                if (!n.is_string()) {
                    *err = wrong_type(param, "a string or an array of sampler names", *o);
                    return false;
                }
                names.push_back(n.get<std::string>());
            }
            ok = parse_sampler_names(names, &sp->samplers, &bad);
        } else {
            *err = wrong_type(param, "a string or an array of sampler names", *o);
            return false;
        }
        if (!ok) {
            *err = bad_param(param, "Invalid '" + param + "': unknown sampler '" + bad +
                                        "' (names: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, "
                                        "temperature; letters: e d s k y p m x t).");
            return false;
        }
    }
    return true;
}

}  // namespace

bool read_sampling(const Fields& f, const SamplingLimits& limits, GenerationParams* params, bool* seeded,
                   ApiError* err) {
    SamplingParams& sp = params->sampling;
    if (limits.defaults) sp = limits.defaults->params;
    double d = sp.temperature;
    if (!f.number("temperature", 0, limits.max_temperature, &d, err)) return false;
    sp.temperature = static_cast<float>(d);
    d = sp.top_p;
    if (!f.number("top_p", 0, 1, &d, err)) return false;
    sp.top_p = static_cast<float>(d);
    d = sp.min_p;
    if (!f.number("min_p", 0, 1, &d, err)) return false;
    sp.min_p = static_cast<float>(d);
    int64_t i = sp.top_k;
    if (!f.integer("top_k", -1, 1 << 20, &i, err)) return false;
    sp.top_k = static_cast<int>(i);
    d = sp.presence_penalty;
    if (!f.number("presence_penalty", -2, 2, &d, err)) return false;
    sp.presence_penalty = static_cast<float>(d);
    d = sp.frequency_penalty;
    if (!f.number("frequency_penalty", -2, 2, &d, err)) return false;
    sp.frequency_penalty = static_cast<float>(d);
    d = sp.repeat_penalty;
    if (!f.number("repetition_penalty", 0.01, 10, &d, err)) return false;
    if (!f.number("repeat_penalty", 0.01, 10, &d, err)) return false;
    sp.repeat_penalty = static_cast<float>(d);
    i = sp.penalty_last_n;
    if (!f.integer("repeat_last_n", -1, 1 << 20, &i, err)) return false;
    sp.penalty_last_n = static_cast<int>(i);
    *seeded = false;
    int64_t seed = -1;
    if (!f.integer("seed", INT64_MIN, INT64_MAX, &seed, err)) return false;
    if (f.find("seed") && seed != -1) {  // llama.cpp: -1 is "random"
        sp.seed = static_cast<uint64_t>(seed);
        *seeded = true;
    } else if (!limits.defaults || !limits.defaults->seeded) {
        sp.seed = std::random_device{}();
    }
    if (!f.boolean("ignore_eos", &params->ignore_eos, err)) return false;
    // llama.cpp's extension: false computes the whole prompt and leaves nothing in the cache.
    if (!f.boolean("cache_prompt", &params->cache_prompt, err)) return false;
    // Speculative decoding, per request: "speculative": false turns it off; llama.cpp's
    // "speculative.n_max" caps the draft (0: off). It changes the speed, never the output.
    bool speculative = true;
    if (!f.boolean("speculative", &speculative, err)) return false;
    int64_t n_max = -1;
    if (!f.integer("speculative.n_max", 0, 64, &n_max, err)) return false;
    params->draft_max = !speculative ? 0 : static_cast<int>(n_max);
    return read_llama_samplers(f, &sp, err);
}

void add_sampler_settings(const SamplingParams& sp, json* settings) {
    json& j = *settings;
    j["dry_multiplier"] = echo_float(sp.dry_multiplier);
    j["dry_base"] = echo_float(sp.dry_base);
    j["dry_allowed_length"] = sp.dry_allowed_length;
    j["dry_penalty_last_n"] = sp.dry_penalty_last_n;
    j["dry_sequence_breakers"] = sp.dry_sequence_breakers;
    j["xtc_probability"] = echo_float(sp.xtc_probability);
    j["xtc_threshold"] = echo_float(sp.xtc_threshold);
    j["typical_p"] = echo_float(sp.typical_p);
    j["top_n_sigma"] = echo_float(sp.top_n_sigma);
    j["dynatemp_range"] = echo_float(sp.dynatemp_range);
    j["dynatemp_exponent"] = echo_float(sp.dynatemp_exponent);
    j["mirostat"] = sp.mirostat;
    j["mirostat_tau"] = echo_float(sp.mirostat_tau);
    j["mirostat_eta"] = echo_float(sp.mirostat_eta);
    json names = json::array();
    for (SamplerKind k : sp.samplers) names.push_back(sampler_name(k));
    j["samplers"] = std::move(names);
}

bool read_logit_bias(const Fields& f, const ServedModel& model, SamplingParams* sp, ApiError* err) {
    const json* v = f.find("logit_bias");
    if (!v) return true;
    const std::string param = f.name("logit_bias");
    auto add = [&](int64_t id, const json& bias) {
        if (id < 0 || id >= model.n_vocab()) {
            *err = bad_param(param, "Invalid token id " + std::to_string(id) + " in '" + param +
                                        "': the vocabulary has " + std::to_string(model.n_vocab()) + " tokens.");
            return false;
        }
        double b = 0;
        if (bias.is_boolean() && !bias.get<bool>()) {
            b = -1e30;  // llama.cpp: false bans the token
        } else if (bias.is_number() && bias.get<double>() >= -100 && bias.get<double>() <= 100) {
            b = bias.get<double>();
        } else {
            *err = bad_param(param, "Invalid value in '" + param + "': biases must be numbers in [-100, 100].");
            return false;
        }
        sp->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
        return true;
    };
    // llama.cpp's string form: a text that is not a token id biases every token of its
    // tokenization (no special tokens parsed, no BOS).
    auto add_text = [&](const std::string& text, const json& bias) {
        constexpr size_t kMaxTextTokens = 256;
        const std::vector<int32_t> ids = model.tokenize(text, false, false);
        if (ids.empty() || ids.size() > kMaxTextTokens) {
            *err = bad_param(param, "Invalid key in '" + param + "': a text must tokenize to 1.." +
                                        std::to_string(kMaxTextTokens) + " tokens (this one gives " +
                                        std::to_string(ids.size()) + ").");
            return false;
        }
        for (int32_t id : ids) {
            if (!add(id, bias)) return false;
        }
        return true;
    };
    if (v->is_object()) {
        for (const auto& [k, bias] : v->items()) {
            char* end = nullptr;
            const long long id = std::strtoll(k.c_str(), &end, 10);
            if (!k.empty() && !*end) {
                if (!add(id, bias)) return false;
            } else if (!add_text(k, bias)) {
                return false;
            }
        }
        return true;
    }
    if (v->is_array()) {
        for (const auto& pair : *v) {
            if (pair.is_array() && pair.size() == 2 && pair[0].is_string()) {
                if (!add_text(pair[0].get<std::string>(), pair[1])) return false;
                continue;
            }
            if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer()) {
                *err = bad_param(param, "Invalid '" + param + "': expected [token id or text, bias] pairs.");
                return false;
            }
            if (!add(pair[0].is_number_unsigned() && pair[0].get<uint64_t>() > INT64_MAX ? -1 : pair[0].get<int64_t>(),
                     pair[1]))
                return false;
        }
        return true;
    }
    *err = wrong_type(param, "an object", *v);
    return false;
}

bool read_token_ids(const json& arr, const std::string& param, const ServedModel& model,
                    std::vector<int32_t>* out, ApiError* err) {
    for (size_t i = 0; i < arr.size(); ++i) {
        const json& t = arr[i];
        const bool ok = t.is_number_integer() && !(t.is_number_unsigned() && t.get<uint64_t>() > INT64_MAX) &&
                        t.get<int64_t>() >= 0 && t.get<int64_t>() < model.n_vocab();
        if (!ok) {
            *err = bad_param(param, "Invalid token id at '" + param + "[" + std::to_string(i) + "]': " + t.dump() +
                                        " is not in [0, " + std::to_string(model.n_vocab()) + ").");
            return false;
        }
        out->push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return true;
}

}  // namespace ferrox
