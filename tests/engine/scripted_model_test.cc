// The scripted stand-in model: scripts load (and bad ones fail with one line naming the file),
// and the real engine, run on the default model's tokenizer, streams exactly the scripted
// replies: by trigger, sampled or greedy, batched, from a warm prefix cache, across chunked
// prefill and preemption, with tool-call markup and with a control token in the reply.
#include "testing/scripted_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/tokenizer_gguf.h"
#include "loader/gguf.h"

namespace ferrox {
namespace {

const std::string kModel = std::string(FERROX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// The limits a real model would report; the scripted model must pass them through.
class LimitsModel final : public ForwardModel {
public:
    explicit LimitsModel(int n_vocab) : n_vocab_(n_vocab) {}
    int n_vocab() const override { return n_vocab_; }
    int max_ctx() const override { return 2048; }
    int n_ctx_train() const override { return 8192; }
    int max_batch_tokens() const override { return 256; }
    KvGeometry kv_geometry(int block_size, KvType type) const override {
        return {30, 192, block_size, type};  // SmolLM2-135M: 30 layers, 3 KV heads of 64
    }
    Status check_kv_type(KvType type) const override {
        return type == KvType::kF16 ? Status::ok() : unimplemented("no q8_0 here");
    }
    Status forward(const Batch&, KvStorage&, std::span<float>) override {
        return internal_error("the real model must not run");
    }

private:
    int n_vocab_;
};

// Passes forward() through, gated until open() and counting the most sequences in one batch.
// Engine thread calls forward(); the test thread calls the rest.
class SpyModel final : public ForwardModel {
public:
    explicit SpyModel(std::unique_ptr<ForwardModel> inner) : inner_(std::move(inner)) {}
    int n_vocab() const override { return inner_->n_vocab(); }
    int max_ctx() const override { return inner_->max_ctx(); }
    int n_ctx_train() const override { return inner_->n_ctx_train(); }
    int max_batch_tokens() const override { return inner_->max_batch_tokens(); }
    KvGeometry kv_geometry(int block_size, KvType type) const override {
        return inner_->kv_geometry(block_size, type);
    }
    Status check_kv_type(KvType type) const override { return inner_->check_kv_type(type); }
    Status forward(const Batch& batch, KvStorage& kv, std::span<float> logits) override {
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return open_; });
            // Sequences, not entries: a speculating sequence adds one entry per draft token,
            // all over its own block table.
            std::set<const int32_t*> tables;
            for (const BatchSeq& q : batch.seqs) tables.insert(q.block_table);
            max_seqs_ = std::max(max_seqs_, static_cast<int>(tables.size()));
        }
        return inner_->forward(batch, kv, logits);
    }
    void close() {
        std::lock_guard<std::mutex> lk(mu_);
        open_ = false;
    }
    void open() {
        std::lock_guard<std::mutex> lk(mu_);
        open_ = true;
        cv_.notify_all();
    }
    int max_seqs() {
        std::lock_guard<std::mutex> lk(mu_);
        return max_seqs_;
    }

private:
    std::unique_ptr<ForwardModel> inner_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool open_ = true;
    int max_seqs_ = 0;
};

// Opens a closed SpyModel when a test leaves early, before the engine (declared later) joins.
struct OpenOnExit {
    SpyModel& spy;
    ~OpenOnExit() { spy.open(); }
};

// One request's events; wait() blocks until kDone.
struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    std::string text;
    std::vector<int32_t> lp_tokens;
    bool done = false;
    EngineEvent last;

    EventSink sink() {
        return [this](EngineEvent&& ev) {
            std::lock_guard<std::mutex> lk(mu);
            if (ev.kind == EngineEvent::Kind::kText) {
                text += ev.text;
                for (const auto& lp : ev.logprobs) lp_tokens.push_back(lp.token);
            } else if (ev.kind == EngineEvent::Kind::kDone) {
                done = true;
                last = std::move(ev);
                cv.notify_all();
            }
        };
    }
    bool wait(int seconds = 30) {
        std::unique_lock<std::mutex> lk(mu);
        return cv.wait_for(lk, std::chrono::seconds(seconds), [&] { return done; });
    }
};

