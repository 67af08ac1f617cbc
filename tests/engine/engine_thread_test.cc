// Engine: an EngineCore on its own thread behind a request queue. The scheduling policy is
// tested step by step in scheduler_test.cc; here only what the thread adds: requests submitted
// from other threads all end with their answers, the queue limit refuses (429) beyond
// max_queue, and shutdown ends every request, queued or running, with one kDone each.
//
// No sleeps: the fake model can hold the engine thread at the start of a forward pass, so a
// test knows where it is; waits are on condition variables, with a timeout only as a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "support/bracket_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {
namespace {

constexpr int kVocab = 64;
constexpr auto kTimeout = std::chrono::seconds(30);

// The next token after `last` at position `pos` (never 0, the end of generation).
int32_t follow(int32_t last, int pos) { return 1 + (last * 31 + pos * 7) % (kVocab - 1); }

// A model whose next token follows from the last token and its position alone, so the answers
// are known without KV; forwards from the hold_from-th on wait at their start until release().
class GateModel final : public ForwardModel {
  public:
    int n_vocab() const override { return kVocab; }
    int max_ctx() const override { return 4096; }
    int n_ctx_train() const override { return 4096; }
    int max_batch_tokens() const override { return 1024; }
    KvGeometry kv_geometry(int block_size, KvType type) const override { return {1, 32, block_size, type}; }
    Status check_kv_type(KvType) const override { return Status::ok(); }

    Status forward(const Batch& batch, KvStorage&, std::span<float> logits) override {
        {
            std::unique_lock<std::mutex> lk(mu_);
            const int n = ++n_forward_;
            cv_.notify_all();
            if (!cv_.wait_for(lk, kTimeout, [&] { return hold_from_ < 0 || n < hold_from_; })) {
                return internal_error("gate: held too long");
            }
        }
        size_t row = 0;
        for (const BatchSeq& s : batch.seqs) {
            if (!s.want_logits) continue;
            float* l = logits.data() + row++ * kVocab;
            std::fill(l, l + kVocab, 0.0f);
            const int last = s.n_past + s.n_tokens - 1;
            l[follow(batch.tokens[static_cast<size_t>(s.i_begin + s.n_tokens - 1)], last)] = 1.0f;
        }
        return Status::ok();
    }

