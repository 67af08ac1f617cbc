// Gemma 3 270M (base, Q4_K_M) against llama.cpp: prompt token ids (SentencePiece vocabulary
// of 262,144 tokens, user-defined whitespace tokens), Gemma 3's chat template rendered by
// ferrox's Jinja engine, 64 greedy tokens on ten raw and chat prompts (one longer than the
// 512-position sliding window), and the logits of the last prompt position for three of them:
// bit-identical in llama.cpp's x86 order (ModelOptions::ggml_order), close in the default order.
// Golden data: scripts/golden/gemma3_llamacpp.py (llama-cpp-python); this test needs only the
// committed files. `make model` puts the model in models/; without it the test is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "support/test_kv.h"
#include "chat/jinja.h"
#include "testing/generate.h"
#include "engine/prompt.h"
#include "engine/tokenizer_gguf.h"
#include "kernels/quants.h"
#include "loader/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {
namespace {

const std::string kModel = std::string(FERROX_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
const std::string kGolden = std::string(FERROX_SOURCE_DIR) + "/tests/model/golden/";
constexpr int kMaxCtx = 1024;

class Gemma3 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::ifstream in(kGolden + "gemma3_llamacpp.json");
        golden_ = new nlohmann::json(nlohmann::json::parse(in));
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
        mo.max_ctx = kMaxCtx;
        auto m = Model::load(*gguf_, mo);
        ASSERT_TRUE(m.has_value()) << m.status().message();
        model_ = std::move(*m).release();
        mo.ggml_order = true;
        auto mg = Model::load(*gguf_, mo);
        ASSERT_TRUE(mg.has_value()) << mg.status().message();
        ggml_model_ = std::move(*mg).release();
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
    // ferrox's BOS rule (engine/prompt.cc): add BOS unless the text starts with it.
    static std::vector<int32_t> tokenize(const std::string& text) {
        const bool has_bos = text.rfind("<bos>", 0) == 0;
        return tok_->encode(text, !has_bos, /*parse_special=*/true);
    }
    static TestKv make_pool() { return TestKv(model_->kv_geometry(64), kMaxCtx / 64); }

    static inline GgufFile* gguf_ = nullptr;
    static inline Tokenizer* tok_ = nullptr;
    static inline Model* model_ = nullptr;       // the default options: every order fixed
    static inline Model* ggml_model_ = nullptr;  // ggml_order: llama.cpp's x86 orders
    static inline nlohmann::json* golden_ = nullptr;

    static void check_greedy(Model& model, bool exact);
    static void check_logits(Model& model, bool exact);
};

// The golden data is llama.cpp's AVX2 build (on AMD Zen 3; its AVX2-only build gives the same
// bits on an AVX-512 CPU). The AVX-512 kernels give the AVX2 kernels' bits.
bool bit_exact_platform() {
    const std::string isa = kernels_isa_name();
    return isa == "avx2" || isa == "avx512";
}

TEST_F(Gemma3, HyperparametersFromMetadata) {
    const ModelHParams& hp = model_->hparams();
    EXPECT_EQ(hp.arch, "gemma3");
    EXPECT_EQ(hp.n_vocab, 262144);
    EXPECT_EQ(hp.n_layer, 18);
    EXPECT_EQ(hp.head_dim, 256);
    EXPECT_EQ(hp.n_head, 4);
    EXPECT_EQ(hp.n_head_kv, 1);
    EXPECT_EQ(hp.n_swa, (*golden_)["n_swa"].get<int>());
    EXPECT_FLOAT_EQ(hp.embd_scale, std::sqrt(640.0f));
    EXPECT_FLOAT_EQ(hp.q_scale, 1.0f / 16.0f);
    EXPECT_FLOAT_EQ(hp.kq_scale, 1.0f);
    EXPECT_FLOAT_EQ(hp.rope_freq_base, 1e6f);
    EXPECT_FLOAT_EQ(hp.rope_freq_base_swa, 1e4f);
    // llama.cpp's default pattern 6: layers 5, 11, 17 global, the others local.
    for (int il = 0; il < hp.n_layer; ++il) EXPECT_EQ(hp.is_swa(il), il % 6 != 5) << il;
    EXPECT_TRUE(tok_->is_eog(tok_->token_id("<end_of_turn>")));
}

TEST_F(Gemma3, ChatTemplateRendersWithFerroxJinja) {
    auto tmpl = JinjaTemplate::parse((*golden_)["template"].get<std::string>());
    ASSERT_TRUE(tmpl.has_value()) << tmpl.status().message();
    int n_chat = 0;
    for (const auto& p : (*golden_)["prompts"]) {
        if (!p["chat"].get<bool>()) continue;
        nlohmann::json messages = nlohmann::json::array();
        if (p.contains("system")) messages.push_back({{"role", "system"}, {"content", p["system"]}});
        messages.push_back({{"role", "user"}, {"content", p["text"]}});
        ChatTemplateInputs in;
        in.messages_json = messages.dump();
        in.add_generation_prompt = true;
        in.bos_token = std::string(tok_->token_text(tok_->bos()));
        in.eos_token = std::string(tok_->token_text(tok_->eos()));
        auto r = render_chat_template(*tmpl, in);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        EXPECT_EQ(*r, p["rendered"].get<std::string>());
        ++n_chat;
    }
    EXPECT_GE(n_chat, 4);
}

// The file has no template: the prompt step falls back to Gemma's turn format (not ChatML),
// and gives the tokens of the official template's rendering.
TEST_F(Gemma3, PromptWithoutTemplateUsesGemmaTurns) {
    auto builder = PromptBuilder::create(*tok_, "");
    ASSERT_TRUE(builder.has_value()) << builder.status().message();
    int n_chat = 0;
    for (const auto& p : (*golden_)["prompts"]) {
        if (!p["chat"].get<bool>()) continue;
        Conversation conv;
        if (p.contains("system")) conv.messages.push_back({.role = "system", .content = p["system"].get<std::string>()});
        conv.messages.push_back({.role = "user", .content = p["text"].get<std::string>()});
        auto r = (*builder)->build(conv);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        EXPECT_EQ(r->tokens, tokenize(p["rendered"].get<std::string>())) << p["rendered"];
        ++n_chat;
    }
    EXPECT_GE(n_chat, 4);
}

TEST_F(Gemma3, PromptTokensMatchLlamaCpp) {
    for (const auto& p : (*golden_)["prompts"]) {
        EXPECT_EQ(tokenize(p["rendered"].get<std::string>()), p["ids"].get<std::vector<int32_t>>())
            << p["rendered"];
    }
}

// Greedy decoding compared token for token with llama.cpp's. All prompts decode together, one
// batch of one token per prompt per step (a sequence's bits do not depend on the others in its
// batch), each fed llama.cpp's previous token (teacher forcing): up to the first disagreement
// that is exactly the free-running greedy generation.
//
// In llama.cpp's x86 order (ggml_order, on AVX2 or AVX-512) every op of this model is computed
// as llama.cpp's AVX2 build does for a sequence alone (Q5_0/Q8_0 in ggml's vec_dot lanes, Q6_K
// as vec_dot and from 8 prompt tokens as its tiled kernel, Q4_K as its repacked gemm and gemv,
// the activations' Q8_K rounding, F16 attention with the window's softmax groups, norms, RoPE,
// the GELU table), so all 64 tokens of every prompt must match.
//
// In the default order the test falls back to: after the first disagreement the
// argmax must still agree at every step whose top-2 margin in llama.cpp is at least kNearTie,
// and the first disagreement must come at or after llama.cpp's first near-tie. This model
// amplifies the last bits (norm weights up to ~300): llama.cpp against itself with repacking
// off differs by cosine 0.99953 and up to 1.02 in a logit on prompt 0. Margins below kNearTie
// are within that noise.
constexpr float kNearTie = 1.5f;

void Gemma3::check_greedy(Model& model, bool exact) {
    const auto& prompts = (*golden_)["prompts"];
    const int n_seq = static_cast<int>(prompts.size());
    const int n_vocab = model.n_vocab();
    int n_blocks = 0;
    for (const auto& p : prompts) n_blocks += (static_cast<int>(p["ids"].size()) + 64 + 63) / 64;
    TestKv kv(model.kv_geometry(64), n_blocks);
    std::vector<std::unique_ptr<TestSeq>> seqs;
    std::vector<std::vector<int32_t>> want(n_seq);
    std::vector<std::vector<float>> margins(n_seq);
    std::vector<int> n_past(n_seq, 0), first_diff(n_seq, -1);
    std::vector<float> logits(static_cast<size_t>(n_seq) * n_vocab);
    const auto argmax = [&](int i) {
        const float* l = logits.data() + static_cast<size_t>(i) * n_vocab;
        return static_cast<int32_t>(std::max_element(l, l + n_vocab) - l);
    };
    int n_long = 0, n_checked = 0;
    std::vector<float> prefill_logits(n_vocab);
    for (int i = 0; i < n_seq; ++i) {  // prefill, in chunks of the model's batch limit
        const auto ids = prompts[i]["ids"].get<std::vector<int32_t>>();
        want[i] = prompts[i]["greedy"].get<std::vector<int32_t>>();
        margins[i] = prompts[i]["margins"].get<std::vector<float>>();
        ASSERT_EQ(want[i].size(), 64u);
        n_long += static_cast<int>(ids.size()) > model.hparams().n_swa ? 1 : 0;
        seqs.push_back(std::make_unique<TestSeq>(&kv));
        ASSERT_TRUE(seqs[i]->reserve(static_cast<int>(ids.size()) + 64).is_ok());
        for (size_t c = 0; c < ids.size(); c += 512) {
            const int n = static_cast<int>(std::min<size_t>(512, ids.size() - c));
            Batch b;
            b.tokens.assign(ids.begin() + c, ids.begin() + c + n);
            b.seqs.push_back({0, n, n_past[i], seqs[i]->blocks().data(), static_cast<int>(seqs[i]->blocks().size()),
                              c + n == ids.size()});
            ASSERT_TRUE(model.forward(b, kv, prefill_logits).is_ok());
            n_past[i] += n;
        }
        std::copy(prefill_logits.begin(), prefill_logits.end(), logits.begin() + static_cast<size_t>(i) * n_vocab);
    }
    for (int step = 0; step < 64; ++step) {
        Batch b;
        for (int i = 0; i < n_seq; ++i) {
            const int32_t got = argmax(i);
            if (got != want[i][step] && first_diff[i] < 0) first_diff[i] = step;
            if (first_diff[i] >= 0 && !exact && margins[i][step] >= kNearTie) {
                EXPECT_EQ(got, want[i][step]) << "prompt " << prompts[i]["text"] << " step " << step;
                ++n_checked;
            }
            b.tokens.push_back(want[i][step]);
            b.seqs.push_back({i, 1, n_past[i]++, seqs[i]->blocks().data(),
                              static_cast<int>(seqs[i]->blocks().size()), true});
        }
        if (step + 1 < 64) {
            ASSERT_TRUE(model.forward(b, kv, logits).is_ok());
        }
    }
    int n_full = 0;
    for (int i = 0; i < n_seq; ++i) {
        size_t first_tie = 0;
        while (first_tie < margins[i].size() && margins[i][first_tie] >= kNearTie) ++first_tie;
        const int agree = first_diff[i] < 0 ? 64 : first_diff[i];
        EXPECT_GE(agree, exact ? 64 : static_cast<int>(first_tie)) << "prompt: " << prompts[i]["text"];
        std::printf("prompt %d (%zu tokens): %d/64 greedy tokens as llama.cpp\n", i, prompts[i]["ids"].size(), agree);
        n_full += agree == 64 ? 1 : 0;
    }
    std::printf("%d/%d prompts identical for all 64 tokens; %d teacher-forced steps checked after a split\n", n_full,
                n_seq, n_checked);
    EXPECT_GE(n_seq, 8);
    EXPECT_GE(n_long, 1);
    EXPECT_GE(n_full, exact ? n_seq : n_seq / 2);
}

TEST_F(Gemma3, Greedy64TokensMatchLlamaCppInGgmlOrder) { check_greedy(*ggml_model_, bit_exact_platform()); }

TEST_F(Gemma3, Greedy64TokensFollowLlamaCppInDefaultOrder) { check_greedy(*model_, false); }

void Gemma3::check_logits(Model& model, bool exact) {
    int n_checked = 0;
    for (const auto& p : (*golden_)["prompts"]) {
        if (!p.contains("logits_file")) continue;
        std::vector<float> want(model.n_vocab());
        std::ifstream in(kGolden + p["logits_file"].get<std::string>(), std::ios::binary);
        in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
        ASSERT_TRUE(in.good());
        TestKv kv = make_pool();
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
        const auto arg = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
        EXPECT_EQ(arg(*got), arg(want));
        EXPECT_GT(cos, 0.999);
        EXPECT_LT(max_diff, 2.5);  // measured <= 1.75; llama.cpp's own repack noise ~1
        if (exact) {
            EXPECT_EQ(max_diff, 0.0);
        }
        std::printf("%s (%zu tokens): cosine %.7f, max |diff| %.5f\n", p["logits_file"].get<std::string>().c_str(),
                    p["ids"].size(), cos, max_diff);
        ++n_checked;
    }
    EXPECT_EQ(n_checked, 3);
}

TEST_F(Gemma3, LastPositionLogitsMatchLlamaCppInGgmlOrder) { check_logits(*ggml_model_, bit_exact_platform()); }

TEST_F(Gemma3, LastPositionLogitsCloseToLlamaCppInDefaultOrder) { check_logits(*model_, false); }

}  // namespace
}  // namespace ferrox
