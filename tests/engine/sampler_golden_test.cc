// ferrox's sampler against tests/engine/sampler_reference.py, a Python transcription of
// llama.cpp's samplers: for each case of sampler_golden.json (written by that script) the
// candidates the draw picks from and their probabilities, each sampler alone and chains in
// llama.cpp's default order and in orders given by name and by letter. Mirostat's cases set
// mu, then check its update from the token ferrox drew.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"

namespace ferrox {
namespace {

using nlohmann::json;

json golden() {
    std::ifstream in(std::string(FERROX_SOURCE_DIR) + "/tests/engine/sampler_golden.json");
    return json::parse(in);
}

SamplingParams params_of(const json& p) {
    SamplingParams sp;
    sp.temperature = p.value("temperature", sp.temperature);
    sp.top_k = p.value("top_k", sp.top_k);
    sp.top_p = p.value("top_p", sp.top_p);
    sp.min_p = p.value("min_p", sp.min_p);
    sp.repeat_penalty = p.value("repeat_penalty", sp.repeat_penalty);
    sp.frequency_penalty = p.value("frequency_penalty", sp.frequency_penalty);
    sp.presence_penalty = p.value("presence_penalty", sp.presence_penalty);
    sp.penalty_last_n = p.value("penalty_last_n", sp.penalty_last_n);
    sp.dry_multiplier = p.value("dry_multiplier", sp.dry_multiplier);
    sp.dry_base = p.value("dry_base", sp.dry_base);
    sp.dry_allowed_length = p.value("dry_allowed_length", sp.dry_allowed_length);
    sp.dry_penalty_last_n = p.value("dry_penalty_last_n", sp.dry_penalty_last_n);
    sp.xtc_probability = p.value("xtc_probability", sp.xtc_probability);
    sp.xtc_threshold = p.value("xtc_threshold", sp.xtc_threshold);
    sp.typical_p = p.value("typical_p", sp.typical_p);
    sp.top_n_sigma = p.value("top_n_sigma", sp.top_n_sigma);
    sp.dynatemp_range = p.value("dynatemp_range", sp.dynatemp_range);
    sp.dynatemp_exponent = p.value("dynatemp_exponent", sp.dynatemp_exponent);
    sp.mirostat = p.value("mirostat", sp.mirostat);
    sp.mirostat_tau = p.value("mirostat_tau", sp.mirostat_tau);
    sp.mirostat_eta = p.value("mirostat_eta", sp.mirostat_eta);
    std::string bad;
    if (p.contains("samplers") && p["samplers"].is_string()) {
        EXPECT_TRUE(parse_sampler_chars(p["samplers"].get<std::string>(), &sp.samplers, &bad)) << bad;
    } else if (p.contains("samplers")) {
        EXPECT_TRUE(parse_sampler_names(p["samplers"].get<std::vector<std::string>>(), &sp.samplers, &bad)) << bad;
    }
    return sp;
}

TEST(SamplerGolden, KeptCandidatesAndProbabilitiesMatchLlamaCpp) {
    const json g = golden();
    ASSERT_GE(g["cases"].size(), 15u);
    for (const json& c : g["cases"]) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const SamplingParams sp = params_of(c["params"]);
        auto breakers = std::make_shared<DryBreakers>();
        for (const auto& [head, tails] : c["breakers"].items()) {
            for (const json& t : tails) breakers->heads.emplace(std::stoi(head), t.get<std::vector<int32_t>>());
        }
        std::vector<float> logits;
        if (c.contains("logits_formula")) {  // sampler_reference.py's formula_logits
            const int64_t n = c["logits_formula"].get<int64_t>();
            for (int64_t i = 0; i < n; ++i) {
                logits.push_back(-std::sqrt(static_cast<float>((i * 2654435761LL) % n)));
            }
        } else {
            logits = c["logits"].get<std::vector<float>>();
        }
        const std::vector<int32_t> history = c["history"].get<std::vector<int32_t>>();
        const int n_vocab = static_cast<int>(logits.size());
        Sampler s(sp, n_vocab, breakers);
        EXPECT_TRUE(s.general_chain());
        const float mu = c["params"].value("mu", 0.0f);
        if (sp.mirostat) s.set_mirostat_mu(mu);
        const int32_t tok = s.sample(logits, history);

        std::vector<std::pair<int32_t, float>> got;
        s.chain_probs(n_vocab, &got);
        const json& want = c["kept"];
        ASSERT_EQ(got.size(), want.size());
        std::map<int32_t, double> want_p;
        for (const json& w : want) want_p[w[0].get<int32_t>()] = w[1].get<double>();
        for (const auto& [id, p] : got) {
            ASSERT_TRUE(want_p.count(id)) << "token " << id << " kept by ferrox, not by llama.cpp";
            EXPECT_NEAR(p, want_p[id], 2e-5) << "token " << id;
        }
        ASSERT_TRUE(want_p.count(tok)) << "drew " << tok;
        if (sp.mirostat) {  // mu -= eta * (surprise of the drawn token - tau)
            const double expect_mu = mu - sp.mirostat_eta * (-std::log2(want_p[tok]) - sp.mirostat_tau);
            EXPECT_NEAR(s.mirostat_mu(), expect_mu, 1e-4);
        }
    }
}

// get_overlapping_token_sequences on a toy vocabulary whose tokenizer maps each character to
// its one-character token.
TEST(SamplerGolden, DryBreakersAreLlamaCppsOverlappingSequences) {
    const json toy = golden()["breakers_toy"];
    const auto pieces = toy["pieces"].get<std::vector<std::string>>();
    auto tokenize = [&](std::string_view text) {
        std::vector<int32_t> out;
        for (char ch : text) {
            for (size_t i = 0; i < pieces.size(); ++i) {
                if (pieces[i] == std::string(1, ch)) out.push_back(static_cast<int32_t>(i));
            }
        }
        return out;
    };
    auto b = build_dry_breakers(
        toy["breakers"].get<std::vector<std::string>>(), static_cast<int>(pieces.size()),
        [&](int32_t id) { return std::string_view(pieces[static_cast<size_t>(id)]); }, tokenize);
    std::map<int32_t, std::set<std::vector<int32_t>>> got, want;
    for (const auto& [head, tail] : b->heads) got[head].insert(tail);
    for (const auto& [head, tails] : toy["heads"].items()) {
        for (const json& t : tails) want[std::stoi(head)].insert(t.get<std::vector<int32_t>>());
    }
    EXPECT_EQ(got, want);
}

TEST(SamplerGolden, DefaultRequestsKeepTheVectorizedPath) {
    SamplingParams sp;
    EXPECT_FALSE(Sampler(sp, 16).general_chain());
    // llama.cpp's web page sends "edkypmxt": the same active samplers in the same order.
    std::string bad;
    ASSERT_TRUE(parse_sampler_chars("edkypmxt", &sp.samplers, &bad));
    EXPECT_FALSE(Sampler(sp, 16).general_chain());
    ASSERT_TRUE(parse_sampler_names({"Top-K", "nucleus", "minp", "temp"}, &sp.samplers, &bad));
    EXPECT_FALSE(Sampler(sp, 16).general_chain());
    ASSERT_TRUE(parse_sampler_names({"temperature", "top_k"}, &sp.samplers, &bad));
    EXPECT_TRUE(Sampler(sp, 16).general_chain());
    EXPECT_FALSE(parse_sampler_names({"top_k", "infill"}, &sp.samplers, &bad));
    EXPECT_EQ(bad, "infill");
    EXPECT_FALSE(parse_sampler_chars("kq", &sp.samplers, &bad));
    EXPECT_EQ(bad, "q");
}

// The same seed gives the same tokens through the general chain, and mirostat's mu moves.
TEST(SamplerGolden, GeneralChainIsDeterministicPerSeed) {
    SamplingParams sp;
    sp.mirostat = 2;
    sp.seed = 7;
    std::vector<int32_t> a, b;
    for (auto* out : {&a, &b}) {
        Sampler s(sp, 64);
        for (int t = 0; t < 20; ++t) {
            std::vector<float> l(64);
            for (int i = 0; i < 64; ++i) l[i] = std::sin(static_cast<float>(i * (t + 3)));
            out->push_back(s.sample(l, *out));
        }
        EXPECT_NE(s.mirostat_mu(), 2 * sp.mirostat_tau);
    }
    EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace ferrox
