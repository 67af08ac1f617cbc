// Gemma 2 against llama.cpp on a tiny random-weight checkpoint that carries no tokenizer
// (365 KB, written into the build tree by scripts/golden/gemma2_random.py --model-only, the
// ctest fixture gemma2_random_model, with numpy and the `gguf` package; the same script ran
// llama.cpp on the same bytes, sha256 checked, for tests/model/golden/gemma2_llamacpp.json).
// Its Q·K scores reach ~26 against an attention cap of 5 and its raw logits exceed the final
// cap of 12, so both soft-cappings change the answer: llama.cpp's logits for the same weights
// without the attention cap are ~11 away, and the test checks ferrox is far from those.
// Not bit-identical (F32 products summed in other orders than ggml's): max |diff| ~6e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "support/test_kv.h"
#include "testing/generate.h"
#include "loader/gguf.h"
#include "model/model.h"

namespace ferrox {
namespace {

const std::string kGolden = std::string(FERROX_SOURCE_DIR) + "/tests/model/golden/";

class Gemma2 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::ifstream in(kGolden + "gemma2_llamacpp.json");
        golden_ = new nlohmann::json(nlohmann::json::parse(in));
        auto g = GgufFile::open(FERROX_GEMMA2_MODEL);
        ASSERT_TRUE(g.has_value()) << g.status().message();
        gguf_ = std::move(*g).release();
        ModelOptions mo;
        mo.n_threads = 2;
        mo.max_ctx = 128;
        auto m = Model::load(*gguf_, mo);
        ASSERT_TRUE(m.has_value()) << m.status().message();
        model_ = std::move(*m).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete gguf_;
        delete golden_;
    }
    static std::vector<float> floats(const char* key) { return (*golden_)[key].get<std::vector<float>>(); }
    static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
        double m = 0;
        for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
        return m;
    }

    static inline GgufFile* gguf_ = nullptr;
    static inline Model* model_ = nullptr;
    static inline nlohmann::json* golden_ = nullptr;
};

TEST_F(Gemma2, HyperparametersFromMetadata) {
    const ModelHParams& hp = model_->hparams();
    EXPECT_EQ(hp.arch, "gemma2");
    EXPECT_FLOAT_EQ(hp.attn_logit_softcap, (*golden_)["attn_logit_softcapping"].get<float>());
    EXPECT_FLOAT_EQ(hp.final_logit_softcap, (*golden_)["final_logit_softcapping"].get<float>());
    EXPECT_EQ(hp.n_swa, (*golden_)["n_swa"].get<int>());
    EXPECT_TRUE(hp.is_swa(0));  // llama.cpp's gemma2 pattern 2: even layers local
    EXPECT_FALSE(hp.is_swa(1));
    EXPECT_FLOAT_EQ(hp.rope_freq_base_swa, hp.rope_freq_base);
    EXPECT_FLOAT_EQ(hp.q_scale, 1.0f / std::sqrt(32.0f));
    EXPECT_FLOAT_EQ(hp.kq_scale, 1.0f);
    EXPECT_FLOAT_EQ(hp.embd_scale, 8.0f);
    // The scores the golden script saw exceed the cap: the test below would notice its absence.
    EXPECT_GT((*golden_)["max_abs_score"].get<double>(), 4 * hp.attn_logit_softcap);
}

TEST_F(Gemma2, LastPromptLogitsMatchLlamaCpp) {
    const auto prompt = (*golden_)["prompt"].get<std::vector<int32_t>>();
    ASSERT_GT(static_cast<int>(prompt.size()), model_->hparams().n_swa);  // the window cuts in
    TestKv kv(model_->kv_geometry(64), 2);
    auto got = prompt_logits(*model_, kv, prompt);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    const std::vector<float> want = floats("logits"), uncapped = floats("logits_uncapped");
    ASSERT_EQ(got->size(), want.size());
    const double diff = max_abs_diff(*got, want), diff_uncapped = max_abs_diff(*got, uncapped);
    std::printf("max |ferrox - llama.cpp| %.3g; against llama.cpp without the attention cap %.3g\n", diff,
                diff_uncapped);
    EXPECT_LT(diff, 1e-4);  // measured 6.3e-6
    EXPECT_GT(diff_uncapped, 1.0);
    const float cap = model_->hparams().final_logit_softcap;
    float max_logit = 0;
    for (float x : *got) max_logit = std::max(max_logit, std::abs(x));
    EXPECT_LE(max_logit, cap);
    EXPECT_GT(max_logit, 0.5f * cap);
    EXPECT_EQ(std::max_element(got->begin(), got->end()) - got->begin(),
              std::max_element(want.begin(), want.end()) - want.begin());
}

// Decode steps: the soft-capped single-query path (every llama.cpp margin here is >= 0.33, far
// above the ~1e-5 differences in the logits).
TEST_F(Gemma2, GreedyTokensMatchLlamaCpp) {
    const auto prompt = (*golden_)["prompt"].get<std::vector<int32_t>>();
    const auto want = (*golden_)["greedy"].get<std::vector<int32_t>>();
    TestKv kv(model_->kv_geometry(64), 2);
    GenerateOptions go;
    go.n_predict = static_cast<int>(want.size());
    go.sampling.temperature = 0;
    std::vector<int32_t> got;
    auto st = generate(*model_, kv, prompt, go, [&](int32_t t) { got.push_back(t); return true; },
                       [](int32_t) { return false; });
    ASSERT_TRUE(st.has_value()) << st.status().message();
    EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace ferrox
