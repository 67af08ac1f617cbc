// The engine on the default model: continuous batching gives every request the same greedy
// tokens it gets alone; cancellation, limits and stop strings; every KV block returns.
#include "support/test_kv.h"
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "testing/generate.h"
#include "engine/text_stream.h"

namespace ferrox {
namespace {

const std::string kModel = std::string(FERROX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Collects one request's events; wait() blocks until kDone.
struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    std::string text;
    std::vector<TokenLogprob> logprobs;
    bool done = false;
    EngineEvent last;
    int n_text_events = 0;

    EventSink sink() {
        return [this](EngineEvent&& ev) {
            std::lock_guard<std::mutex> lk(mu);
            if (ev.kind == EngineEvent::Kind::kText) {
                text += ev.text;
                ++n_text_events;
                for (auto& lp : ev.logprobs) logprobs.push_back(lp);
            } else if (ev.kind == EngineEvent::Kind::kDone) {
                done = true;
                last = std::move(ev);
                cv.notify_all();
            }
        };
    }
    // 60 s, or FERROX_TEST_WAIT_S (the TSan preset sets an hour: a wait that gave up would let
    // the next engine run beside this one over the same model, which TSan rightly reports).
    bool wait(int seconds = 0) {
        if (seconds <= 0) {
            const char* env = std::getenv("FERROX_TEST_WAIT_S");
            seconds = env ? std::max(1, std::atoi(env)) : 60;
        }
        std::unique_lock<std::mutex> lk(mu);
        return cv.wait_for(lk, std::chrono::seconds(seconds), [&] { return done; });
    }
};

class EngineTest : public ::testing::Test {
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
    std::unique_ptr<Engine> make_engine(int n_parallel = 4, int n_ctx = 1024, int max_queue = 64) {
        EngineOptions eo;
        eo.n_parallel = n_parallel;
        eo.n_ctx = n_ctx;
        eo.block_size = 16;
        eo.max_queue = max_queue;
        auto e = Engine::create(*model_, eo);
        EXPECT_TRUE(e.has_value());
        return std::move(*e);
    }
    std::vector<int32_t> ids(const std::string& text) {
        return (*model_)->tokenizer->encode(text, true, true);
    }
    static inline std::shared_ptr<LoadedModel>* model_ = nullptr;
};

GenerationParams greedy(int max_tokens) {
    GenerationParams p;
    p.sampling.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

TEST_F(EngineTest, BatchedRequestsMatchSoloGreedy) {
    const std::vector<std::string> prompts = {
        "The capital of France is", "def add(a, b):", "Once upon a time", "1, 2, 3,",
        "<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n", "Water boils at"};
    // Alone, through the single-sequence generator.
    std::vector<std::string> solo;
    for (const auto& p : prompts) {
        TestKv kv((*model_)->model->kv_geometry(16), 64);
        std::vector<int32_t> out;
        GenerateOptions go;
        go.n_predict = 12;
        go.sampling.temperature = 0;
        ASSERT_TRUE(generate(*(*model_)->model, kv, ids(p), go, [&](int32_t t) { out.push_back(t); return true; },
                             [](int32_t) { return false; }).has_value());
        solo.push_back((*model_)->tokenizer->decode(out));
    }
    // All at once through the engine (4 slots: two wait, then join mid-flight).
    std::vector<std::unique_ptr<Collector>> cs;  // before the engine: it outlives no sink
    auto e = make_engine(4);
    for (const auto& p : prompts) {
        cs.push_back(std::make_unique<Collector>());
        ASSERT_TRUE(e->submit(ids(p), greedy(12), cs.back()->sink()).has_value());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_TRUE(cs[i]->wait());
        EXPECT_EQ(cs[i]->last.finish, FinishReason::kLength);
        EXPECT_EQ(cs[i]->last.n_completion, 12);
        EXPECT_EQ(cs[i]->text, solo[i]) << prompts[i];
    }
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

// Issue #4, item 8: greedy output is identical whether a request runs alone, batched with 15
// others of different lengths (prefill chunked and interleaved with decoding), from a warm
// prefix cache, or after being preempted and recomputed.
TEST_F(EngineTest, GreedyIsTheSameAloneBatchedWarmAndPreempted) {
    const std::string sys =
        "<|im_start|>system\nYou are a careful assistant. Answer every question truthfully and briefly, "
        "in plain words, without lists, and say so when you do not know the answer.<|im_end|>\n";
    const std::vector<std::string> questions = {
        "Name a color.", "What is two plus two?", "Where is Paris?", "Say hello.",
        "Why is the sky blue? Explain it to a child who is five years old.", "List three fruits.",
        "Write a haiku about the sea.", "What do bees make?",
        "Who wrote Hamlet?", "Translate 'cat' to French.", "How many legs does a spider have?",
        "What is the boiling point of water at sea level, in degrees Celsius and in Fahrenheit?",
        "Is a tomato a fruit?", "Count from one to five.", "What is the opposite of hot?", "Spell 'dog'."};
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < questions.size(); ++i) {
        const std::string turn = "<|im_start|>user\n" + questions[i] + "<|im_end|>\n<|im_start|>assistant\n";
        prompts.push_back(ids(i % 2 == 0 ? sys + turn : turn));  // half share the system prompt
    }
    const int n_gen = 16;
    auto run = [&](Engine& e, bool together, int max_tokens) {
        std::vector<std::unique_ptr<Collector>> cs;
        for (const auto& p : prompts) {
            cs.push_back(std::make_unique<Collector>());
            EXPECT_TRUE(e.submit(p, greedy(max_tokens), cs.back()->sink()).has_value());
            if (!together) {
                EXPECT_TRUE(cs.back()->wait());
            }
        }
        for (auto& c : cs) EXPECT_TRUE(c->wait());
        return cs;
    };
    auto engine = [&](int n_parallel, int n_ctx, int max_batch, bool cache, int block_size = 16) {
        EngineOptions eo;
        eo.n_parallel = n_parallel;
        eo.n_ctx = n_ctx;
        eo.block_size = block_size;
        eo.max_batch_tokens = max_batch;
        eo.prefix_cache = cache;
        auto e = Engine::create(*model_, eo);
        EXPECT_TRUE(e.has_value());
        return std::move(*e);
    };

    auto alone_engine = engine(1, 1024, 512, false);
    auto alone = run(*alone_engine, false, n_gen);

    // 16 at once, 48 tokens per step: prompts are split into chunks and interleaved with the
    // decoding of the others; the shared system prompt is reused while they run.
    auto e = engine(16, 4096, 48, true);
    auto batched = run(*e, true, n_gen);
    auto warm = run(*e, true, n_gen);
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(alone[i]->last.n_completion, n_gen);
        EXPECT_EQ(batched[i]->text, alone[i]->text) << questions[i];
        EXPECT_EQ(warm[i]->text, alone[i]->text) << questions[i];
        EXPECT_EQ(alone[i]->last.n_cached, 0);
        // Warm: every full block but the one holding the prompt's last two tokens.
        const int n_prompt = static_cast<int>(prompts[i].size());
        EXPECT_EQ(warm[i]->last.n_cached, (n_prompt - 2) / 16 * 16) << questions[i];
    }
    EXPECT_GT(e->stats().prefix_hit_tokens, 0u);
    EXPECT_EQ(e->stats().n_preemptions, 0u);
    EXPECT_EQ(e->stats().kv_blocks_used, 0);

    // A pool of 20 blocks of 8 tokens for 8 sequences of up to 90: sequences are preempted as
    // they grow, recomputed (partly from the cache) and continued.
    auto small = engine(8, 160, 64, true, 8);
    auto preempted = run(*small, true, n_gen);
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(preempted[i]->text, alone[i]->text) << questions[i];
        EXPECT_EQ(preempted[i]->last.n_completion, n_gen);
    }
    EXPECT_GT(small->stats().n_preemptions, 0u);
    EXPECT_EQ(small->stats().kv_blocks_used, 0);
}

// Constrained decoding (issue 16): every answer follows its grammar and ends where the grammar
// must end; constrained and free requests share batches, and neither batching, a warm prefix
// cache nor preemption changes a constrained (or free) greedy answer.
TEST_F(EngineTest, ConstrainedAnswersFollowTheGrammarAloneBatchedAndPreempted) {
    auto g = grammar::Grammar::parse(
        "root ::= \"{\\\"answer\\\": \\\"\" [a-zA-Z ,.]{1,20} \"\\\", \\\"n\\\": \" [1-9] [0-9]{0,2} \"}\"");
    ASSERT_TRUE(g.has_value()) << g.status().message();
    const std::vector<std::string> questions = {"Name a color.", "What is two plus two?", "Where is Paris?",
                                                "Say hello."};
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& q : questions) {
        prompts.push_back(ids("<|im_start|>user\n" + q + " Answer in JSON.<|im_end|>\n<|im_start|>assistant\n"));
    }
    auto params = [&](size_t i) {
        GenerationParams p = greedy(32);
        if (i % 2 == 0) p.grammar = *g;  // half constrained, half free
        return p;
    };
    auto run = [&](Engine& e, bool together) {
        std::vector<std::unique_ptr<Collector>> cs;
        for (size_t i = 0; i < prompts.size(); ++i) {
            cs.push_back(std::make_unique<Collector>());
            EXPECT_TRUE(e.submit(prompts[i], params(i), cs.back()->sink()).has_value());
            if (!together) {
                EXPECT_TRUE(cs.back()->wait());
            }
        }
        for (auto& c : cs) EXPECT_TRUE(c->wait());
        return cs;
    };
    auto engine = [&](int n_parallel, int n_ctx, int block_size) {
        EngineOptions eo;
        eo.n_parallel = n_parallel;
        eo.n_ctx = n_ctx;
        eo.block_size = block_size;
        eo.max_batch_tokens = 48;
        auto e = Engine::create(*model_, eo);
        EXPECT_TRUE(e.has_value());
        return std::move(*e);
    };
    auto alone_engine = engine(1, 1024, 16);
    auto alone = run(*alone_engine, false);
    auto both = engine(4, 2048, 16);
    auto batched = run(*both, true);
    auto warm = run(*both, true);
    auto small = engine(4, 88, 8);  // 11 blocks of 8 for four sequences of up to ~60
    auto preempted = run(*small, true);
    EXPECT_GT(small->stats().n_preemptions, 0u);
    auto vocab = std::make_shared<grammar::TokenVocab>(std::vector<std::string>{}, std::vector<int32_t>{});
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(batched[i]->text, alone[i]->text) << questions[i];
        EXPECT_EQ(warm[i]->text, alone[i]->text) << questions[i];
        EXPECT_EQ(preempted[i]->text, alone[i]->text) << questions[i];
        if (i % 2 == 0) {
            grammar::Matcher m(std::make_shared<grammar::GrammarRuntime>(*g, vocab));
            EXPECT_TRUE(m.accept_bytes(alone[i]->text) && m.must_end()) << alone[i]->text;
            EXPECT_EQ(alone[i]->last.finish, FinishReason::kStop) << alone[i]->text;
        } else {
            EXPECT_EQ(alone[i]->last.n_completion, 32);  // the free ones run to the limit
        }
    }
    EXPECT_EQ(small->stats().kv_blocks_used, 0);
    EXPECT_EQ(both->stats().kv_blocks_used, 0);
}