// A script file under the temp directory, removed at the end of the test.
class ScriptFile {
public:
    explicit ScriptFile(const std::string& json) {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = (std::filesystem::temp_directory_path() /
                 ("ferrox_script_" + std::to_string(::getpid()) + "_" + info->name() + ".json"))
                    .string();
        std::ofstream(path_, std::ios::binary) << json;
    }
    ~ScriptFile() { std::filesystem::remove(path_); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

std::string chat(const std::string& user) {
    return "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

const std::string kToolCall = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
const std::string kThink = "<think>\nTwo and two.\n</think>\nIt is 4.";
const std::string kSunny = "It is sunny in Paris, 20 degrees.";
const std::string kDefault = "I am a scripted model.";

// Most specific first: the second turn of the tool call still holds "weather".
const std::string kScript = R"([
    {"when": "<tool_response>", "reply": "It is sunny in Paris, 20 degrees."},
    {"when": "weather", "reply": "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"},
    {"when": "2 + 2", "reply": "<think>\nTwo and two.\n</think>\nIt is 4."},
    {"when": "", "reply": "I am a scripted model."}
])";

GenerationParams greedy() {
    GenerationParams p;
    p.sampling.temperature = 0;
    p.top_logprobs = 0;
    return p;
}

class ScriptedModelTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!std::filesystem::exists(kModel)) return;
        auto g = GgufFile::open(kModel);
        ASSERT_TRUE(g.has_value()) << g.status().message();
        auto spec = vocab_from_gguf(**g);
        ASSERT_TRUE(spec.has_value()) << spec.status().message();
        spec_ = new VocabSpec(std::move(*spec));
    }
    static void TearDownTestSuite() {
        delete spec_;
        spec_ = nullptr;
    }
    void SetUp() override {
        if (!spec_) GTEST_SKIP() << kModel << " is missing: run `make model`";
    }

    // A LoadedModel with the default model's tokenizer and the scripted stand-in (behind a
    // SpyModel), with no weights: the scripted model needs only the real one's limits.
    std::shared_ptr<LoadedModel> scripted(const std::string& json) {
        auto m = std::make_shared<LoadedModel>();
        m->name = "scripted";
        auto tok = Tokenizer::create(*spec_);
        EXPECT_TRUE(tok.has_value()) << tok.status().message();
        if (!tok.has_value()) return nullptr;
        m->tokenizer = std::move(*tok);
        ScriptFile file(json);
        auto rules = load_script(file.path(), *m->tokenizer);
        EXPECT_TRUE(rules.has_value()) << rules.status().message();
        if (!rules.has_value()) return nullptr;
        LimitsModel real(m->tokenizer->n_vocab());
        m->stand_in = std::make_unique<SpyModel>(make_scripted_model(real, *m->tokenizer, std::move(*rules)));
        return m;
    }
    static SpyModel& spy(const std::shared_ptr<LoadedModel>& m) { return static_cast<SpyModel&>(*m->stand_in); }

    static EngineOptions options(int n_parallel = 4) {
        EngineOptions eo;
        eo.n_parallel = n_parallel;
        eo.n_ctx = 1024;
        eo.block_size = 16;
        return eo;
    }
    std::unique_ptr<Engine> engine(std::shared_ptr<LoadedModel> m, const EngineOptions& eo = options()) {
        auto e = Engine::create(std::move(m), eo);
        EXPECT_TRUE(e.has_value()) << e.status().message();
        return e.has_value() ? std::move(*e) : nullptr;
    }
    std::vector<int32_t> ids(const LoadedModel& m, const std::string& text) {
        return m.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/true);
    }
    // What the engine must emit for `reply`: its tokens and then end-of-generation.
    std::vector<int32_t> reply_ids(const LoadedModel& m, const std::string& reply) {
        std::vector<int32_t> r = m.tokenizer->encode(reply, false, true);
        r.push_back(m.tokenizer->eos());
        return r;
    }
    // Runs one request to its end and checks it got exactly `reply`.
    void expect_reply(Engine& e, const std::string& prompt, const std::string& reply,
                      GenerationParams p = greedy()) {
        Collector c;
        ASSERT_TRUE(e.submit(ids(e.model(), prompt), p, c.sink()).has_value());
        ASSERT_TRUE(c.wait());
        EXPECT_EQ(c.text, reply) << prompt;
        EXPECT_EQ(c.last.finish, FinishReason::kStop);
        if (p.top_logprobs >= 0) {
            EXPECT_EQ(c.lp_tokens, reply_ids(e.model(), reply));
        }
    }
    static bool wait_idle(Engine& e) {
        for (int i = 0; i < 2000; ++i) {
            const Engine::Stats st = e.stats();
            if (st.n_running == 0 && st.n_waiting == 0) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return false;
    }

    static inline VocabSpec* spec_ = nullptr;
};