    // Test thread.
    void hold_from(int n) {
        std::lock_guard<std::mutex> lk(mu_);
        hold_from_ = n;
    }
    void release() {
        std::lock_guard<std::mutex> lk(mu_);
        hold_from_ = -1;
        cv_.notify_all();
    }
    // Waits until the n-th forward has started.
    bool wait_forwards(int n) {
        std::unique_lock<std::mutex> lk(mu_);
        return cv_.wait_for(lk, kTimeout, [&] { return n_forward_ >= n; });
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    int n_forward_ = 0;
    int hold_from_ = -1;  // forwards from this one on wait for release(); -1: none
};

std::string piece(int32_t t) { return bracket_piece(t); }  // support/bracket_vocab.h

std::shared_ptr<LoadedModel> make_model() {
    auto m = std::make_shared<LoadedModel>();
    m->name = "gate";
    m->tokenizer = bracket_tokenizer(kVocab);
    m->stand_in = std::make_unique<GateModel>();
    return m;
}

GateModel& gate_of(const std::shared_ptr<LoadedModel>& m) { return static_cast<GateModel&>(*m->stand_in); }

// The text of the n tokens the model gives `prompt`.
std::string answer(const std::vector<int32_t>& prompt, int n) {
    std::string text;
    int32_t last = prompt.back();
    for (int pos = static_cast<int>(prompt.size()) - 1; n > 0; --n, ++pos) {
        last = follow(last, pos);
        text += piece(last);
    }
    return text;
}

EngineOptions options(int n_parallel, int max_queue) {
    EngineOptions eo;
    eo.n_parallel = n_parallel;
    eo.n_ctx = 1024;
    eo.block_size = 8;
    eo.max_batch_tokens = 32;
    eo.max_queue = max_queue;
    return eo;
}

GenerationParams params(int max_tokens) {
    GenerationParams p;
    p.sampling.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

// Events of every request, from the engine thread.
struct Tracker {
    struct Req {
        std::string text;
        int n_done = 0, n_after_done = 0;
        EngineEvent done;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::unique_ptr<Req>> reqs;
    int n_done = 0;

    Req& add() {
        std::lock_guard<std::mutex> lk(mu);
        reqs.push_back(std::make_unique<Req>());
        return *reqs.back();
    }
    EventSink sink(Req& r) {
        return [this, &r](EngineEvent&& ev) {
            std::lock_guard<std::mutex> lk(mu);
            if (r.n_done > 0) ++r.n_after_done;
            if (ev.kind == EngineEvent::Kind::kText) {
                r.text += ev.text;
            } else if (ev.kind == EngineEvent::Kind::kDone) {
                ++r.n_done;
                ++n_done;
                r.done = std::move(ev);
                cv.notify_all();
            }
        };
    }
    bool wait_done(int n) {
        std::unique_lock<std::mutex> lk(mu);
        return cv.wait_for(lk, kTimeout, [&] { return n_done >= n; });
    }
};

// Requests submitted from several threads at once all end, each with its own answer, and their
// blocks are back by their kDone.
TEST(EngineThread, RequestsFromOtherThreadsAllEnd) {
    auto model = make_model();
    auto e = Engine::create(model, options(4, 64));
    ASSERT_TRUE(e.has_value()) << e.status().message();
    Engine& engine = **e;
    constexpr int kThreads = 3, kEach = 8;
    Tracker tr;
    std::vector<Tracker::Req*> rs;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < kThreads * kEach; ++i) {
        rs.push_back(&tr.add());
        prompts.push_back({1 + i % 7, 2 + i, 3 + i % 5, 1 + i});
    }
    std::vector<std::thread> clients;
    for (int t = 0; t < kThreads; ++t) {
        clients.emplace_back([&, t] {
            for (int i = t * kEach; i < (t + 1) * kEach; ++i) {
                auto h = engine.submit(prompts[i], params(10 + i), tr.sink(*rs[i]));
                EXPECT_TRUE(h.has_value()) << h.status().message();
            }
        });
    }
    for (auto& c : clients) c.join();
    ASSERT_TRUE(tr.wait_done(kThreads * kEach)) << tr.n_done << " done";
    std::lock_guard<std::mutex> lk(tr.mu);
    for (int i = 0; i < kThreads * kEach; ++i) {
        EXPECT_EQ(rs[i]->n_done, 1) << i;
        EXPECT_EQ(rs[i]->done.finish, FinishReason::kLength) << i;
        EXPECT_EQ(rs[i]->text, answer(prompts[i], 10 + i)) << i;
    }
    EXPECT_EQ(engine.stats().kv_blocks_used, 0);
    EXPECT_EQ(engine.stats().n_requests, static_cast<uint64_t>(kThreads * kEach));
}

// With the engine thread held inside a step, the queue fills to max_queue and the next request
// is refused (kResourceExhausted: HTTP 429); shutdown then ends every request, queued or
// running, with one kDone each (kCancelled), and refuses what comes after it.
TEST(EngineThread, QueueLimitAndShutdownEndEveryRequest) {
    auto model = make_model();
    GateModel& gate = gate_of(model);
    constexpr int kQueue = 5;
    auto e = Engine::create(model, options(2, kQueue));
    ASSERT_TRUE(e.has_value()) << e.status().message();
    std::unique_ptr<Engine> engine = std::move(*e);
    // A test that fails early lets the engine thread go before the engine joins it.
    struct Release {
        GateModel& gate;
        ~Release() { gate.release(); }
    } release_on_exit{gate};
    Tracker tr;
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    gate.hold_from(2);  // no request can finish its 50 tokens before shutdown
    ASSERT_TRUE(engine->submit(prompt, params(50), tr.sink(tr.add())).has_value());
    ASSERT_TRUE(gate.wait_forwards(2));  // held in the second step: the first request runs
    int n_accepted = 1;
    for (;; ++n_accepted) {
        auto h = engine->submit(prompt, params(50), tr.sink(tr.add()));
        if (!h.has_value()) {
            EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted) << h.status().message();
            EXPECT_NE(h.status().message().find(std::to_string(kQueue)), std::string::npos);
            break;
        }
        ASSERT_LE(n_accepted, kQueue + 2);
    }
    EXPECT_EQ(n_accepted, 1 + kQueue);  // one running, kQueue waiting
    EXPECT_EQ(engine->stats().n_waiting, kQueue);

    std::thread stopper([&] { engine->shutdown(); });
    // Once shutdown has begun, submit says so (kCancelled); only then does the held step go
    // on, so the engine thread sees the stop right after it.
    bool stopping = false;
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    while (!stopping && std::chrono::steady_clock::now() < deadline) {
        auto h = engine->submit(prompt, params(50), tr.sink(tr.add()));
        if (h.has_value()) {
            ADD_FAILURE() << "accepted beyond max_queue";
            ++n_accepted;
            continue;
        }
        stopping = h.status().code() == StatusCode::kCancelled;
        if (!stopping) std::this_thread::yield();
    }
    EXPECT_TRUE(stopping);
    gate.release();
    stopper.join();
    EXPECT_FALSE(engine->submit(prompt, params(50), tr.sink(tr.add())).has_value());
    std::lock_guard<std::mutex> lk(tr.mu);
    EXPECT_EQ(tr.n_done, n_accepted);
    for (int i = 0; i < static_cast<int>(tr.reqs.size()); ++i) {
        const Tracker::Req& r = *tr.reqs[i];
        if (i < n_accepted) {
            EXPECT_EQ(r.n_done, 1) << i;
            EXPECT_EQ(r.n_after_done, 0) << i;
            EXPECT_EQ(r.done.finish, FinishReason::kCancelled) << i;
        } else {
            EXPECT_EQ(r.n_done, 0) << i;  // refused: no events
        }
    }
    EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace ferrox