// Issue #18, speculative decoding: drafts change how many steps an answer takes, never the
// answer. Input-grounded prompts (where prompt lookup drafts a lot) and open ones, greedy and
// seeded sampling with penalties and logprobs, constrained and free, alone, batched and
// preempted: the tokens, their logprobs and the finish are those of the engine without
// speculation, and drafts were verified and accepted.
TEST_F(EngineTest, SpeculationChangesNoToken) {
    const std::string text =
        "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.";
    const std::vector<std::string> asks = {"Repeat this text exactly: " + text, "Copy it twice: " + text,
                                           "Write a poem about the sea.", "1, 2, 3, 4, 5, 6, 7, 8,"};
    auto g = grammar::Grammar::parse("root ::= \"[\" [0-9]+ (\", \" [0-9]+)* \"]\"");
    ASSERT_TRUE(g.has_value()) << g.status().message();
    std::vector<std::vector<int32_t>> prompts;
    std::vector<GenerationParams> params;
    for (size_t i = 0; i < asks.size(); ++i) {
        for (int mode = 0; mode < (i == 3 ? 3 : 2); ++mode) {
            prompts.push_back(ids("<|im_start|>user\n" + asks[i] + "<|im_end|>\n<|im_start|>assistant\n"));
            GenerationParams p = greedy(40);
            p.ignore_eos = false;
            if (mode == 1) {  // seeded sampling, penalties, logprobs
                p.sampling.temperature = 0.7f;
                p.sampling.seed = 1234 + i;
                p.sampling.repeat_penalty = 1.05f;
                p.top_logprobs = 2;
            } else if (mode == 2) {
                p.grammar = *g;
            }
            params.push_back(p);
        }
    }
    auto run = [&](int spec_ngram, int n_parallel, int n_ctx, int block_size,
                   std::shared_ptr<LoadedModel> draft = nullptr) {
        EngineOptions eo;
        eo.n_parallel = n_parallel;
        eo.n_ctx = n_ctx;
        eo.block_size = block_size;
        eo.spec_ngram = spec_ngram;
        eo.spec_unpriced = true;  // every draft found is verified: deterministic counts
        auto e = Engine::create(*model_, eo, std::move(draft));
        EXPECT_TRUE(e.has_value());
        std::vector<std::unique_ptr<Collector>> cs;
        for (size_t i = 0; i < prompts.size(); ++i) {
            cs.push_back(std::make_unique<Collector>());
            EXPECT_TRUE((*e)->submit(prompts[i], params[i], cs.back()->sink()).has_value());
            if (n_parallel == 1) {
                EXPECT_TRUE(cs.back()->wait());
            }
        }
        for (auto& c : cs) EXPECT_TRUE(c->wait());
        EXPECT_EQ((*e)->stats().kv_blocks_used, 0);
        return std::make_pair(std::move(cs), (*e)->stats());
    };
    auto [plain, plain_stats] = run(0, 1, 1024, 16);
    EXPECT_EQ(plain_stats.spec_drafted, 0u);
    auto [alone, alone_stats] = run(3, 1, 1024, 16);
    auto [batched, batched_stats] = run(3, 6, 2048, 16);
    auto [preempted, preempted_stats] = run(3, 6, 320, 8);  // 40 blocks of 8 for six of up to ~90
    // A draft model (the model itself: its drafts, computed over its own KV, are nearly always
    // the greedy choice; sampled answers reject many), alone and batched with preemption.
    auto [drafted, drafted_stats] = run(0, 1, 1024, 16, *model_);
    auto [drafted_pre, drafted_pre_stats] = run(0, 6, 256, 8, *model_);
    EXPECT_GT(drafted_stats.spec_accepted, 100u);
    EXPECT_LT(drafted_stats.spec_accepted, drafted_stats.spec_drafted);
    EXPECT_GT(drafted_pre_stats.spec_accepted, 100u);
    EXPECT_GT(drafted_pre_stats.n_preemptions, 0u);
    EXPECT_GT(alone_stats.spec_accepted, 20u);
    EXPECT_GT(batched_stats.spec_accepted, 20u);
    EXPECT_GT(preempted_stats.spec_accepted, 20u);
    EXPECT_LT(alone_stats.spec_accepted, alone_stats.spec_drafted);  // some drafts were wrong
    EXPECT_GT(preempted_stats.n_preemptions, 0u);
    for (size_t i = 0; i < prompts.size(); ++i) {
        for (auto* other : {&alone, &batched, &preempted, &drafted, &drafted_pre}) {
            const Collector& c = *(*other)[i];
            EXPECT_EQ(c.text, plain[i]->text) << i;
            EXPECT_EQ(c.last.finish, plain[i]->last.finish) << i;
            EXPECT_EQ(c.last.n_completion, plain[i]->last.n_completion) << i;
            ASSERT_EQ(c.logprobs.size(), plain[i]->logprobs.size()) << i;
            for (size_t t = 0; t < c.logprobs.size(); ++t) {
                EXPECT_EQ(c.logprobs[t].token, plain[i]->logprobs[t].token);
                EXPECT_EQ(c.logprobs[t].logprob, plain[i]->logprobs[t].logprob);  // bit for bit
            }
        }
    }
}