TEST_F(ScriptedModelTest, LimitsAreTheRealModels) {
    auto tok = Tokenizer::create(*spec_);
    ASSERT_TRUE(tok.has_value());
    LimitsModel real(49152);
    auto m = make_scripted_model(real, **tok, {});
    EXPECT_EQ(m->n_vocab(), 49152);
    EXPECT_EQ(m->max_ctx(), 2048);
    EXPECT_EQ(m->n_ctx_train(), 8192);
    EXPECT_EQ(m->max_batch_tokens(), 256);
    const KvGeometry g = m->kv_geometry(16, KvType::kQ8_0);
    EXPECT_EQ(g.n_layer, 30);
    EXPECT_EQ(g.kv_dim, 192);
    EXPECT_EQ(g.block_size, 16);
    EXPECT_EQ(g.type, KvType::kQ8_0);
    EXPECT_TRUE(m->check_kv_type(KvType::kF16).is_ok());
    EXPECT_EQ(m->check_kv_type(KvType::kQ8_0).code(), StatusCode::kUnimplemented);
}

TEST_F(ScriptedModelTest, EachTriggerGetsItsReply) {
    auto m = scripted(kScript);
    ASSERT_TRUE(m);
    auto e = engine(m);
    ASSERT_TRUE(e);
    expect_reply(*e, chat("What is the weather in Paris?"), kToolCall);
    expect_reply(*e, chat("What is 2 + 2?"), kThink);
    expect_reply(*e, chat("Hello"), kDefault);
    // Sampled decoding picks the same tokens.
    GenerationParams sampled;
    sampled.sampling.seed = 7;
    expect_reply(*e, chat("What is 2 + 2?"), kThink, sampled);
    ASSERT_TRUE(wait_idle(*e));
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(ScriptedModelTest, NoRuleAppliesGivesEndOfGeneration) {
    auto m = scripted(R"([{"when": "weather", "reply": "x"}])");
    ASSERT_TRUE(m);
    Collector c;  // before the engine: it outlives no sink
    auto e = engine(m);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->submit(ids(*m, chat("Hello")), greedy(), c.sink()).has_value());
    ASSERT_TRUE(c.wait());
    EXPECT_EQ(c.text, "");
    EXPECT_EQ(c.last.finish, FinishReason::kStop);
    EXPECT_EQ(c.last.n_completion, 1);
    EXPECT_EQ(c.lp_tokens, std::vector<int32_t>{m->tokenizer->eos()});
}

// The step counters behind /metrics' per-step overhead: without speculation a reply of n
// tokens takes n steps (the prompt's step gives the first token), and the steps' wall time
// holds their forward passes'.
TEST_F(ScriptedModelTest, StepAndForwardTimesAreCounted) {
    auto m = scripted(kScript);
    ASSERT_TRUE(m);
    EngineOptions eo = options();
    eo.spec_ngram = 0;
    auto e = engine(m, eo);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->stats().n_steps, 0u);
    expect_reply(*e, chat("Hello"), kDefault);
    ASSERT_TRUE(wait_idle(*e));
    const Engine::Stats st = e->stats();
    EXPECT_EQ(st.n_steps, reply_ids(*m, kDefault).size());
    EXPECT_GT(st.forward_seconds, 0.0);
    EXPECT_GE(st.step_seconds, st.forward_seconds);
    const std::string prom = e->prometheus();
    EXPECT_NE(prom.find("ferrox_engine_steps_total " + std::to_string(st.n_steps) + "\n"), std::string::npos) << prom;
    EXPECT_NE(prom.find("ferrox_engine_forward_seconds_total "), std::string::npos);
}

