// Prompt logprobs (GenerationParams::prompt_logprobs) on the default model: every prompt token
// after the first gets the log-probability that a cold prefill of the tokens before it gives,
// whatever splits the prompt into chunks (the step budget, the rows a step may take, other
// requests in the batch); the first token has none; a warm prefix cache is not used; and a
// request's generated tokens are the same with and without them.
#include "support/test_kv.h"
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>

namespace ferrox {
namespace {

const std::string kModel = std::string(FERROX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// One request's events: the prompt logprobs (and whether any came after a token), the text.
struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<TokenLogprob> prompt_lps;
    std::vector<int32_t> tokens;
    bool lp_after_token = false;
    bool done = false;
    EngineEvent last;

    EventSink sink() {
        return [this](EngineEvent&& ev) {
            std::lock_guard<std::mutex> lk(mu);
            if (ev.kind == EngineEvent::Kind::kPromptLogprobs) {
                if (!tokens.empty()) lp_after_token = true;
                for (auto& lp : ev.logprobs) prompt_lps.push_back(lp);
            } else if (ev.kind == EngineEvent::Kind::kText) {
                if (ev.token >= 0) tokens.push_back(ev.token);
            } else if (ev.kind == EngineEvent::Kind::kDone) {
                done = true;
                last = std::move(ev);
                cv.notify_all();
            }
        };
    }
    bool wait() {
        std::unique_lock<std::mutex> lk(mu);
        return cv.wait_for(lk, std::chrono::seconds(120), [&] { return done; });
    }
};

class PromptLogprobsTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!std::filesystem::exists(kModel)) return;
        ModelOptions mo;
        mo.n_threads = 2;
        mo.max_ctx = 1024;
        auto m = load_model(kModel, mo);
        ASSERT_TRUE(m.has_value()) << m.status().message();
        model_ = new std::shared_ptr<LoadedModel>(std::move(*m));
    }
    static void TearDownTestSuite() { delete model_; }
    void SetUp() override {
        if (!model_) GTEST_SKIP() << kModel << " is missing: run `make model`";
    }
    std::unique_ptr<Engine> engine(int n_parallel, int max_batch, bool cache) {
        EngineOptions eo;
        eo.n_parallel = n_parallel;
        eo.n_ctx = 4096;
        eo.block_size = 16;
        eo.max_batch_tokens = max_batch;
        eo.prefix_cache = cache;
        auto e = Engine::create(*model_, eo);
        EXPECT_TRUE(e.has_value());
        return std::move(*e);
    }
    std::vector<int32_t> ids(const std::string& text) { return (*model_)->tokenizer->encode(text, true, true); }

    // Reference: token i's log-probability from the last row of a cold prefill of tokens [0, i),
    // computed directly on the model with a KV of its own (no engine, no all_logits row), in
    // chunks of 256 (the model's batch limit is 512).
    float reference_at(const std::vector<int32_t>& p, size_t i) {
        ForwardModel& m = (*model_)->forward_model();
        std::vector<float> logits(static_cast<size_t>(m.n_vocab()));
        TestKv kv(m.kv_geometry(16, KvType::kF16), 128);
        TestSeq seq(&kv);
        EXPECT_TRUE(seq.reserve(static_cast<int>(i)).is_ok());
        for (size_t at = 0; at < i; at += 256) {
            const size_t n = std::min<size_t>(256, i - at);
            Batch b;
            b.tokens.assign(p.begin() + static_cast<std::ptrdiff_t>(at), p.begin() + static_cast<std::ptrdiff_t>(at + n));
            BatchSeq s;
            s.n_tokens = static_cast<int>(n);
            s.n_past = static_cast<int>(at);
            s.want_logits = at + n == i;
            s.block_table = seq.blocks().data();
            s.n_blocks = static_cast<int>(seq.blocks().size());
            b.seqs.push_back(s);
            EXPECT_TRUE(m.forward(b, kv, logits).is_ok());
        }
        double z = 0;
        const float mx = *std::max_element(logits.begin(), logits.end());
        for (float l : logits) z += std::exp(static_cast<double>(l - mx));
        return logits[static_cast<size_t>(p[i])] - mx - static_cast<float>(std::log(z));
    }
    std::vector<float> reference(const std::vector<int32_t>& p) {
        std::vector<float> out(p.size(), NAN);
        for (size_t i = 1; i < p.size(); ++i) out[i] = reference_at(p, i);
        return out;
    }
    static inline std::shared_ptr<LoadedModel>* model_ = nullptr;
};

GenerationParams params(int max_tokens, int prompt_logprobs) {
    GenerationParams p;
    p.sampling.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.prompt_logprobs = prompt_logprobs;
    return p;
}

// (The engine's rows come from chunks the reference computes differently: the products' and the
// attention's summation order may differ in the last bits.)
constexpr float kTol = 2e-3f;

