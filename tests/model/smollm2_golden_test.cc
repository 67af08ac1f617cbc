// The default model (SmolLM2-135M-Instruct Q4_1) against llama.cpp: prompt token ids, 64
// greedy tokens on nine raw and chat-formatted prompts, and the logits of the last prompt
// position (bit-identical on AVX2 in ggml's order, ModelOptions::ggml_order: max |diff| 0; in
// the default block order close, see kNearTie). Golden data: scripts/golden/smollm2_llamacpp.py. `make model` puts the model in
// models/ before the tests run; without it the test is skipped, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_kv.h"
#include "testing/generate.h"
#include "engine/tokenizer_gguf.h"
#include "kernels/quants.h"
#include "loader/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {
namespace {

const std::string kModel = std::string(FERROX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGolden = std::string(FERROX_SOURCE_DIR) + "/tests/model/golden/";

class SmolLM2 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!std::filesystem::exists(kModel)) return;
        auto g = GgufFile::open(kModel);
        ASSERT_TRUE(g.has_value()) << g.status().message();
        gguf_ = std::move(*g).release();
        auto spec = vocab_from_gguf(*gguf_);
        ASSERT_TRUE(spec.has_value()) << spec.status().message();
        auto tok = Tokenizer::create(std::move(*spec));
        ASSERT_TRUE(tok.has_value());
        tok_ = std::move(*tok).release();
        ModelOptions mo;
        mo.n_threads = 2;
        mo.max_ctx = 256;
        auto m = Model::load(*gguf_, mo);
        ASSERT_TRUE(m.has_value()) << m.status().message();
        model_ = std::move(*m).release();
        mo.ggml_order = true;
        auto mg = Model::load(*gguf_, mo);
        ASSERT_TRUE(mg.has_value()) << mg.status().message();
        ggml_model_ = std::move(*mg).release();
        std::ifstream in(kGolden + "smollm2_llamacpp.json");
        golden_ = new nlohmann::json(nlohmann::json::parse(in));
    }
    static void TearDownTestSuite() {
        delete model_;
        delete ggml_model_;
        delete tok_;
        delete gguf_;
        delete golden_;
    }
    void SetUp() override {
        if (!model_) GTEST_SKIP() << kModel << " is missing: run `make model`";
    }
    static std::string prompt_text(const nlohmann::json& p) {
        std::string t = p["text"].get<std::string>();
        if (p["chat"].get<bool>()) t = "<|im_start|>user\n" + t + "<|im_end|>\n<|im_start|>assistant\n";
        return t;
    }

    static inline GgufFile* gguf_ = nullptr;
    static inline Tokenizer* tok_ = nullptr;
    static inline Model* model_ = nullptr;       // the default options: Q4_1 in block order
    static inline Model* ggml_model_ = nullptr;  // ggml_order: Q4_1 in ggml's x86 order
    static inline nlohmann::json* golden_ = nullptr;

    static void check_greedy(Model& model, bool exact);
    static void check_logits(Model& model, bool exact);
};

TEST_F(SmolLM2, PromptTokensMatchLlamaCpp) {
    for (const auto& p : (*golden_)["prompts"]) {
        EXPECT_EQ(tok_->encode(prompt_text(p), true, true), p["ids"].get<std::vector<int32_t>>())
            << p["text"];
    }
}

// Free-running greedy decoding, compared token for token with llama.cpp's. On x86 with AVX2 (or
// AVX-512) and ggml_order, ferrox computes every op of this model in ggml's order (Q4_1/Q8_0
// dots, RoPE, softmax, attention sums), so the logits are bit-identical and all 64 tokens must
// match. This model has "massive activations" (a residual channel reaches ~2e4 by layer 12)
// that turn any one-ulp difference into logit differences of ~0.1-1, so in the default block
// order of Q4_1 and on other CPUs (the scalar kernels sum in another order) the test falls back
// to: the free run agrees up to llama.cpp's first near-tie (top-2 margin < kNearTie), and
// teacher-forced on llama.cpp's tokens the argmax agrees at every step whose margin is at
// least kNearTie.
constexpr float kNearTie = 1.0f;

// The AVX-512 kernels give the AVX2 kernels' bits (model_test's Avx512KernelsGiveTheAvx2Bits).
bool bit_exact_platform() {
    const std::string isa = kernels_isa_name();
    return isa == "avx2" || isa == "avx512";
}