TEST_F(ScriptedModelTest, TwoTriggersBatchedTogether) {
    auto m = scripted(kScript);
    ASSERT_TRUE(m);
    SpyModel& s = spy(m);
    Collector a, b;  // before the engine: it outlives no sink
    auto e = engine(m, options(2));
    ASSERT_TRUE(e);
    OpenOnExit guard{s};
    // Both wait at the first forward, so the second is admitted while the first is running.
    s.close();
    ASSERT_TRUE(e->submit(ids(*m, chat("What is the weather?")), greedy(), a.sink()).has_value());
    ASSERT_TRUE(e->submit(ids(*m, chat("And 2 + 2?")), greedy(), b.sink()).has_value());
    s.open();
    ASSERT_TRUE(a.wait());
    ASSERT_TRUE(b.wait());
    EXPECT_EQ(a.text, kToolCall);
    EXPECT_EQ(b.text, kThink);
    EXPECT_EQ(a.lp_tokens, reply_ids(*m, kToolCall));
    EXPECT_EQ(b.lp_tokens, reply_ids(*m, kThink));
    EXPECT_EQ(s.max_seqs(), 2);
}

TEST_F(ScriptedModelTest, WarmPrefixCacheAndSecondTurn) {
    auto m = scripted(kScript);
    ASSERT_TRUE(m);
    Collector again, next;  // before the engine: it outlives no sink
    auto e = engine(m);
    ASSERT_TRUE(e);
    const std::string turn1 = chat("You are a helpful assistant with tools. What is the weather in Paris today?");
    expect_reply(*e, turn1, kToolCall);
    ASSERT_TRUE(e->submit(ids(*m, turn1), greedy(), again.sink()).has_value());
    ASSERT_TRUE(again.wait());
    EXPECT_EQ(again.text, kToolCall);
    EXPECT_GT(again.last.n_cached, 0);
    // The next turn repeats the generated tokens (their blocks are cached too); the tool's
    // answer triggers the first rule although "weather" is still in the history.
    const std::string turn2 = turn1 + kToolCall + "<|im_end|>\n" +
                              chat("<tool_response>\n{\"temp\": 20}\n</tool_response>");
    ASSERT_TRUE(e->submit(ids(*m, turn2), greedy(), next.sink()).has_value());
    ASSERT_TRUE(next.wait());
    EXPECT_EQ(next.text, kSunny);
    EXPECT_GT(next.last.n_cached, again.last.n_cached);
    ASSERT_TRUE(wait_idle(*e));
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(ScriptedModelTest, ChunkedPrefillAndPreemption) {
    auto m = scripted(kScript);
    ASSERT_TRUE(m);
    std::vector<std::unique_ptr<Collector>> cs;
    EngineOptions eo = options(3);
    eo.block_size = 4;
    eo.n_ctx = 72;             // three prompts fit, three replies do not: preemption
    eo.max_batch_tokens = 7;   // prompts of ~30 tokens go in chunks
    auto e = engine(m, eo);
    ASSERT_TRUE(e);
    SpyModel& s = spy(m);
    OpenOnExit guard{s};
    // All three wait at the first forward: on a loaded machine the first request could
    // otherwise end before the third arrives, and nothing would be preempted.
    s.close();
    const std::vector<std::pair<std::string, std::string>> reqs = {
        {chat("Please tell me, what is the weather like?"), kToolCall},
        {chat("Please tell me, what is 2 + 2 exactly?"), kThink},
        {chat("Please tell me something about yourself."), kDefault},
    };
    for (const auto& [prompt, reply] : reqs) {
        cs.push_back(std::make_unique<Collector>());
        ASSERT_TRUE(e->submit(ids(*m, prompt), greedy(), cs.back()->sink()).has_value());
    }
    s.open();
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(cs[i]->wait());
        EXPECT_EQ(cs[i]->text, reqs[i].second) << reqs[i].first;
        EXPECT_EQ(cs[i]->lp_tokens, reply_ids(*m, reqs[i].second));
    }
    ASSERT_TRUE(wait_idle(*e));
    EXPECT_GT(e->stats().n_preemptions, 0u);
    EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(ScriptedModelTest, ReplyHoldingAnotherRulesTriggerKeepsGoing) {
    // Once "beta" is emitted, the first rule's trigger is in the history; the reply in
    // progress still wins.
    auto m = scripted(R"([
        {"when": "beta", "reply": "wrong"},
        {"when": "alpha", "reply": "alpha, then beta, then gamma."}
    ])");
    ASSERT_TRUE(m);
    auto e = engine(m);
    ASSERT_TRUE(e);
    expect_reply(*e, chat("Say alpha."), "alpha, then beta, then gamma.");
}