void expect_matches(const Collector& c, const std::vector<int32_t>& p, const std::vector<float>& ref, int top) {
    ASSERT_EQ(c.prompt_lps.size(), p.size() - 1);
    EXPECT_FALSE(c.lp_after_token);
    for (size_t i = 1; i < p.size(); ++i) {
        const TokenLogprob& lp = c.prompt_lps[i - 1];
        EXPECT_EQ(lp.token, p[i]) << i;
        EXPECT_NEAR(lp.logprob, ref[i], kTol) << "prompt token " << i;
        ASSERT_EQ(static_cast<int>(lp.top.size()), top);
        for (size_t k = 1; k < lp.top.size(); ++k) EXPECT_GE(lp.top[k - 1].second, lp.top[k].second);
        if (top > 0) {
            EXPECT_GE(lp.top[0].second + 1e-6f, lp.logprob);  // the best is at least this one
        }
    }
}

TEST_F(PromptLogprobsTest, EveryPromptTokenMatchesAColdPrefill) {
    const std::vector<std::string> texts = {
        "The capital of France is Paris.", "Question: What is 7 plus 5?\nAnswer: 12",
        "<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\nBlue", "Hot is the opposite of cold"};
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<float>> refs;
    for (const auto& t : texts) {
        prompts.push_back(ids(t));
        refs.push_back(reference(prompts.back()));
    }
    // One at a time with a whole prompt per step; all at once with 8 tokens a step (chunks of
    // every request interleaved); all at once after a warm-up that filled the prefix cache.
    struct Setup {
        int n_parallel, max_batch;
        bool together, warm;
    };
    for (const Setup& su : {Setup{1, 512, false, false}, Setup{4, 8, true, false}, Setup{4, 512, true, true}}) {
        auto e = engine(su.n_parallel, su.max_batch, true);
        if (su.warm) {
            for (const auto& p : prompts) {
                Collector c;
                ASSERT_TRUE(e->submit(p, params(0, -1), c.sink()).has_value());
                ASSERT_TRUE(c.wait());
            }
        }
        std::vector<std::unique_ptr<Collector>> cs;
        for (size_t i = 0; i < prompts.size(); ++i) {
            cs.push_back(std::make_unique<Collector>());
            ASSERT_TRUE(e->submit(prompts[i], params(0, static_cast<int>(i % 3)), cs.back()->sink()).has_value());
            if (!su.together) {
                ASSERT_TRUE(cs.back()->wait());
            }
        }
        for (size_t i = 0; i < prompts.size(); ++i) {
            ASSERT_TRUE(cs[i]->wait());
            SCOPED_TRACE("setup " + std::to_string(su.n_parallel) + "/" + std::to_string(su.max_batch) + " prompt " +
                         std::to_string(i));
            expect_matches(*cs[i], prompts[i], refs[i], static_cast<int>(i % 3));
            EXPECT_EQ(cs[i]->last.finish, FinishReason::kLength);
            EXPECT_EQ(cs[i]->last.n_completion, 0);
            EXPECT_EQ(cs[i]->last.n_cached, 0);  // a warm cache holds no logits
            EXPECT_TRUE(cs[i]->tokens.empty());
        }
        EXPECT_EQ(e->stats().kv_blocks_used, 0);
    }
}

// A prompt longer than the rows a step may take (64 MiB of rows: 341 for this vocabulary) is cut
// into chunks that fit, and the tokens after it are those of a request without prompt logprobs.
TEST_F(PromptLogprobsTest, LongPromptAndTheAnswerAfterIt) {
    std::string text;
    for (int i = 0; text.size() < 2400; ++i) text += "Item " + std::to_string(i) + " is a number. ";
    const std::vector<int32_t> p = ids(text);
    ASSERT_GT(p.size(), 600u);
    auto e = engine(2, 512, true);
    Collector with, without;
    ASSERT_TRUE(e->submit(p, params(8, 1), with.sink()).has_value());
    ASSERT_TRUE(e->submit(p, params(8, -1), without.sink()).has_value());
    ASSERT_TRUE(with.wait());
    ASSERT_TRUE(without.wait());
    ASSERT_EQ(with.prompt_lps.size(), p.size() - 1);
    EXPECT_FALSE(with.lp_after_token);
    EXPECT_TRUE(without.prompt_lps.empty());
    EXPECT_EQ(with.tokens, without.tokens);
    EXPECT_EQ(with.tokens.size(), 8u);
    // Spot checks against the reference at the two sides of a row-budget cut and the end.
    for (size_t at : {size_t{1}, size_t{340}, size_t{341}, size_t{342}, p.size() - 1}) {
        EXPECT_NEAR(with.prompt_lps[at - 1].logprob, reference_at(p, at), kTol) << at;
    }
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(PromptLogprobsTest, OneTokenPromptHasNone) {
    auto e = engine(1, 512, true);
    Collector c;
    ASSERT_TRUE(e->submit({ids("Hello")[0]}, params(2, 3), c.sink()).has_value());
    ASSERT_TRUE(c.wait());
    EXPECT_TRUE(c.prompt_lps.empty());
    EXPECT_EQ(c.tokens.size(), 2u);
}

}  // namespace
}  // namespace ferrox