// A draft model of another vocabulary is refused with a line naming the difference.
TEST_F(EngineTest, DraftModelOfAnotherVocabularyIsAnError) {
    const std::string gemma = std::string(FERROX_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
    if (!std::filesystem::exists(gemma)) GTEST_SKIP() << gemma << " is missing: run `make model`";
    ModelOptions mo;
    mo.n_threads = 1;
    auto d = load_model(gemma, mo);
    ASSERT_TRUE(d.has_value()) << d.status().message();
    auto e = Engine::create(*model_, EngineOptions{}, std::move(*d));
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("not the same vocabulary"), std::string::npos) << e.status().message();
}

TEST_F(EngineTest, CancelFreesEverything) {
    Collector a, b;
    auto e = make_engine(2);
    auto ha = e->submit(ids("Tell me a long story about a dragon."), greedy(500), a.sink());
    auto hb = e->submit(ids("Count to one hundred:"), greedy(20), b.sink());
    ASSERT_TRUE(ha.has_value() && hb.has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (*ha)->cancel();
    ASSERT_TRUE(a.wait());
    EXPECT_EQ(a.last.finish, FinishReason::kCancelled);
    EXPECT_LT(a.last.n_completion, 500);
    ASSERT_TRUE(b.wait());
    EXPECT_EQ(b.last.finish, FinishReason::kLength);  // the other request is unharmed
    EXPECT_EQ(b.last.n_completion, 20);
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

// The prefix cache's tiers on a pool too small to keep one prompt while others run: a prompt
// whose blocks the pool evicted is read back from host memory (--cache-ram) with the same
// greedy tokens; without the tier it is recomputed. A cache_control pin keeps it in the pool.
TEST_F(EngineTest, EvictedPrefixesComeBackFromRamAndPinsKeepThem) {
    std::string text = "<|im_start|>system\nYou are a helpful assistant who answers in one line.";
    for (int i = 0; i < 12; ++i) text += " Rule " + std::to_string(i) + ": be brief and kind to everyone.";
    const std::vector<int32_t> a = ids(text + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    ASSERT_GT(a.size(), 120u);
    const int full = (static_cast<int>(a.size()) - 2) / 16 * 16;
    auto run = [&](Engine& e, const std::vector<int32_t>& p, GenerationParams params) {
        Collector c;
        EXPECT_TRUE(e.submit(p, std::move(params), c.sink()).has_value());
        EXPECT_TRUE(c.wait());
        return std::make_pair(c.text, c.last.n_cached);
    };
    // Other prompts, each as long as the pool allows: every block of `a` gets evicted.
    auto churn = [&](Engine& e) {
        for (int k = 0; k < 6; ++k) {
            std::vector<int32_t> other;
            for (int i = 0; i < 64; ++i) other.push_back(1000 + 97 * k + i);
            run(e, other, greedy(4));
        }
    };
    auto engine = [&](int64_t ram_mib) {
        EngineOptions eo;
        eo.n_parallel = 1;
        eo.n_ctx = 256;  // 16 blocks of 16
        eo.block_size = 16;
        eo.cache_ram_mib = ram_mib;
        auto e = Engine::create(*model_, eo);
        EXPECT_TRUE(e.has_value());
        return std::move(*e);
    };
    auto plain = engine(0);
    const auto cold = run(*plain, a, greedy(8));
    churn(*plain);
    EXPECT_LT(run(*plain, a, greedy(8)).second, full / 2);  // evicted: recomputed

    auto tiered = engine(64);
    EXPECT_EQ(run(*tiered, a, greedy(8)), std::make_pair(cold.first, 0));
    churn(*tiered);
    const auto back = run(*tiered, a, greedy(8));
    EXPECT_EQ(back.first, cold.first);
    EXPECT_EQ(back.second, full);
    EXPECT_GE(tiered->stats().ram_hit_blocks, static_cast<uint64_t>(full / 16 / 2));
    EXPECT_GT(tiered->stats().ram_cache_bytes, 0);

    auto pinned = engine(0);
    GenerationParams p = greedy(8);
    p.cache_pins.push_back({.n_tokens = static_cast<int>(a.size()), .ttl_s = 300});
    run(*pinned, a, p);
    EXPECT_GT(pinned->stats().kv_blocks_pinned, 0);
    churn(*pinned);
    const auto kept = run(*pinned, a, greedy(8));
    EXPECT_EQ(kept.first, cold.first);
    EXPECT_EQ(kept.second, full);
    EXPECT_EQ(pinned->stats().pins_broken, 0u);
}

TEST_F(EngineTest, LimitsAreErrorsWithNumbers) {
    Collector c;
    std::vector<std::unique_ptr<Collector>> cs;
    auto e = make_engine(1, 256, 2);
    auto r = e->submit(std::vector<int32_t>(200, 100), greedy(100), c.sink());
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("200"), std::string::npos);
    EXPECT_NE(r.status().message().find("256"), std::string::npos);
    EXPECT_FALSE(e->submit({}, greedy(1), c.sink()).has_value());
    EXPECT_FALSE(e->submit({1, 999999}, greedy(1), c.sink()).has_value());
    // Queue: one running, two waiting, the next refused.
    int refused = 0;
    for (int i = 0; i < 6; ++i) {
        cs.push_back(std::make_unique<Collector>());
        auto h = e->submit(ids("Hello"), greedy(40), cs.back()->sink());
        if (!h.has_value()) {
            EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted);
            ++refused;
            cs.pop_back();
        }
    }
    EXPECT_GE(refused, 1);
    for (auto& c2 : cs) ASSERT_TRUE(c2->wait());
}

TEST_F(EngineTest, StopStringNeverLeaks) {
    Collector c;
    auto e = make_engine(1);
    // Greedy continuation of this prompt starts " Paris." (see the golden test); stop at "ris."
    // which spans tokens.
    GenerationParams p = greedy(30);
    p.stop = {"ris."};
    ASSERT_TRUE(e->submit(ids("The capital of France is"), p, c.sink()).has_value());
    ASSERT_TRUE(c.wait());
    EXPECT_EQ(c.last.finish, FinishReason::kStop);
    EXPECT_EQ(c.text, " Pa");
}

TEST_F(EngineTest, LogprobsAreANormalisedDistribution) {
    Collector c;
    auto e = make_engine(1);
    GenerationParams p = greedy(4);
    p.top_logprobs = 5;
    ASSERT_TRUE(e->submit(ids("The capital of France is"), p, c.sink()).has_value());
    ASSERT_TRUE(c.wait());
    ASSERT_EQ(c.logprobs.size(), 4u);
    for (const auto& lp : c.logprobs) {
        ASSERT_EQ(lp.top.size(), 5u);
        EXPECT_EQ(lp.top[0].first, lp.token);  // greedy picks the most likely
        EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
        EXPECT_LE(lp.logprob, 0.0f);
        double mass = 0;
        for (const auto& [id, l] : lp.top) mass += std::exp(l);
        EXPECT_LE(mass, 1.0 + 1e-4);
        for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_GE(lp.top[i - 1].second, lp.top[i].second);
    }
}

TEST(StopHoldback, LongestSuffixThatStartsAStopString) {
    EXPECT_EQ(stop_prefix_holdback("hello wor", {"world"}), 3u);
    EXPECT_EQ(stop_prefix_holdback("hello", {"world"}), 0u);
    EXPECT_EQ(stop_prefix_holdback("abc<", {"<|end|>", "c<x"}), 2u);
    EXPECT_EQ(stop_prefix_holdback("", {"x"}), 0u);
    EXPECT_EQ(stop_prefix_holdback("xworl", {"world"}), 4u);
    EXPECT_EQ(stop_prefix_holdback("world", {"world"}), 0u);  // full matches are found, not held
}

}  // namespace
}  // namespace ferrox