TEST_F(ScriptedModelTest, ControlTokenInReplyIsOneToken) {
    auto m = scripted("[]");
    ASSERT_TRUE(m);
    const Tokenizer& tok = *m->tokenizer;
    int32_t control = -1;
    for (int32_t i = 0; i < tok.n_vocab() && control < 0; ++i) {
        if (tok.token_type(i) == TokenType::kControl && !tok.is_eog(i) && i != tok.bos()) control = i;
    }
    ASSERT_GE(control, 0) << "the vocabulary has no control token to test with";
    const std::string markup(tok.token_text(control));
    std::string json = R"([{"when": "", "reply": "before)" + markup + R"(after"}])";
    m = scripted(json);
    ASSERT_TRUE(m);
    Collector c;  // before the engine: it outlives no sink
    auto e = engine(m);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->submit(ids(*m, chat("Hi")), greedy(), c.sink()).has_value());
    ASSERT_TRUE(c.wait());
    const std::vector<int32_t> want = reply_ids(*m, "before" + markup + "after");
    EXPECT_EQ(c.lp_tokens, want);
    EXPECT_NE(std::find(want.begin(), want.end(), control), want.end()) << markup;
}

// ---- Script errors: a tiny vocabulary is enough, so these run without the model file. ----

std::unique_ptr<Tokenizer> tiny_tokenizer() {
    VocabSpec spec;
    spec.kind = VocabKind::kBpe;
    spec.pre = "default";
    spec.tokens = {"<|endoftext|>", "a", "b"};
    spec.token_types = {TokenType::kControl, TokenType::kNormal, TokenType::kNormal};
    spec.eos_id = 0;
    auto tok = Tokenizer::create(std::move(spec));
    EXPECT_TRUE(tok.has_value()) << tok.status().message();
    return tok.has_value() ? std::move(*tok) : nullptr;
}

TEST(ScriptErrors, OneLineNamingTheFile) {
    auto tok = tiny_tokenizer();
    ASSERT_TRUE(tok);
    const std::vector<std::string> bad = {
        "[{\"when\": \"a\", ",                   // not JSON
        "{\"when\": \"a\", \"reply\": \"b\"}",   // not an array
        "[1]",                                   // a rule not an object
        "[{\"when\": \"a\"}]",                   // no reply
        "[{\"when\": 3, \"reply\": \"b\"}]",     // when not a string
        "[{\"reply\": \"b\", \"whn\": \"a\"}]",  // unknown key
    };
    for (const std::string& json : bad) {
        ScriptFile f(json);
        auto r = load_script(f.path(), *tok);
        ASSERT_FALSE(r.has_value()) << json;
        const std::string& msg = r.status().message();
        EXPECT_NE(msg.find(f.path()), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    auto missing = load_script("/nonexistent/script.json", *tok);
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.status().message().find("/nonexistent/script.json"), std::string::npos);
}

TEST(ScriptErrors, RepliesEndWithEndOfGeneration) {
    auto tok = tiny_tokenizer();
    ASSERT_TRUE(tok);
    ScriptFile f(R"([{"when": "a", "reply": "ab"}, {"reply": ""}])");
    auto r = load_script(f.path(), *tok);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[0].when, "a");
    EXPECT_EQ((*r)[0].reply, (std::vector<int32_t>{1, 2, 0}));
    EXPECT_EQ((*r)[1].when, "");
    EXPECT_EQ((*r)[1].reply, std::vector<int32_t>{0});
}

}  // namespace
}  // namespace ferrox