void SmolLM2::check_greedy(Model& model, bool exact) {
    int n_prompts = 0, n_full = 0, n_clear_steps = 0, n_steps = 0;
    for (const auto& p : (*golden_)["prompts"]) {
        const auto ids = p["ids"].get<std::vector<int32_t>>();
        const auto want = p["greedy"].get<std::vector<int32_t>>();
        const auto margins = p["margins"].get<std::vector<float>>();
        ASSERT_EQ(want.size(), 64u);
        GenerateOptions go;
        go.n_predict = 64;
        go.sampling.temperature = 0;
        std::vector<int32_t> got;
        TestKv kv(model.kv_geometry(64), 4);
        auto st = generate(model, kv, ids, go, [&](int32_t t) { got.push_back(t); return true; },
                           [](int32_t) { return false; });
        ASSERT_TRUE(st.has_value()) << st.status().message();
        size_t first_tie = 0;
        while (first_tie < margins.size() && margins[first_tie] >= kNearTie) ++first_tie;
        size_t agree = 0;
        while (agree < got.size() && got[agree] == want[agree]) ++agree;
        if (exact) {
            EXPECT_EQ(got, want) << "prompt: " << p["text"];
        } else {
            EXPECT_GE(agree, first_tie) << "prompt: " << p["text"];
        }
        n_full += agree == want.size() ? 1 : 0;

        // Teacher-forced (only where the free run may legitimately drift).
        if (exact) {
            ++n_prompts;
            continue;
        }
        TestKv kv2(model.kv_geometry(64), 4);
        TestSeq seq(&kv2);
        std::vector<float> logits(model.n_vocab());
        std::vector<int32_t> feed = ids;
        int n_past = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(seq.reserve(n_past + static_cast<int>(feed.size())).is_ok());
            Batch b;
            b.tokens = feed;
            b.seqs.push_back({0, static_cast<int>(feed.size()), n_past, seq.blocks().data(),
                              static_cast<int>(seq.blocks().size()), true});
            ASSERT_TRUE(model.forward(b, kv2, logits).is_ok());
            n_past += static_cast<int>(feed.size());
            const int32_t arg = static_cast<int32_t>(
                std::max_element(logits.begin(), logits.end()) - logits.begin());
            ++n_steps;
            if (margins[i] >= kNearTie) {
                EXPECT_EQ(arg, want[i]) << "prompt " << p["text"] << " step " << i;
                ++n_clear_steps;
            }
            feed = {want[i]};
        }
        ++n_prompts;
    }
    std::printf("%d/%d prompts identical for all 64 tokens\n", n_full, n_prompts);
    EXPECT_GE(n_prompts, 8);
    if (!exact) {
        EXPECT_GE(n_clear_steps, n_steps / 2);
    }
}

TEST_F(SmolLM2, Greedy64TokensMatchLlamaCppInGgmlOrder) { check_greedy(*ggml_model_, bit_exact_platform()); }

TEST_F(SmolLM2, Greedy64TokensFollowLlamaCppInBlockOrder) { check_greedy(*model_, false); }

void SmolLM2::check_logits(Model& model, bool exact) {
    int n_checked = 0;
    for (const auto& p : (*golden_)["prompts"]) {
        if (!p.contains("logits_file")) continue;
        std::vector<float> want(model.n_vocab());
        std::ifstream in(kGolden + p["logits_file"].get<std::string>(), std::ios::binary);
        in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
        ASSERT_TRUE(in.good());
        TestKv kv(model.kv_geometry(64), 4);
        auto got = prompt_logits(model, kv, p["ids"].get<std::vector<int32_t>>());
        ASSERT_TRUE(got.has_value());
        double dot = 0, na = 0, nb = 0, max_diff = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            dot += double((*got)[i]) * want[i];
            na += double((*got)[i]) * (*got)[i];
            nb += double(want[i]) * want[i];
            max_diff = std::max(max_diff, std::abs(double((*got)[i]) - want[i]));
        }
        const double cos = dot / std::sqrt(na * nb);
        const auto arg = [](const std::vector<float>& v) {
            return std::max_element(v.begin(), v.end()) - v.begin();
        };
        EXPECT_EQ(arg(*got), arg(want));
        // Exact: the same bits. Otherwise one-ulp differences amplified by the massive
        // activations (above): prompt 3 measured 0.99829 with the scalar kernels, 0.99799 in
        // block order.
        EXPECT_GT(cos, exact ? 0.99999 : 0.997);
        EXPECT_LT(max_diff, exact ? 1e-4 : 1.5);
        std::printf("prompt %d: cosine %.7f, max |diff| %.4f\n", n_checked, cos, max_diff);
        ++n_checked;
    }
    EXPECT_EQ(n_checked, 4);
}

TEST_F(SmolLM2, LastPositionLogitsMatchLlamaCppInGgmlOrder) { check_logits(*ggml_model_, bit_exact_platform()); }

TEST_F(SmolLM2, LastPositionLogitsCloseToLlamaCppInBlockOrder) { check_logits(*model_, false); }

}  // namespace
}  // namespace ferrox
