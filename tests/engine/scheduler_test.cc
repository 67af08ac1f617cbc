// The scheduler's policy on a fake model, without a thread, a sleep or the wall clock: every test
// drives an EngineCore itself, submitting requests between the steps it calls, so where a
// request is (waiting, prefilling, decoding) when it arrives or is cancelled is chosen, not
// raced. Thousands of random request mixes (shared prefixes, multi-turn continuations,
// duplicates, stop strings, EOS, cancellations, arrivals between steps) run over small KV pools,
// so that the prefix cache and preemption run all the time. Every request that ends by stop or
// length gets exactly what the fake gives its prompt alone, every request gets one kDone, none
// starves (each round of requests ends within a bound of steps), and every KV block comes back
// (the block managers hold none, the gauges say 0, and at each kDone the gauge already counts
// the request's blocks as free).
//
// The fake makes wrong KV sharing visible: forward() writes each position's token, position
// and a hash of the whole history up to it into that position's K row, checks every earlier
// row of the sequence (read through its block table) against the same chain, and derives the
// next token from the history read back from the KV rows. A block of another history, a stale
// block or a row written twice changes the output or fails the forward; a block being written
// must be the writer's alone and unpublished (checked in the block manager of the pool it
// writes: the target's, or the draft model's).
//
// Time is a fake clock (EngineCore::set_clock) that each fake forward advances by its modeled
// cost (set_step_time), so the step costs that price draft tokens, and request time limits, are
// the same on every machine, idle or loaded.
//
// Engine, the core on its own thread, has its own tests (engine_thread_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/engine_core.h"
#include "support/bracket_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {
namespace {

constexpr int kVocab = 300;
constexpr int32_t kEos = 0;
constexpr uint64_t kSeed = 0x5eed5eed5eed5eedULL;

uint64_t mix(uint64_t h, int32_t token) {
    uint64_t x =
        h + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// The next token after a history whose hash is `h`: EOS about one time in twelve.
int32_t next_token(uint64_t h) {
    const uint64_t r = mix(h, -1);
    if (r % 12 == 0) return kEos;
    return 1 + static_cast<int32_t>((r >> 8) % (kVocab - 1));
}

// One position's K row, as the fake writes it (needs row_bytes >= 16).
struct Row {
    int32_t token;
    int32_t pos;
    uint64_t hash;  // of the history up to and including this position
};

// The time the engine reads (EngineCore::set_clock): it moves only when a fake computes.
struct FakeClock {
    std::chrono::steady_clock::time_point now{};
};

// The forwards of several fakes in the order they ran: (the fake's tag, its batch's tokens).
struct ForwardLog {
    std::vector<std::pair<char, int>> runs;
};

class FakeModel final : public ForwardModel {
  public:
    static constexpr int kKvDim = 32;  // F16 rows of 64 bytes, Q8_0 rows of 34
    // wrong_one_in > 0: a draft model's stand-in, whose next token is another one after about
    // one history in wrong_one_in (so some drafts are rejected). n_vocab < kVocab: a draft
    // model that lacks the last ids (it refuses them as input, as a model does).
    explicit FakeModel(int wrong_one_in = 0, int n_vocab = kVocab)
        : wrong_one_in_(wrong_one_in), n_vocab_(n_vocab) {}

    int n_vocab() const override { return n_vocab_; }
    int max_ctx() const override { return 8192; }
    int n_ctx_train() const override { return ctx_train_; }
    int max_batch_tokens() const override { return 1024; }
    KvGeometry kv_geometry(int block_size, KvType type) const override {
        return {1, kKvDim, block_size, type};
    }
    Status check_kv_type(KvType) const override { return Status::ok(); }

    Status forward(const Batch& batch, KvStorage& kv, std::span<float> logits) override {
        ++n_forward_;
        if (clock_) {
            clock_->now += std::chrono::microseconds(
                step_us_ + token_us_ * static_cast<int64_t>(batch.tokens.size()));
        }
        if (log_) log_->runs.emplace_back(log_tag_, static_cast<int>(batch.tokens.size()));
        Status st = run(batch, kv, logits);
        if (!st.is_ok() && error_.empty()) error_ = st.message();
        return st;
    }

    int n_forward() const { return n_forward_; }
    const std::string& error() const { return error_; }
    int max_seqs_per_batch() const { return max_seqs_; }
    // What a step costs on the fake clock, as a model's steps do: us plus per_token_us for
    // each batch token (by default 2 ms plus 50 us a token: a small model's shape, where a
    // draft token is nearly free while few sequences run).
    void set_step_time(int us, int per_token_us) {
        step_us_ = us;
        token_us_ = per_token_us;
    }
    void set_wrong_one_in(int n) { wrong_one_in_ = n; }
    void set_ctx_train(int n) { ctx_train_ = n; }  // before the engine is made
    void set_log(std::shared_ptr<ForwardLog> log, char tag) {
        log_ = std::move(log);
        log_tag_ = tag;
    }
    // The histories (hashes) this model produced logits after.
    const std::unordered_set<uint64_t>& histories() const { return histories_; }
    // The clock each forward advances (make_core), and the block manager of the pool this fake
    // writes (a block being written must be private to the writer and unpublished).
    void set_clock(FakeClock* c) { clock_ = c; }
    void set_blocks(const BlockManager* b) { blocks_ = b; }

  private:
    Status run(const Batch& batch, KvStorage& kv, std::span<float> logits) {
        const KvGeometry& geo = kv.geometry();
        const int bs = geo.block_size;
        const size_t row_bytes = geo.row_bytes();
        if (row_bytes < sizeof(Row)) return internal_error("fake: rows too small");
        int n_tok = 0, n_logits = 0;
        written_.clear();
        for (size_t i_seq = 0; i_seq < batch.seqs.size(); ++i_seq) {
            const BatchSeq& s = batch.seqs[i_seq];
            if (s.n_tokens < 1 || s.i_begin != n_tok) return internal_error("fake: batch layout");
            if (static_cast<int64_t>(s.n_blocks) * bs < s.n_past + s.n_tokens) {
                return internal_error("fake: block table too short");
            }
            n_tok += s.n_tokens;
            auto row_at = [&](int pos) {
                return kv.k_rows(s.block_table[pos / bs], 0) +
                       static_cast<size_t>(pos % bs) * row_bytes;
            };
            // Every earlier position holds this sequence's history, in order.
            uint64_t h = kSeed;
            for (int p = 0; p < s.n_past; ++p) {
                Row r;
                std::memcpy(&r, row_at(p), sizeof r);
                if (r.pos != p || r.token < 0 || r.token >= kVocab || r.hash != mix(h, r.token)) {
                    return internal_error("fake: position " + std::to_string(p) + " of " +
                                          std::to_string(s.n_past) + " (block " +
                                          std::to_string(s.block_table[p / bs]) +
                                          ") holds another history: pos " + std::to_string(r.pos) +
                                          ", token " + std::to_string(r.token));
                }
                h = r.hash;
            }
            for (int i = 0; i < s.n_tokens; ++i) {
                const int p = s.n_past + i;
                const int32_t b = s.block_table[p / bs];
                // A block being written belongs to this sequence alone and is not in the cache.
                if (blocks_ && (blocks_->ref_count(b) != 1 || blocks_->published(b))) {
                    return internal_error("fake: writes position " + std::to_string(p) +
                                          " into block " + std::to_string(b) + " (refs " +
                                          std::to_string(blocks_->ref_count(b)) +
                                          (blocks_->published(b) ? ", published)" : ")"));
                }
                // (A speculating sequence's draft entries write its own blocks: the owner is
                // the block table, which entries of one sequence share.)
                auto [it, fresh] = written_.emplace(b, s.block_table);
                if (!fresh && it->second != s.block_table) {
                    return internal_error("fake: two sequences write block " + std::to_string(b));
                }
                const int32_t t = batch.tokens[s.i_begin + i];
                if (p >= ctx_train_) {
                    return internal_error("fake: position " + std::to_string(p) +
                                          " past the trained context");
                }
                if (t < 0 || t >= n_vocab_) {
                    return internal_error("fake: token id " + std::to_string(t) + " out of range");
                }
                h = mix(h, t);
                const Row r{t, p, h};
                std::memcpy(row_at(p), &r, sizeof r);
            }
            if (s.want_logits) {
                if (static_cast<size_t>(n_logits + 1) * n_vocab_ > logits.size()) {
                    return internal_error("fake: logits too small");
                }
                float* row = logits.data() + static_cast<size_t>(n_logits++) * n_vocab_;
                std::fill(row, row + n_vocab_, 0.0f);
                histories_.insert(h);
                int32_t t = next_token(h);
                if (wrong_one_in_ > 0 && mix(h, -3) % wrong_one_in_ == 0) t = 1 + t % (kVocab - 1);
                row[t % n_vocab_] = 1.0f;
            }
        }
        if (n_tok != static_cast<int>(batch.tokens.size()))
            return internal_error("fake: token count");
        max_seqs_ = std::max(max_seqs_, static_cast<int>(batch.seqs.size()));
        return Status::ok();
    }

    int wrong_one_in_;
    const int n_vocab_;
    int ctx_train_ = 8192;
    int step_us_ = 2000, token_us_ = 50;
    FakeClock* clock_ = nullptr;
    const BlockManager* blocks_ = nullptr;
    int n_forward_ = 0;
    std::string error_;
    std::unordered_set<uint64_t> histories_;
    int max_seqs_ = 0;
    std::shared_ptr<ForwardLog> log_;
    char log_tag_ = 0;
    std::unordered_map<int32_t, const int32_t*> written_;  // block -> the block table writing it
};

std::string piece(int32_t t) { return bracket_piece(t); }  // support/bracket_vocab.h

std::shared_ptr<LoadedModel> make_fake_model(int wrong_one_in = 0, int n_vocab = kVocab) {
    auto m = std::make_shared<LoadedModel>();
    m->name = "fake";
    m->tokenizer = bracket_tokenizer(kVocab);
    m->stand_in = std::make_unique<FakeModel>(wrong_one_in, n_vocab);
    return m;
}

FakeModel& fake_of(const std::shared_ptr<LoadedModel>& m) {
    return static_cast<FakeModel&>(*m->stand_in);
}

// A core over the fakes, on the fake clock their forwards advance, each fake checking its writes
// against its pool's block manager. `clock` must outlive the core.
std::unique_ptr<EngineCore> make_core(std::shared_ptr<LoadedModel> m, const EngineOptions& eo,
                                      std::shared_ptr<LoadedModel> draft, FakeClock& clock) {
    FakeModel& target = fake_of(m);
    FakeModel* d = draft ? &fake_of(draft) : nullptr;
    auto e = EngineCore::create(std::move(m), eo, std::move(draft));
    EXPECT_TRUE(e.has_value()) << e.status().message();
    if (!e) return nullptr;
    std::unique_ptr<EngineCore> core = std::move(*e);
    core->set_clock([&clock] { return clock.now; });
    target.set_clock(&clock);
    target.set_blocks(&core->blocks());
    if (d) {
        d->set_clock(&clock);
        d->set_blocks(core->draft_blocks());
    }
    return core;
}

// What greedy decoding of the fake gives `prompt` alone.
struct Expect {
    std::vector<int32_t> tokens;  // generated, the last one included (EOS, stop, or length)
    std::string text;
    FinishReason finish = FinishReason::kLength;
};

Expect expect_alone(const std::vector<int32_t>& prompt, int max_total,
                    const std::set<int32_t>& stops, bool ignore_eos) {
    Expect e;
    uint64_t h = kSeed;
    for (int32_t t : prompt) h = mix(h, t);
    int n = static_cast<int>(prompt.size());
    for (;;) {
        const int32_t t = next_token(h);
        e.tokens.push_back(t);
        ++n;
        if (t == kEos && !ignore_eos) {
            e.finish = FinishReason::kStop;
            return e;
        }
        if (stops.count(t)) {
            e.finish = FinishReason::kStop;
            return e;
        }
        e.text += piece(t);
        if (n >= max_total) {
            e.finish = FinishReason::kLength;
            return e;
        }
        h = mix(h, t);
    }
}

GenerationParams greedy(int max_tokens) {
    GenerationParams p;
    p.sampling.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
}

// Every request's events (the sinks run inside step(), on the test's thread).
struct Tracker {
    struct Req {
        std::vector<int32_t> prompt;
        GenerationParams params;
        Expect want;
        int cancel_after = -1;  // the sink cancels after this many text events
        bool cancel_asked = false;
        std::shared_ptr<RequestHandle> handle;
        std::string text;
        std::vector<int32_t> lp_tokens;
        int n_text = 0, n_progress = 0, n_done = 0, n_after_done = 0;
        uint64_t i_done = 0,
                 i_first_text = 0;  // order of the kDone and first kText among all events
        int gauge_at_done = -1, used_at_done = -1;  // kv_used gauge and blocks in use at kDone
        EngineEvent done;

        bool waiting() const { return n_progress == 0 && n_text == 0 && n_done == 0; }
        bool prefilling() const { return n_progress > 0 && n_text == 0 && n_done == 0; }
        bool decoding() const { return n_text > 0 && n_done == 0; }
    };
    std::vector<std::unique_ptr<Req>> reqs;
    int n_done = 0;
    uint64_t n_events = 0;
    const EngineCore* core = nullptr;  // when set: the kv gauge is read at each kDone

    Req& add() {
        reqs.push_back(std::make_unique<Req>());
        return *reqs.back();
    }
    EventSink sink(Req& r) {
        return [this, &r](EngineEvent&& ev) {
            ++n_events;
            if (r.n_done > 0) ++r.n_after_done;
            if (ev.kind == EngineEvent::Kind::kText) {
                if (r.n_text++ == 0) r.i_first_text = n_events;
                r.text += ev.text;
                for (const auto& lp : ev.logprobs) r.lp_tokens.push_back(lp.token);
                if (r.cancel_after >= 0 && r.n_text >= r.cancel_after && r.handle) {
                    r.cancel_asked = true;
                    r.handle->cancel();
                }
            } else if (ev.kind == EngineEvent::Kind::kProgress) {
                ++r.n_progress;
            } else {
                ++r.n_done;
                ++n_done;
                r.i_done = n_events;
                r.done = std::move(ev);
                if (core) {
                    r.gauge_at_done = core->metrics().kv_used.load();
                    r.used_at_done = core->blocks().n_used();
                }
            }
        };
    }
};

// Adds a request to tr and submits it; its handle is null when the core refused it.
Tracker::Req& submit(Tracker& tr, EngineCore& core, const std::vector<int32_t>& prompt,
                     const GenerationParams& p) {
    Tracker::Req& r = tr.add();
    r.prompt = prompt;
    r.params = p;
    auto h = core.submit(prompt, p, tr.sink(r));
    EXPECT_TRUE(h.has_value()) << h.status().message();
    if (h) r.handle = *h;
    return r;
}

// Steps until no request is left, at most max_steps; false if some are still there (starved).
bool run_idle(EngineCore& core, int max_steps = 100000) {
    for (int i = 0; i < max_steps && core.has_work(); ++i) core.step();
    return !core.has_work();
}

// An idle core: no request, no block in use in either pool, and gauges that say so.
void expect_idle(const EngineCore& core, const std::string& what = "") {
    EXPECT_FALSE(core.has_work()) << what;
    EXPECT_EQ(core.blocks().n_used(), 0) << what;
    if (const BlockManager* d = core.draft_blocks()) {
        EXPECT_EQ(d->n_used(), 0) << what << " (draft)";
    }
    const EngineMetrics& m = core.metrics();
    EXPECT_EQ(m.n_running.load(), 0) << what;
    EXPECT_EQ(m.n_waiting.load(), 0) << what;
    EXPECT_EQ(m.kv_used.load(), 0) << what;
}

// ---- Random request mixes ----

struct MixConfig {
    const char* name;
    EngineOptions eo;
    int n_requests;
    int max_prompt;
    int max_new;
    int alphabet;         // prompt tokens are drawn from 1..alphabet
    bool want_hits;       // the mix must reuse cached prefixes
    int want_preemption;  // 1: must preempt, 0: must not, -1: either
    uint32_t seed;
    // > 0: a draft model (a fake whose next token is wrong after one history in `draft`, with
    // its own KV pool, as full of other histories as the target's) drafts every step.
    int draft = 0;
};

EngineOptions options(int n_parallel, int n_ctx, int block_size, int max_batch, bool cache = true,
                      KvType type = KvType::kF16, bool unpriced = false) {
    EngineOptions eo;
    eo.n_parallel = n_parallel;
    eo.n_ctx = n_ctx;
    eo.block_size = block_size;
    eo.max_batch_tokens = max_batch;
    eo.prefix_cache = cache;
    eo.kv_type = type;
    eo.max_queue = 1 << 20;
    eo.spec_unpriced = unpriced;
    return eo;
}

void PrintTo(const MixConfig& c, std::ostream* os) { *os << c.name; }

class SchedulerMix : public ::testing::TestWithParam<MixConfig> {};

TEST_P(SchedulerMix, EveryRequestGetsItsSoloGreedyOutputAndEveryBlockComesBack) {
    const MixConfig& cfg = GetParam();
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    auto draft = cfg.draft > 0 ? make_fake_model(cfg.draft) : nullptr;
    Tracker tr;
    auto core = make_core(model, cfg.eo, draft, clock);
    ASSERT_TRUE(core);
    tr.core = core.get();
    const int bs = cfg.eo.block_size;
    const int ceiling = core->context_ceiling();
    ASSERT_GT(ceiling, cfg.max_new + 2);

    // FERROX_SCHEDULER_STRESS=k runs k times as many requests, from another seed (a soak run;
    // CI runs k = 1).
    const char* stress = std::getenv("FERROX_SCHEDULER_STRESS");
    const int scale = stress ? std::max(1, std::atoi(stress)) : 1;
    const int n_requests = cfg.n_requests * scale;
    std::mt19937 rng(cfg.seed + 1000u * (scale - 1));
    auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    auto chance = [&](int percent) { return rnd(0, 99) < percent; };
    std::vector<std::vector<int32_t>> bases(4);
    for (auto& b : bases) {
        for (int i = 0; i < cfg.max_prompt; ++i) b.push_back(rnd(1, cfg.alphabet));
    }

    std::vector<Tracker::Req*> history;  // earlier accepted requests, for continuations
    int n_submitted = 0, n_accepted = 0, n_rejected = 0, n_steps = 0, n_round_tokens = 0;
    int n_eos = 0, n_stop_string = 0, n_length = 0, n_cancelled = 0, n_hit_requests = 0;
    while (n_submitted < n_requests) {
        const int round = rnd(1, 3 * cfg.eo.n_parallel + 4);
        std::vector<Tracker::Req*> in_round;
        // Half the rounds arrive at once: full batches, duplicates computed side by side, the
        // pool overcommitted. In the others a few steps run between arrivals, so requests join
        // a running batch or a queue.
        const bool burst = chance(50);
        int round_tokens = 0;  // what the round's requests may compute
        for (int k = 0; k < round && n_submitted < n_requests; ++k, ++n_submitted) {
            // The prompt.
            const int cap = std::min(cfg.max_prompt, ceiling - 1);
            std::vector<int32_t> prompt;
            const int kind = rnd(0, 99);
            if (kind < 15 && !in_round.empty()) {
                prompt =
                    in_round[rnd(0, static_cast<int>(in_round.size()) - 1)]->prompt;  // a duplicate
            } else if (kind < 35 && !history.empty()) {
                // The next turn of an earlier conversation: its prompt, its answer, more.
                const Tracker::Req& r = *history[rnd(0, static_cast<int>(history.size()) - 1)];
                prompt = r.prompt;
                prompt.insert(prompt.end(), r.want.tokens.begin(), r.want.tokens.end());
                for (int n = rnd(1, 8); n > 0; --n) prompt.push_back(rnd(1, cfg.alphabet));
            } else if (kind < 85) {
                const auto& b = bases[rnd(0, 3)];
                prompt.assign(b.begin(), b.begin() + rnd(1, cap));
                for (int n = rnd(0, 6); n > 0; --n) prompt.push_back(rnd(1, cfg.alphabet));
            } else {
                for (int n = rnd(1, cap); n > 0; --n) prompt.push_back(rnd(1, cfg.alphabet));
            }
            if (static_cast<int>(prompt.size()) > cap) prompt.resize(cap);

            Tracker::Req& r = tr.add();
            r.prompt = prompt;
            r.params = greedy(rnd(1, cfg.max_new));
            r.params.cache_prompt = !chance(15);
            r.params.ignore_eos = chance(10);
            r.params.top_logprobs = chance(50) ? 0 : -1;
            const int n_prompt = static_cast<int>(prompt.size());
            const bool over = chance(3);
            if (over) {
                r.params.max_tokens = ceiling - n_prompt + rnd(1, 5);
            } else if (!r.params.ignore_eos && chance(5)) {
                r.params.max_tokens = -1;  // until EOS or the ceiling
            } else if (n_prompt + r.params.max_tokens > ceiling) {
                r.params.max_tokens = ceiling - n_prompt;
            }
            const int max_total = r.params.max_tokens > 0
                                      ? std::min(n_prompt + r.params.max_tokens, ceiling)
                                      : ceiling;
            std::set<int32_t> stops;
            r.want = expect_alone(prompt, max_total, stops, r.params.ignore_eos);
            if (chance(25)) {
                // A stop string that the answer reaches (or not: a token it never produces).
                const int32_t t =
                    chance(80) ? r.want.tokens[rnd(0, static_cast<int>(r.want.tokens.size()) - 1)]
                               : static_cast<int32_t>(rnd(1, kVocab - 1));
                if (t != kEos) {
                    stops.insert(t);
                    r.params.stop.push_back(piece(t));
                }
                r.want = expect_alone(prompt, max_total, stops, r.params.ignore_eos);
            }
            if (chance(6)) r.cancel_after = rnd(0, 6);

            auto h = core->submit(prompt, r.params, tr.sink(r));
            if (over) {
                ASSERT_FALSE(h.has_value());
                EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
                EXPECT_NE(h.status().message().find(std::to_string(ceiling)), std::string::npos)
                    << h.status().message();
                ++n_rejected;
                continue;
            }
            ASSERT_TRUE(h.has_value()) << h.status().message();
            ++n_accepted;
            in_round.push_back(&r);
            round_tokens += max_total;
            r.handle = *h;
            if (r.cancel_after == 0) {
                r.cancel_asked = true;
                r.handle->cancel();
            }
            if (!burst) {
                for (int n = rnd(0, 2); n > 0; --n, ++n_steps) core->step();
            }
            if (chance(5)) {
                // Cancel an earlier request of this round, wherever it is by now.
                Tracker::Req& c = *in_round[rnd(0, static_cast<int>(in_round.size()) - 1)];
                c.cancel_asked = true;
                c.handle->cancel();
            }
        }
        // Nobody starves: every step computes a token of some request (a preempted one
        // computes its tokens again), so the round ends within a few steps per token.
        const int bound = 4 * round_tokens + 100;
        int steps = 0;
        for (; steps < bound && core->has_work(); ++steps) core->step();
        n_steps += steps;
        n_round_tokens += round_tokens;
        ASSERT_FALSE(core->has_work())
            << cfg.name << ": " << n_accepted - tr.n_done << " requests unfinished after " << bound
            << " steps; waiting " << core->metrics().n_waiting.load() << ", running "
            << core->metrics().n_running.load() << "; fake: " << fake.error();
        ASSERT_EQ(tr.n_done, n_accepted) << cfg.name;
        expect_idle(*core, cfg.name);

        for (Tracker::Req* rp : in_round) {
            const Tracker::Req& r = *rp;
            const EngineEvent& d = r.done;
            SCOPED_TRACE(std::string(cfg.name) + " request with " +
                         std::to_string(r.prompt.size()) + "-token prompt, max_tokens " +
                         std::to_string(r.params.max_tokens));
            ASSERT_EQ(r.n_done, 1);
            EXPECT_EQ(r.n_after_done, 0);
            // Blocks go back before kDone: the gauge a client reads then counts them free.
            EXPECT_EQ(r.gauge_at_done, r.used_at_done);
            ASSERT_NE(d.finish, FinishReason::kError) << d.error.message();
            EXPECT_EQ(d.n_prompt, static_cast<int>(r.prompt.size()));
            EXPECT_EQ(d.n_cached % bs, 0);
            EXPECT_LT(d.n_cached, d.n_prompt);
            if (!r.params.cache_prompt || !cfg.eo.prefix_cache) {
                EXPECT_EQ(d.n_cached, 0);
            }
            n_hit_requests += d.n_cached > 0;
            if (d.finish == FinishReason::kCancelled) {
                EXPECT_TRUE(r.cancel_asked) << "cancelled without being asked";
                // What came before the cancellation is still the solo answer's beginning.
                EXPECT_EQ(r.want.text.compare(0, r.text.size(), r.text), 0)
                    << r.text << " vs " << r.want.text;
                EXPECT_LE(d.n_completion, static_cast<int>(r.want.tokens.size()));
                if (r.params.top_logprobs >= 0) {
                    EXPECT_EQ(static_cast<int>(r.lp_tokens.size()), d.n_completion);
                    EXPECT_TRUE(
                        std::equal(r.lp_tokens.begin(), r.lp_tokens.end(), r.want.tokens.begin()));
                }
                ++n_cancelled;
                continue;
            }
            EXPECT_EQ(d.finish, r.want.finish);
            EXPECT_EQ(r.text, r.want.text);
            EXPECT_EQ(d.n_completion, static_cast<int>(r.want.tokens.size()));
            if (r.params.top_logprobs >= 0) {
                EXPECT_EQ(r.lp_tokens, r.want.tokens);
            }
            if (d.finish == FinishReason::kLength) {
                ++n_length;
            } else if (r.want.tokens.back() == kEos && !r.params.ignore_eos) {
                ++n_eos;
            } else {
                ++n_stop_string;
                EXPECT_EQ(d.stop_matched.empty() ? piece(r.want.tokens.back()) : d.stop_matched,
                          piece(r.want.tokens.back()));
            }
        }
        if (::testing::Test::HasFailure()) break;
        history.insert(history.end(), in_round.begin(), in_round.end());
    }
    EXPECT_EQ(fake.error(), "");
    const EngineStats st = core->metrics().snapshot();
    if (draft) {
        // Every draft step read back its sequences' own histories from the draft pool.
        EXPECT_EQ(fake_of(draft).error(), "") << cfg.name;
        EXPECT_GT(st.spec_accepted, 100u) << cfg.name;
        EXPECT_LT(st.spec_accepted, st.spec_drafted) << cfg.name;
        // The draft model drafted from histories the target then verified (a draft model that
        // read a stale row continues a history the target never sees). Only drafts a
        // preemption discards before their verification go unseen.
        const auto& target_seen = fake.histories();
        const auto& draft_seen = fake_of(draft).histories();
        size_t unseen = 0;
        for (uint64_t h : draft_seen) unseen += target_seen.count(h) == 0;
        if (cfg.want_preemption == 0) {
            EXPECT_EQ(unseen, 0u) << cfg.name;
        } else {
            EXPECT_LT(unseen * 10, draft_seen.size()) << cfg.name;
        }
    }
    if (cfg.want_hits) {
        EXPECT_GT(st.prefix_hit_tokens, 0u) << cfg.name;
        EXPECT_GT(n_hit_requests, 0) << cfg.name;
    } else {
        EXPECT_EQ(st.prefix_hit_tokens, 0u) << cfg.name;
    }
    if (cfg.want_preemption == 1) {
        EXPECT_GT(st.n_preemptions, 0u) << cfg.name;
    }
    if (cfg.want_preemption == 0) {
        EXPECT_EQ(st.n_preemptions, 0u) << cfg.name;
    }
    if (cfg.eo.n_parallel > 1) {
        EXPECT_GT(fake.max_seqs_per_batch(), 1) << cfg.name;
    }
    // The mix reached every way a request ends, and verified drafts (the draft model's, or
    // prompt lookup's, which the fake's hashed answers all but always reject).
    EXPECT_GT(n_eos, 0);
    EXPECT_GT(n_length, 0);
    EXPECT_GT(n_stop_string, 0);
    EXPECT_GT(n_cancelled, 0);
    EXPECT_GT(st.spec_drafted, 0u);
    std::printf(
        "[ %s ] %d requests (%d rejected): %d eos, %d stop string, %d length, %d cancelled; "
        "%d cache hits (%llu tokens), %llu preemptions, %llu of %llu drafts accepted, %d steps "
        "for up to %d tokens, %d forwards, up to %d sequences a batch\n",
        cfg.name, n_submitted, n_rejected, n_eos, n_stop_string, n_length, n_cancelled,
        n_hit_requests, static_cast<unsigned long long>(st.prefix_hit_tokens),
        static_cast<unsigned long long>(st.n_preemptions),
        static_cast<unsigned long long>(st.spec_accepted),
        static_cast<unsigned long long>(st.spec_drafted), n_steps, n_round_tokens,
        fake.n_forward(), fake.max_seqs_per_batch());
}

INSTANTIATE_TEST_SUITE_P(
    Configs, SchedulerMix,
    ::testing::Values(
        // 64 blocks of 4 for 8 sequences of up to 240 tokens: preemption all the time.
        MixConfig{"bs4_pool256_np8", options(8, 256, 4, 32), 500, 200, 40, kVocab - 1, true, 1, 1},
        // Large blocks, chunked prefill with a small budget.
        MixConfig{"bs16_pool256_np4", options(4, 256, 16, 24), 400, 200, 48, kVocab - 1, true, 1,
                  2},
        MixConfig{"q8_0_bs8_pool128_np3", options(3, 128, 8, 10, true, KvType::kQ8_0), 300, 100, 24,
                  kVocab - 1, true, 1, 3},
        // One sequence at a time: no preemption, FCFS, the cache still hits.
        MixConfig{"serial_bs4", options(1, 320, 4, 64), 200, 200, 40, kVocab - 1, true, 0, 4},
        // Blocks of one token over a three-letter alphabet: prefixes collide everywhere.
        MixConfig{"bs1_alphabet3", options(6, 96, 1, 8), 500, 60, 24, 3, true, 1, 5},
        MixConfig{"bs2_alphabet2", options(8, 64, 2, 12), 500, 40, 20, 2, true, 1, 6},
        MixConfig{"no_prefix_cache", options(5, 160, 8, 12, false), 300, 120, 30, kVocab - 1, false,
                  1, 7},
        // A pool that never runs out: no preemption.
        MixConfig{"big_pool_bs16_np8", options(8, 4096, 16, 128), 400, 200, 40, kVocab - 1, true, 0,
                  8},
        // A draft model, every draft verified: with preemption, chunked catch-up and a draft
        // pool that runs out (the target's shares prefixes, the draft's does not); and with room.
        MixConfig{"draft_bs4_pool256_np8", options(8, 256, 4, 32, true, KvType::kF16, true), 400,
                  200, 40, kVocab - 1, true, 1, 9, 10},
        MixConfig{"draft_big_pool_bs16_np8", options(8, 4096, 16, 128, true, KvType::kF16, true),
                  300, 200, 40, kVocab - 1, true, 0, 10, 10}),
    [](const ::testing::TestParamInfo<MixConfig>& info) { return std::string(info.param.name); });

// ---- Directed cases ----

// Issue #4 item 5: a request that can never fit is refused with the numbers; one that does not
// fit now waits for room and then runs.
TEST(Scheduler, CeilingRefusesWhatCanNeverFitAndQueuesWhatFitsLater) {
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    Tracker tr;
    auto core = make_core(model, options(2, 64, 8, 64), nullptr, clock);  // 8 blocks of 8
    ASSERT_TRUE(core);
    EXPECT_EQ(core->context_ceiling(), 64);
    EXPECT_EQ(core->kv_blocks(), 8);

    auto over = core->submit(std::vector<int32_t>(60, 5), greedy(10), tr.sink(tr.add()));
    ASSERT_FALSE(over.has_value());
    EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
    const std::string msg = over.status().message();
    for (const char* n : {"60", "10", "64"}) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    // max_tokens unset counts one token: a prompt of the whole context cannot get an answer.
    auto full = core->submit(std::vector<int32_t>(64, 5), greedy(-1), tr.sink(tr.add()));
    ASSERT_FALSE(full.has_value());
    EXPECT_NE(full.status().message().find("64"), std::string::npos) << full.status().message();
    EXPECT_FALSE(core->submit({}, greedy(1), tr.sink(tr.add())).has_value());
    EXPECT_FALSE(core->submit({kVocab}, greedy(1), tr.sink(tr.add())).has_value());
    EXPECT_EQ(core->metrics().n_waiting.load(), 0);

    // A takes 6 blocks at admission and grows to all 8; B (6 more) cannot join until A is done.
    std::vector<int32_t> pa, pb;
    for (int i = 0; i < 40; ++i) {
        pa.push_back(1 + i);
        pb.push_back(100 + i);
    }
    GenerationParams p = greedy(20);
    p.ignore_eos = true;
    Tracker::Req& a = submit(tr, *core, pa, p);
    ASSERT_TRUE(core->step());  // A is admitted and computes its prompt
    Tracker::Req& b = submit(tr, *core, pb, p);
    ASSERT_TRUE(core->step());
    EXPECT_EQ(core->metrics().n_running.load(), 1);
    EXPECT_EQ(core->metrics().n_waiting.load(), 1);
    EXPECT_TRUE(b.waiting());
    ASSERT_TRUE(run_idle(*core));
    for (auto* r : {&a, &b}) {
        const Expect want = expect_alone(r->prompt, 60, {}, true);
        EXPECT_EQ(r->done.finish, FinishReason::kLength);
        EXPECT_EQ(r->text, want.text);
        EXPECT_EQ(r->done.n_completion, 20);
    }
    EXPECT_GT(b.i_first_text, a.i_done) << "B ran before A was done";
    EXPECT_EQ(core->metrics().n_preemptions.load(), 0u);
    expect_idle(*core);
    EXPECT_EQ(fake.error(), "");
}

// A server default max_tokens (max_tokens_soft, llama-server's -n) that with the prompt exceeds
// the context is capped to what fits; the request's own stays a refusal.
TEST(Scheduler, SoftMaxTokensIsCappedToTheContext) {
    FakeClock clock;
    auto model = make_fake_model();
    Tracker tr;
    auto core = make_core(model, options(2, 64, 8, 64), nullptr, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(1000);
    p.ignore_eos = true;
    EXPECT_FALSE(core->submit(std::vector<int32_t>(40, 5), p, tr.sink(tr.add())).has_value());
    p.max_tokens_soft = true;
    Tracker::Req& r = submit(tr, *core, std::vector<int32_t>(40, 5), p);
    ASSERT_TRUE(run_idle(*core));
    EXPECT_EQ(r.done.finish, FinishReason::kLength);
    EXPECT_EQ(r.done.n_completion, 24);
    // A prompt of the whole context still has no room for an answer.
    EXPECT_FALSE(core->submit(std::vector<int32_t>(64, 5), p, tr.sink(tr.add())).has_value());
    expect_idle(*core);
}

// Two sequences that fit at admission but not once grown: the newer one is preempted, waits,
// recomputes (its full blocks from the cache) and still gives its solo answer.
TEST(Scheduler, PreemptedSequenceContinuesExactly) {
    for (bool cache : {true, false}) {
        SCOPED_TRACE(cache ? "prefix cache" : "no prefix cache");
        FakeClock clock;
        auto model = make_fake_model();
        FakeModel& fake = fake_of(model);
        Tracker tr;
        auto core = make_core(model, options(2, 64, 8, 64, cache), nullptr, clock);  // 8 of 8
        ASSERT_TRUE(core);
        GenerationParams p = greedy(40);
        p.ignore_eos = true;
        std::vector<std::vector<int32_t>> prompts(2);
        for (int i = 0; i < 20; ++i) {
            prompts[0].push_back(1 + i);
            prompts[1].push_back(50 + i);
        }
        std::vector<Tracker::Req*> rs;  // both are admitted in the same step
        for (const auto& pr : prompts) rs.push_back(&submit(tr, *core, pr, p));
        ASSERT_TRUE(core->step());
        EXPECT_EQ(core->metrics().n_running.load(), 2);
        ASSERT_TRUE(run_idle(*core));
        for (size_t i = 0; i < prompts.size(); ++i) {
            const Expect want = expect_alone(prompts[i], 60, {}, true);
            EXPECT_EQ(rs[i]->done.finish, FinishReason::kLength);
            EXPECT_EQ(rs[i]->text, want.text) << "request " << i;
            EXPECT_EQ(rs[i]->done.n_completion, 40);
        }
        // The newer one was preempted: the older ran straight through and ended first.
        EXPECT_LT(rs[0]->i_done, rs[1]->i_done);
        EXPECT_GT(core->metrics().n_preemptions.load(), 0u);
        expect_idle(*core);
        EXPECT_EQ(fake.error(), "");
    }
}

// Issue #18, draft models: a draft model that lacks an id of the target's vocabulary (the
// target's may be up to 128 longer) drafts nothing for a sequence holding it, and goes on
// drafting for the others in its batch (its failed steps once stopped every sequence's drafts).
TEST(Scheduler, DraftModelSkipsOnlyTheSequenceWithAnIdItLacks) {
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    auto draft = make_fake_model(0, kVocab - 1);  // the target's answers, without id kVocab - 1
    Tracker tr;
    auto core = make_core(model, options(2, 1024, 16, 64, true, KvType::kF16, true), draft, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(60);
    p.ignore_eos = true;
    const std::vector<int32_t> pa = {5, 6, kVocab - 1, 7};
    std::vector<int32_t> pb;
    for (int i = 0; i < 12; ++i) pb.push_back(20 + i);
    const Expect wa = expect_alone(pa, 64, {}, true), wb = expect_alone(pb, 72, {}, true);
    // B holds no such id: it drafts.
    ASSERT_EQ(std::count(wb.tokens.begin(), wb.tokens.end(), kVocab - 1), 0);
    // Both are admitted in the same step, and decode together.
    Tracker::Req& a = submit(tr, *core, pa, p);
    Tracker::Req& b = submit(tr, *core, pb, p);
    ASSERT_TRUE(run_idle(*core));
    EXPECT_EQ(a.text, wa.text);
    EXPECT_EQ(b.text, wb.text);
    EXPECT_EQ(fake.error(), "");
    EXPECT_EQ(fake_of(draft).error(), "");  // no step fed the draft model the id it lacks
    const EngineStats st = core->metrics().snapshot();
    // B drafted (the draft model answers as the target: every draft accepted), A did not.
    EXPECT_GE(st.spec_accepted, 40u);
    EXPECT_LE(st.spec_accepted, 60u);
    EXPECT_EQ(st.spec_accepted, st.spec_drafted);
    // kDone counts each request's own drafts (llama-server's timings draft_n, draft_n_accepted).
    EXPECT_EQ(a.done.n_draft, 0);
    EXPECT_EQ(static_cast<uint64_t>(b.done.n_draft), st.spec_drafted);
    EXPECT_EQ(static_cast<uint64_t>(b.done.n_draft_accepted), st.spec_accepted);
    expect_idle(*core);
}

// A draft pool that runs out (the target's sequences share a cached prompt, the draft model's
// do not): sequences draft what the blocks they hold allow, and one that cannot take its next
// tokens gives its blocks back, so drafting goes on (sequences stalled at a block boundary
// until another finished).
TEST(Scheduler, FullDraftPoolKeepsDrafting) {
    constexpr int kReply = 128;
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    auto draft = make_fake_model();
    Tracker tr;
    EngineOptions eo = options(4, 1024, 16, 64, true, KvType::kF16, true);
    eo.draft_max = 2;  // long replies: sequences grow past the pool's room while they draft
    auto core = make_core(model, eo, draft, clock);
    ASSERT_TRUE(core);  // 64 blocks of 16 in each pool
    GenerationParams p = greedy(kReply);
    p.ignore_eos = true;
    std::vector<int32_t> shared;
    for (int i = 0; i < 384; ++i) shared.push_back(1 + (i * 7) % (kVocab - 1));
    submit(tr, *core, shared, p);  // puts the 24 blocks of the shared prompt in the cache
    ASSERT_TRUE(run_idle(*core));
    const EngineStats before = core->metrics().snapshot();
    std::vector<Tracker::Req*> rs;
    for (int i = 0; i < 4; ++i) {
        std::vector<int32_t> prompt = shared;
        prompt.push_back(100 + i);
        rs.push_back(&submit(tr, *core, prompt, p));
        if (i == 0) core->step();  // the first starts alone, the others together
    }
    ASSERT_TRUE(run_idle(*core));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(rs[i]->text, expect_alone(rs[i]->prompt, 385 + kReply, {}, true).text) << i;
    }
    EXPECT_EQ(fake.error(), "");
    EXPECT_EQ(fake_of(draft).error(), "");
    const EngineStats st = core->metrics().snapshot();
    EXPECT_EQ(st.n_preemptions, 0u);  // the target's pool had room: only the draft pool ran out
    EXPECT_GT(st.prefix_hit_tokens, before.prefix_hit_tokens);
    // Of 4 x 128 tokens (at most 2 of each 3 from drafts), drafts gave ~200 (4 x 33 blocks do
    // not fit in 64; with the blocks kept by stalled sequences, 78).
    EXPECT_GT(st.spec_accepted - before.spec_accepted, 150u);
    expect_idle(*core);
}

// One request alone, run to its end, checked against its solo greedy answer.
void run_alone(EngineCore& core, Tracker& tr, const std::vector<int32_t>& prompt,
               const GenerationParams& p) {
    Tracker::Req& r = submit(tr, core, prompt, p);
    ASSERT_TRUE(run_idle(core));
    ASSERT_EQ(r.n_done, 1);
    const int total = static_cast<int>(prompt.size()) + p.max_tokens;
    EXPECT_EQ(r.text, expect_alone(prompt, total, {}, true).text);
}

// The n_req-th request alone, its own 8-token prompt; speculative = false opts out of drafting.
void answer_alone(EngineCore& core, Tracker& tr, int& n_req, int max_tokens, bool speculative) {
    GenerationParams p = greedy(max_tokens);
    p.ignore_eos = true;
    if (!speculative) p.draft_max = 0;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 8; ++i) prompt.push_back(1 + (n_req * 31 + i * 7) % (kVocab - 1));
    ++n_req;
    run_alone(core, tr, prompt, p);
}

// A prompt is fed to the draft model chunk for chunk as the target computes it, so the sequence
// drafts from its first decoding step (a draft KV that caught up only then took a step budget
// of draft forward per decoding step, drafting nothing, for as many steps as the prompt took).
TEST(Scheduler, DraftModelKeepsLevelThroughThePrompt) {
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    auto draft = make_fake_model();  // the target's answers: every draft accepted
    Tracker tr;
    auto core = make_core(model, options(1, 2048, 16, 64, true, KvType::kF16, true), draft, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(37);
    p.ignore_eos = true;
    p.draft_max = 8;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(1 + (i * 13) % (kVocab - 1));
    run_alone(*core, tr, prompt, p);
    EXPECT_EQ(fake_of(draft).error(), "");
    // 5 prompt steps of 64, 64, 64, 64, 44 tokens (the last one gives the first token), then
    // 36 tokens at 1 + 8 a step: 4 steps. Catching up after the prompt took 4 more (and 8
    // fewer drafts were accepted).
    EXPECT_EQ(fake.n_forward(), 5 + 4);
    EXPECT_EQ(core->metrics().spec_accepted.load(), 32u);
}

// The draft model computes no more of a prompt in a step than the target does: a prompt found
// in the prefix cache (the target computes its last tokens, the draft model has none of it: the
// first request opted out of drafting) gets its first token without waiting for the draft
// model to catch up on the whole prompt.
TEST(Scheduler, DraftModelCatchUpDoesNotDelayACachedPromptsFirstToken) {
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    auto draft = make_fake_model();
    auto log = std::make_shared<ForwardLog>();
    fake.set_log(log, 't');
    fake_of(draft).set_log(log, 'd');
    Tracker tr;
    auto core = make_core(model, options(1, 2048, 16, 64, true, KvType::kF16, true), draft, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(8);
    p.ignore_eos = true;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(1 + (i * 13) % (kVocab - 1));
    GenerationParams no_drafts = p;
    no_drafts.draft_max = 0;
    run_alone(*core, tr, prompt, no_drafts);
    EXPECT_EQ(core->metrics().draft_hit_tokens.load(), 0u);
    const size_t first_of_b = log->runs.size();
    prompt.push_back(5);  // the 300 tokens again, 288 of them in whole cached blocks, and one more
    submit(tr, *core, prompt, p);
    ASSERT_TRUE(core->step());  // the second request's first step
    EXPECT_EQ(tr.reqs.back()->n_text, 1);  // it gave the first token
    ASSERT_TRUE(run_idle(*core));
    EXPECT_EQ(tr.reqs.back()->text, expect_alone(prompt, 309, {}, true).text);
    EXPECT_EQ(fake_of(draft).error(), "");
    // The second request's first step: draft forwards (if any), then the target's prompt step.
    size_t i = first_of_b;
    while (i < log->runs.size() && log->runs[i].first == 'd') ++i;
    ASSERT_LT(i, log->runs.size());
    const int target_chunk = log->runs[i].second;
    EXPECT_EQ(target_chunk, 301 - 288);
    for (size_t j = first_of_b; j < i; ++j) EXPECT_LE(log->runs[j].second, target_chunk) << "draft forward " << j;
    EXPECT_GT(i, first_of_b);  // the draft model did take the step's tokens
}

// The draft pool has a prefix cache of its own: a prompt the target finds in its cache is found
// in the draft model's too, so the draft model computes what the target computes (the last 13
// tokens), not the whole prompt, and the request drafts from its first decoding step as the
// first one did (without the draft cache it caught up on 288 tokens first, drafting nothing).
TEST(Scheduler, DraftModelFindsAPromptInItsOwnPrefixCache) {
    FakeClock clock;
    auto model = make_fake_model();
    auto draft = make_fake_model();  // the target's answers: every draft accepted
    auto log = std::make_shared<ForwardLog>();
    fake_of(draft).set_log(log, 'd');
    Tracker tr;
    auto core = make_core(model, options(1, 2048, 16, 64, true, KvType::kF16, true), draft, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(37);
    p.ignore_eos = true;
    p.draft_max = 8;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(1 + (i * 13) % (kVocab - 1));
    const auto draft_tokens = [&] {
        int n = 0;
        for (const auto& r : log->runs) n += r.second;
        return n;
    };
    run_alone(*core, tr, prompt, p);
    const uint64_t accepted_a = core->metrics().spec_accepted.load();
    const int tokens_a = draft_tokens();
    EXPECT_EQ(core->metrics().draft_hit_tokens.load(), 0u);
    prompt.push_back(5);  // the 300 tokens again, 288 of them in whole cached blocks, and one more
    run_alone(*core, tr, prompt, p);
    // Positions the fake draft model reads hold the sequence's own history (its error()).
    EXPECT_EQ(fake_of(draft).error(), "");
    const EngineStats st = core->metrics().snapshot();
    EXPECT_EQ(st.draft_prefix_hit_tokens, 288u);
    EXPECT_EQ(st.spec_accepted - accepted_a, accepted_a);
    // The first request's draft forwards took its 300 prompt tokens and its drafts; the
    // second's 13 of its prompt and the same drafts.
    EXPECT_EQ(draft_tokens() - tokens_a, tokens_a - 300 + 13);
}

// Priced: the prompt chunks the draft model computes are not draft steps, and are not timed as
// ones. A 48-token chunk timed before any draft step made a one-token draft step look like a
// fifth of the chunk (StepCost's floor for a size below the only one timed): no draft was
// chosen, so no small step was ever timed, and the request never drafted.
TEST(Scheduler, DraftModelPromptChunksDoNotPriceOutDrafts) {
    FakeClock clock;
    auto model = make_fake_model();
    fake_of(model).set_step_time(10000, 100);
    auto draft = make_fake_model();
    // A draft step of one token costs 1.5 ms (it pays: every draft is right, and at the prior
    // acceptance a draft step up to ~6 ms would); a 48-token prompt chunk 48.5 ms, a fifth of
    // which is dearer than a draft token is worth.
    fake_of(draft).set_step_time(500, 1000);
    Tracker tr;
    auto core = make_core(model, options(1, 2048, 16, 512), draft, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(40);
    p.ignore_eos = true;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 48; ++i) prompt.push_back(1 + (i * 17) % (kVocab - 1));
    run_alone(*core, tr, prompt, p);
    EXPECT_EQ(fake_of(draft).error(), "");
    EXPECT_GT(core->metrics().spec_accepted.load(), 20u);
}

// A draft model trained on a shorter context than the target's drafts only within it.
TEST(Scheduler, DraftModelDraftsWithinItsTrainedContext) {
    FakeClock clock;
    auto model = make_fake_model();
    auto draft = make_fake_model();
    fake_of(draft).set_ctx_train(64);  // its forward refuses positions from 64 on
    Tracker tr;
    auto core = make_core(model, options(1, 1024, 16, 64, true, KvType::kF16, true), draft, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(60);
    p.ignore_eos = true;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(3 + i);
    run_alone(*core, tr, prompt, p);
    EXPECT_EQ(fake_of(draft).error(), "");
    const EngineStats st = core->metrics().snapshot();
    EXPECT_GT(st.spec_accepted, 10u);  // it drafted up to position 63
    EXPECT_LT(st.spec_drafted, 24u);   // and no further
}

// The engine-wide acceptance rate a new request starts from recovers after a bad stretch:
// steps without a draft let it drift back to the prior (once below break-even, no request
// drafted again, so no trial could show that the draft model did well again). Priced, with
// steps that cost time as a model's do.
TEST(Scheduler, DraftModelRateRecoversAfterABadStretch) {
    FakeClock clock;
    auto model = make_fake_model();
    auto draft = make_fake_model(1);  // first every draft token is wrong
    fake_of(model).set_step_time(10000, 1000);
    fake_of(draft).set_step_time(2000, 200);
    Tracker tr;
    auto core = make_core(model, options(1, 1024, 16, 64), draft, clock);
    ASSERT_TRUE(core);
    int n_req = 0;
    const auto answer = [&](int max_tokens) { answer_alone(*core, tr, n_req, max_tokens, true); };
    for (int i = 0; i < 4; ++i) answer(12);
    const EngineStats bad = core->metrics().snapshot();
    EXPECT_GT(bad.spec_drafted, 0u);
    EXPECT_EQ(bad.spec_accepted, 0u);
    EXPECT_LT(bad.draft_model_rate, 0.5);
    fake_of(draft).set_wrong_one_in(0);  // from now on every draft token is right
    for (int i = 0; i < 8 && core->metrics().spec_accepted.load() == 0; ++i) answer(40);
    EXPECT_GT(core->metrics().spec_accepted.load(), 0u) << "no request drafted after the bad stretch";
    EXPECT_EQ(fake_of(draft).error(), "");
}

// ... and a good rate outlasts requests that do not draft (they say nothing of it).
TEST(Scheduler, DraftModelRateOutlastsRequestsThatDoNotDraft) {
    FakeClock clock;
    auto model = make_fake_model();
    auto draft = make_fake_model();  // always right
    Tracker tr;
    auto core = make_core(model, options(1, 1024, 16, 64, true, KvType::kF16, true), draft, clock);
    ASSERT_TRUE(core);
    EXPECT_DOUBLE_EQ(core->metrics().snapshot().draft_model_rate, 0.6);  // the prior
    int n_req = 0;
    const auto answer = [&](int max_tokens, bool speculative) {
        answer_alone(*core, tr, n_req, max_tokens, speculative);
    };
    answer(60, true);
    const EngineStats good = core->metrics().snapshot();
    EXPECT_GT(good.spec_accepted, 30u);
    EXPECT_GT(good.draft_model_rate, 0.9);
    answer(200, false);
    const EngineStats after = core->metrics().snapshot();
    EXPECT_EQ(after.spec_accepted, good.spec_accepted);
    EXPECT_DOUBLE_EQ(after.draft_model_rate, good.draft_model_rate);
    EXPECT_NE(core->metrics().prometheus().find("ferrox_spec_draft_model_acceptance"), std::string::npos);
}

// cache_prompt = false: the request neither reuses cached blocks nor leaves its own behind.
TEST(Scheduler, CachePromptFalseNeitherReusesNorPublishes) {
    FakeClock clock;
    auto model = make_fake_model();
    Tracker tr;
    auto core = make_core(model, options(2, 256, 4, 64), nullptr, clock);
    ASSERT_TRUE(core);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 30; ++i) prompt.push_back(40 + i);
    GenerationParams off = greedy(4), on = greedy(4);
    off.cache_prompt = false;
    Tracker::Req& a = submit(tr, *core, prompt, off);
    ASSERT_TRUE(run_idle(*core));
    EXPECT_EQ(core->blocks().n_cached(), 0);
    EXPECT_EQ(core->metrics().kv_cached.load(), 0);
    Tracker::Req& b = submit(tr, *core, prompt, on);
    ASSERT_TRUE(run_idle(*core));
    Tracker::Req& c = submit(tr, *core, prompt, off);
    ASSERT_TRUE(run_idle(*core));
    EXPECT_EQ(a.done.n_cached, 0);
    EXPECT_EQ(b.done.n_cached, 0);  // nothing was left by a
    EXPECT_EQ(c.done.n_cached, 0);  // b's blocks are cached, but c does not look
    EXPECT_GT(core->metrics().kv_cached.load(), 0);
    EXPECT_EQ(core->metrics().prefix_lookups.load(), 1u);
    for (auto* r : {&a, &b, &c}) EXPECT_EQ(r->text, a.text);
    expect_idle(*core);
}

// A prompt that repeats an earlier one reuses its full blocks (all but the block holding the
// last two prompt tokens), and reports them as cached.
TEST(Scheduler, WarmPromptReusesFullBlocks) {
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    Tracker tr;
    auto core = make_core(model, options(4, 512, 8, 64), nullptr, clock);
    ASSERT_TRUE(core);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 35; ++i) prompt.push_back(1 + (i * 7) % 290);
    const Expect want = expect_alone(prompt, 35 + 10, {}, false);
    for (int turn = 0; turn < 3; ++turn) {
        Tracker::Req& r = submit(tr, *core, prompt, greedy(10));
        ASSERT_TRUE(run_idle(*core));
        EXPECT_EQ(r.text, want.text);
        EXPECT_EQ(r.done.n_cached, turn == 0 ? 0 : 32);  // (35 - 2) / 8 full blocks
    }
    // The next turn of the conversation also reuses the blocks of the generated tokens.
    std::vector<int32_t> next = prompt;
    next.insert(next.end(), want.tokens.begin(), want.tokens.end());
    next.push_back(7);
    Tracker::Req& r = submit(tr, *core, next, greedy(5));
    ASSERT_TRUE(run_idle(*core));
    const int n = static_cast<int>(next.size());
    // The first turn published every full block it computed: its prompt and all its generated
    // tokens but the last (sampled, never fed back).
    EXPECT_EQ(r.done.n_cached, (n - 2) / 8 * 8);
    EXPECT_EQ(r.text, expect_alone(next, n + 5, {}, false).text);
    const EngineStats st = core->metrics().snapshot();
    EXPECT_EQ(st.prefix_lookups, 4u);
    EXPECT_GE(st.prefix_hit_tokens, 96u);
    EXPECT_GT(st.kv_blocks_cached, 0);
    expect_idle(*core);
    EXPECT_EQ(fake.error(), "");
}

// Cancelling requests while they wait, while they prefill and while they decode frees
// everything, each at the next step, and each gets exactly one kDone.
TEST(Scheduler, CancelAnywhereFreesEverything) {
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    Tracker tr;
    auto core = make_core(model, options(2, 128, 4, 8), nullptr, clock);  // 8 tokens a step
    ASSERT_TRUE(core);
    tr.core = core.get();
    GenerationParams p = greedy(60);
    p.ignore_eos = true;
    std::vector<Tracker::Req*> rs;
    for (int i = 0; i < 6; ++i) rs.push_back(&submit(tr, *core, std::vector<int32_t>(40, 1 + i), p));
    const auto cancel_and_step = [&](std::initializer_list<int> which) {
        for (int i : which) rs[i]->handle->cancel();
        core->step();
        for (int i : which) {
            EXPECT_EQ(rs[i]->n_done, 1) << i;
            EXPECT_EQ(rs[i]->done.finish, FinishReason::kCancelled) << i;
        }
    };
    ASSERT_TRUE(core->step());  // 0 and 1 admitted, 0 computes its first 8 tokens
    ASSERT_TRUE(rs[0]->prefilling());
    ASSERT_TRUE(rs[5]->waiting());
    EXPECT_EQ(core->metrics().n_waiting.load(), 4);
    cancel_and_step({0, 5});  // prefilling and waiting; 2 takes 0's place
    EXPECT_EQ(core->metrics().n_waiting.load(), 2);
    for (int i = 0; i < 20 && !rs[1]->decoding(); ++i) core->step();
    ASSERT_TRUE(rs[1]->decoding());
    ASSERT_TRUE(core->step());  // 2 computes its first chunk beside 1's token
    ASSERT_TRUE(rs[1]->decoding());
    ASSERT_TRUE(rs[2]->prefilling());
    ASSERT_TRUE(rs[3]->waiting());
    cancel_and_step({1, 2, 3});  // decoding, prefilling, waiting; 4 is admitted
    // Only 4 holds blocks: its 40 prompt tokens and the next, 11 blocks of 4 (none cached: every
    // prompt is another).
    EXPECT_EQ(core->blocks().n_used(), 11);
    EXPECT_EQ(core->metrics().kv_used.load(), 11);
    for (int i = 0; i < 20 && rs[4]->n_text < 3; ++i) core->step();
    ASSERT_TRUE(rs[4]->decoding());
    cancel_and_step({4});
    for (auto* r : rs) {
        EXPECT_EQ(r->n_done, 1);
        EXPECT_EQ(r->n_after_done, 0);
        EXPECT_EQ(r->done.finish, FinishReason::kCancelled);
        EXPECT_EQ(r->gauge_at_done, r->used_at_done);
    }
    EXPECT_EQ(rs[5]->n_text, 0);
    // What 4 got is its solo answer's beginning.
    const int n4 = rs[4]->done.n_completion;
    EXPECT_EQ(n4, rs[4]->n_text);
    EXPECT_EQ(rs[4]->text, expect_alone(rs[4]->prompt, 40 + n4, {}, true).text);
    expect_idle(*core);
    EXPECT_EQ(fake.error(), "");
}

// A sequence that computed a block another sequence had just published (both cold) continues
// its cache chain from the other's block, which it does not hold. When that block is evicted
// and handed out again before the sequence's next block is full, the next block must not be
// published under the block's new owner.
//
// Pool of 11 blocks of 4, three slots, 64 tokens a step:
//   step 1: X (P + 2, one token), S (P + 1, four tokens) and V (15 tokens, two tokens) prefill
//           together. X publishes F = its block of P and ends: F is cached, unreferenced. S's
//           own block of P is a duplicate: S chains on F.
//   step 2: V ends; its four published blocks are cached after F.
//   step 3: Y (20 tokens, waiting so far) takes the 4 free blocks, then evicts F (the least
//           recently released) for its fifth block and publishes it as Y's block 4.
//   step 4: S's second block (its prompt's last token and three generated ones) is full and
//           published with parent F: under Y's chain, although its K/V follow P.
// Z = Y + S's second block + 2 tokens then matches Y's five blocks and S's block (as it did
// before 9cb82de).
TEST(Scheduler, ChainThroughABlockEvictedMeanwhileIsNotPublished) {
    FakeClock clock;
    auto model = make_fake_model();
    FakeModel& fake = fake_of(model);
    Tracker tr;
    auto core = make_core(model, options(3, 44, 4, 64), nullptr, clock);
    ASSERT_TRUE(core);
    ASSERT_EQ(core->kv_blocks(), 11);
    auto params = [](int max_tokens) {
        GenerationParams p = greedy(max_tokens);
        p.ignore_eos = true;
        return p;
    };
    const std::vector<int32_t> P = {1, 2, 3, 4};
    std::vector<int32_t> x = P, s = P, v, y;
    x.insert(x.end(), {5, 6});
    s.push_back(7);
    for (int i = 0; i < 15; ++i) v.push_back(100 + i);
    for (int i = 0; i < 20; ++i) y.push_back(200 + i);

    submit(tr, *core, {50, 51}, params(1));  // D: a step of its own before X, S, V and Y
    ASSERT_TRUE(core->step());
    for (auto [prompt, n] : {std::pair{&x, 1}, {&s, 4}, {&v, 2}, {&y, 1}}) submit(tr, *core, *prompt, params(n));
    ASSERT_TRUE(run_idle(*core));

    const Expect s_out = expect_alone(s, 9, {}, true);
    std::vector<int32_t> z = y;
    z.push_back(7);
    z.insert(z.end(), s_out.tokens.begin(), s_out.tokens.begin() + 3);
    z.insert(z.end(), {60, 61});
    Tracker::Req& rz = submit(tr, *core, z, greedy(5));
    ASSERT_TRUE(run_idle(*core));
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(tr.reqs[i]->done.finish, FinishReason::kLength) << i;
    }
    EXPECT_EQ(tr.reqs[2]->text, s_out.text);
    EXPECT_NE(rz.done.finish, FinishReason::kError) << rz.done.error.message();
    EXPECT_EQ(rz.text, expect_alone(z, 31, {}, false).text);
    EXPECT_EQ(rz.done.n_cached, 20);  // Y's blocks; S's block follows P, not Y
    EXPECT_EQ(fake.error(), "");
    EXPECT_EQ(core->metrics().n_preemptions.load(), 0u);
    expect_idle(*core);
}

// The smallest step budget the engine accepts still computes every prompt. With two tokens a
// step, a prompt of three cannot be cut into chunks of two or more: the engine must still make
// progress (or refuse the budget at create()). Before 9cb82de a 3-token remainder was skipped
// at every step while the engine thread spun.
TEST(Scheduler, SmallestStepBudgetCompletesEveryPrompt) {
    FakeClock clock;
    auto model = make_fake_model();
    Tracker tr;
    auto e = EngineCore::create(model, options(2, 64, 4, 2));
    if (!e.has_value()) GTEST_SKIP() << "a budget of 2 is refused: " << e.status().message();
    auto core = std::move(*e);
    core->set_clock([&clock] { return clock.now; });
    fake_of(model).set_clock(&clock);
    fake_of(model).set_blocks(&core->blocks());
    for (int n = 1; n <= 7; ++n) {
        std::vector<int32_t> prompt;
        for (int i = 0; i < n; ++i) prompt.push_back(10 + i);
        submit(tr, *core, prompt, greedy(3));
    }
    // 28 prompt tokens and 21 answer tokens, at most 2 a step.
    ASSERT_TRUE(run_idle(*core, 100)) << tr.n_done << " of 7 prompts done; stuck with a 3-token prompt?";
    for (const auto& r : tr.reqs) {
        EXPECT_EQ(r->text, expect_alone(r->prompt, static_cast<int>(r->prompt.size()) + 3, {}, false).text);
    }
    expect_idle(*core);
    EXPECT_EQ(fake_of(model).error(), "");
}

// The gauges of an idle engine say so at once, also when its last request was cancelled
// mid-flight (the step that ends it runs no forward pass).
TEST(Scheduler, GaugesAreZeroAfterTheLastRequestIsCancelled) {
    FakeClock clock;
    auto model = make_fake_model();
    Tracker tr;
    auto core = make_core(model, options(2, 256, 4, 16), nullptr, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(200);
    p.ignore_eos = true;
    Tracker::Req& r = submit(tr, *core, std::vector<int32_t>(20, 3), p);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(core->step());
    ASSERT_TRUE(r.decoding());
    EXPECT_EQ(core->metrics().n_running.load(), 1);
    EXPECT_GT(core->metrics().kv_used.load(), 0);
    r.handle->cancel();
    EXPECT_FALSE(core->step());
    EXPECT_EQ(r.n_done, 1);
    expect_idle(*core);
}

// cancel_all (the threaded engine's shutdown) ends every request, waiting or running, with one
// kDone each, and frees every block.
TEST(Scheduler, CancelAllEndsEveryRequest) {
    FakeClock clock;
    auto model = make_fake_model();
    Tracker tr;
    auto core = make_core(model, options(2, 64, 4, 8), nullptr, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(50);
    p.ignore_eos = true;
    for (int i = 0; i < 5; ++i) submit(tr, *core, std::vector<int32_t>(10, 1 + i), p);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(core->step());
    ASSERT_TRUE(tr.reqs[0]->decoding());
    ASSERT_TRUE(tr.reqs[4]->waiting());
    core->cancel_all();
    EXPECT_EQ(tr.n_done, 5);
    for (const auto& r : tr.reqs) {
        EXPECT_EQ(r->n_done, 1);
        EXPECT_EQ(r->done.finish, FinishReason::kCancelled);
    }
    expect_idle(*core);
    EXPECT_FALSE(core->step());
}

// A request's time limit (GenerationParams::timeout_s, from submit) ends it with what it has,
// running or waiting, at the first step past it. Steps of 1 ms on the fake clock: step k starts
// at (k - 1) ms.
TEST(Scheduler, TimeLimitEndsARequestWithItsAnswerSoFar) {
    FakeClock clock;
    auto model = make_fake_model();
    fake_of(model).set_step_time(1000, 0);
    Tracker tr;
    auto core = make_core(model, options(1, 256, 4, 64), nullptr, clock);
    ASSERT_TRUE(core);
    GenerationParams p = greedy(100);
    p.ignore_eos = true;
    p.draft_max = 0;  // one token a step
    p.timeout_s = 0.0105;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 10; ++i) prompt.push_back(20 + i);
    Tracker::Req& a = submit(tr, *core, prompt, p);
    p.timeout_s = 0.0055;
    Tracker::Req& b = submit(tr, *core, {7, 8, 9}, p);  // waits behind a (one slot)
    ASSERT_TRUE(run_idle(*core, 1000));
    // b ends at step 7 (6 ms), never admitted; a at step 12 (11 ms), after 11 tokens.
    EXPECT_EQ(b.done.finish, FinishReason::kLength);
    EXPECT_EQ(b.done.n_completion, 0);
    EXPECT_EQ(b.n_text, 0);
    EXPECT_EQ(a.done.finish, FinishReason::kLength);
    EXPECT_EQ(a.done.n_completion, 11);
    EXPECT_EQ(a.text, expect_alone(prompt, 21, {}, true).text);
    EXPECT_LT(b.i_done, a.i_done);
    EXPECT_EQ(fake_of(model).n_forward(), 11);
    expect_idle(*core);
}

}  // namespace
}  // namespace ferrox
