#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/log.h"
#include "engine/text_stream.h"
#include "engine/prompt_lookup.h"
#include "kernels/ops.h"

namespace ferrox {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kCancelled: return "cancelled";
        case FinishReason::kError: return "error";
    }
    return "error";
}

struct Engine::Seq {
    std::shared_ptr<RequestHandle> handle;
    GenerationParams params;
    EventSink sink;
    std::string stop_matched;     // the stop string that ended it
    // Past its wall-clock limit (GenerationParams::timeout_s), counted from submit().
    bool expired(std::chrono::steady_clock::time_point now) const {
        return params.timeout_s > 0 && std::chrono::duration<double>(now - t_submit).count() > params.timeout_s;
    }
    std::vector<int32_t> tokens;  // prompt, then generated tokens
    int n_prompt = 0;
    int n_in_kv = 0;              // positions whose K/V are computed
    int n_generated = 0;
    int max_total = 0;            // prompt + generated never exceeds this
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<grammar::Matcher> matcher;  // with a grammar
    std::unique_ptr<TextStream> text;
    std::unique_ptr<SeqKv> kv;
    bool done = false;
    bool admitted = false;        // admitted at least once (counted in the statistics)
    bool preempted = false;       // set during a step; the sequence goes back to the queue
    uint64_t order = 0;           // admission order: the highest is preempted first
    int n_published = 0;          // leading blocks in the prefix cache (published or matched)
    int32_t chain = -1;           // the cache's block for the last published position
    uint32_t chain_epoch = 0;     // its epoch (the sequence may hold no reference to it)
    int n_cached = 0;             // prompt tokens reused from the cache at first admission
    // Speculative decoding: this step's draft tokens, the logits row of the first, and the
    // decayed counts of draft tokens verified and accepted (the acceptance estimate).
    std::vector<int32_t> draft;
    int draft_row0 = 0;
    double spec_trials = 0, spec_hits = 0;
    // With a draft model: the sequence's KV in the draft pool, and how many of its leading
    // tokens it holds (tokens[0, d_in_kv); past a rejected draft token it holds no more).
    std::unique_ptr<SeqKv> dkv;
    int d_in_kv = 0;
    bool d_off = false;  // it holds a token the draft model lacks: no draft model for it
    // Its leading blocks in the draft pool's prefix cache: n_published, chain and chain_epoch
    // of the draft KV.
    int d_published = 0;
    int32_t d_chain = -1;
    uint32_t d_chain_epoch = 0;
    void drop_draft_kv() {
        dkv.reset();
        d_in_kv = 0;
        d_published = 0;
        d_chain = -1;
    }
    std::chrono::steady_clock::time_point t_submit, t_last_token;

    // Positions to compute before decoding: the prompt, or, after a preemption, every token
    // but the last sampled one (which the next decode step feeds).
    int n_fill() const { return n_generated > 0 ? static_cast<int>(tokens.size()) - 1 : n_prompt; }
    bool prefilling() const { return n_in_kv < n_fill(); }
    bool caching(const EngineOptions& o) const { return o.prefix_cache && params.cache_prompt; }
};

namespace {

// The acceptance estimate of a sequence without history: a draft token is accepted with this
// probability, worth this many observed tokens.
constexpr double kPriorAccept = 0.6, kPriorTrials = 2;
// A step without a trial for a sequence: its acceptance estimate drifts back toward the prior,
// so a sequence whose drafts failed tries again now and then.
template <class S>
void drift_to_prior(S& s) {
    s.spec_hits *= 0.97;
    s.spec_trials *= 0.97;
}
// While only one step size has been timed, each further token is assumed to cost this fraction
// of it: optimistic (on 2 cores a small model's extra decode token costs 0.15 to 0.45 of a
// one-token step), so that short drafts are tried and the sizes they make get timed.
constexpr double kOptimisticTokenCost = 0.15;

}  // namespace

void Engine::StepCost::observe(int n, double seconds) {
    if (n < 1 || n > kMax) return;
    t[n] = t[n] == 0 ? seconds : 0.9 * t[n] + 0.1 * seconds;
}

// A step size timed: its mean, but at most 1.2x the line through all the sizes timed (one slow
// step, a page fault or a busy machine, must not make a size look dear for good, since a size
// that looks dear is not chosen and so not timed again). A size not timed: interpolated
// between the nearest timed ones, or extended along that line (kOptimisticTokenCost while
// only one size is timed).
double Engine::StepCost::predict(int n) const {
    if (n < 1) return 0;
    double w = 0, sn = 0, st = 0, snn = 0, snt = 0;
    int lo = 0, hi = 0;  // the nearest timed sizes at or below and at or above n
    for (int i = 1; i <= kMax; ++i) {
        if (t[i] <= 0) continue;
        w += 1, sn += i, st += t[i], snn += static_cast<double>(i) * i, snt += i * t[i];
        if (i <= n) lo = i;
        if (i >= n && hi == 0) hi = i;
    }
    if (w == 0) return 0;
    const double var = snn - sn * sn / w;
    const double slope = var > 0 ? std::max(0.0, (snt - sn * st / w) / var) : kOptimisticTokenCost * st / w;
    const auto line = [&](int x) { return st / w + slope * (x - sn / w); };
    const auto at = [&](int i) { return var > 0 ? std::min(t[i], 1.2 * line(i)) : t[i]; };
    if (lo == n) return at(n);
    if (lo > 0 && hi > 0) return at(lo) + (at(hi) - at(lo)) * (n - lo) / (hi - lo);
    if (lo > 0) return at(lo) + slope * (n - lo);
    return std::max(0.2 * at(hi), at(hi) - slope * (hi - n));
}

Engine::Engine(std::shared_ptr<LoadedModel> model, const EngineOptions& opts)
    : model_(std::move(model)), opts_(opts) {}

// A token's text on one line: control bytes as \xNN.
static std::string printable(std::string_view piece) {
    std::string out;
    for (const char ch : piece) {
        const auto c = static_cast<unsigned char>(ch);
        if (c >= 0x20 && c != 0x7f) {
            out += ch;
        } else {
            static const char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    return out;
}

// A draft model must speak the target's vocabulary: the same text for every id both have, and
// at most 128 ids more or fewer (llama.cpp's rule: sizes padded differently within a family).
static Status check_draft_vocab(const LoadedModel& target, const LoadedModel& draft) {
    const int nt = target.forward_model().n_vocab(), nd = draft.forward_model().n_vocab();
    const std::string which = "the draft model " + draft.path;
    if (std::abs(nt - nd) > 128) {
        return invalid_argument(which + " has " + std::to_string(nd) + " tokens, the model " + std::to_string(nt) +
                                ": not the same vocabulary");
    }
    for (int id = 0; id < std::min(nt, nd); ++id) {
        if (target.tokenizer->token_to_piece(id, true) != draft.tokenizer->token_to_piece(id, true)) {
            return invalid_argument(which + " has another vocabulary: token " + std::to_string(id) + " is '" +
                                    printable(draft.tokenizer->token_to_piece(id, true)) + "', not '" +
                                    printable(target.tokenizer->token_to_piece(id, true)) + "'");
        }
    }
    return Status::ok();
}

Expected<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<LoadedModel> model,
                                                 const EngineOptions& opts, std::shared_ptr<LoadedModel> draft) {
    if (!model || (!model->model && !model->stand_in) || !model->tokenizer) return invalid_argument("no model");
    if (opts.n_parallel < 1 || opts.block_size < 1 || opts.n_ctx < 1 || opts.max_batch_tokens < 2) {
        return invalid_argument("engine options out of range");
    }
    std::unique_ptr<Engine> e(new Engine(std::move(model), opts));
    const ForwardModel& m = e->model_->forward_model();
    FERROX_RETURN_IF_ERROR(m.check_kv_type(opts.kv_type));
    const KvGeometry geo = m.kv_geometry(opts.block_size, opts.kv_type);
    int64_t n_blocks = (static_cast<int64_t>(opts.n_ctx) + opts.block_size - 1) / opts.block_size;
    if (opts.kv_budget_mib > 0) {
        n_blocks = opts.kv_budget_mib * (int64_t{1} << 20) / static_cast<int64_t>(geo.block_bytes());
        if (n_blocks < 1) {
            return invalid_argument("a KV budget of " + std::to_string(opts.kv_budget_mib) +
                                    " MiB is less than one block (" + std::to_string(geo.block_bytes()) +
                                    " bytes for " + std::to_string(opts.block_size) + " tokens)");
        }
    }
    n_blocks = std::min<int64_t>(n_blocks, (int64_t{1} << 30) / opts.block_size);
    e->kv_ = std::make_unique<KvPool>(geo, static_cast<int>(n_blocks));
    const int64_t pool_tokens = n_blocks * opts.block_size;
    e->ceiling_ = static_cast<int>(std::min<int64_t>({pool_tokens, m.max_ctx(), m.n_ctx_train()}));
    e->opts_.max_batch_tokens = std::min(opts.max_batch_tokens, m.max_batch_tokens());
    // One row per sequence, plus its draft tokens' rows (never more rows than batch tokens).
    const int64_t rows = std::min<int64_t>(static_cast<int64_t>(opts.n_parallel) * (1 + std::max(0, opts.draft_max)) + 1,
                                           std::max(e->opts_.max_batch_tokens, opts.n_parallel + 1));
    e->logits_.resize(static_cast<size_t>(rows) * m.n_vocab());
    if (draft) {
        if ((!draft->model && !draft->stand_in) || !draft->tokenizer) return invalid_argument("no draft model");
        FERROX_RETURN_IF_ERROR(check_draft_vocab(*e->model_, *draft));
        const ForwardModel& d = draft->forward_model();
        if (Status st = d.check_kv_type(opts.kv_type); !st.is_ok()) {
            return Status(st.code(), "the draft model " + draft->path + ": " + st.message());
        }
        // Drafts stop where the draft model's trained context does (its positions past it are
        // noise, and their rejections would price drafting out for every sequence).
        e->draft_ctx_ = std::min(d.max_ctx(), d.n_ctx_train());
        // As many tokens as the target's pool; its sequences share no prefix.
        e->draft_kv_ = std::make_unique<KvPool>(d.kv_geometry(opts.block_size, opts.kv_type), static_cast<int>(n_blocks));
        e->draft_vocab_ = std::min(m.n_vocab(), d.n_vocab());
        e->draft_logits_.resize(static_cast<size_t>(opts.n_parallel) * d.n_vocab());
        e->draft_batch_.tokens.reserve(std::min(e->opts_.max_batch_tokens, d.max_batch_tokens()));
        e->draft_ = std::move(draft);
        e->draft_rate_.store(e->model_rate());
    }
    e->update_gauges();
    e->batch_.tokens.reserve(e->opts_.max_batch_tokens);
    e->batch_.seqs.reserve(opts.n_parallel + 1);
    e->in_batch_.reserve(opts.n_parallel + 1);
    e->thread_ = std::thread([p = e.get()] { p->run(); });
    return e;
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    {
        std::lock_guard<std::mutex> lk(mask_mu_);
        mask_stop_ = true;
    }
    mask_cv_.notify_all();
    if (mask_thread_.joinable()) mask_thread_.join();
}

void Engine::mask_main() {
    std::unique_lock<std::mutex> lk(mask_mu_);
    for (;;) {
        mask_cv_.wait(lk, [&] { return mask_stop_ || mask_busy_; });
        if (mask_stop_) return;
        for (grammar::Matcher* m : mask_jobs_) (void)m->mask();
        mask_jobs_.clear();
        mask_busy_ = false;
        mask_cv_.notify_all();
    }
}

Expected<std::shared_ptr<RequestHandle>> Engine::submit(std::vector<int32_t> prompt,
                                                        GenerationParams params, EventSink sink) {
    if (prompt.empty()) return invalid_argument("the prompt is empty");
    const int n_prompt = static_cast<int>(prompt.size());
    const int want = params.max_tokens > 0 ? params.max_tokens : 1;
    if (static_cast<int64_t>(n_prompt) + want > ceiling_) {
        return invalid_argument("the prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                                std::to_string(params.max_tokens > 0 ? params.max_tokens : 1) +
                                ") exceeds the context of " + std::to_string(ceiling_) + " tokens");
    }
    for (int32_t t : prompt) {
        if (t < 0 || t >= model_->forward_model().n_vocab()) {
            return invalid_argument("token id " + std::to_string(t) + " is out of range [0, " +
                                    std::to_string(model_->forward_model().n_vocab()) + ")");
        }
    }
    auto s = std::make_unique<Seq>();
    s->handle = std::make_shared<RequestHandle>(next_id_.fetch_add(1));
    s->n_prompt = n_prompt;
    s->tokens = std::move(prompt);
    s->max_total = params.max_tokens > 0 ? n_prompt + params.max_tokens : ceiling_;
    s->max_total = std::min(s->max_total, ceiling_);
    s->params = std::move(params);
    s->sink = std::move(sink);
    s->t_submit = std::chrono::steady_clock::now();
    auto handle = s->handle;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return Status(StatusCode::kCancelled, "the server is shutting down");
        if (n_waiting_.load() >= opts_.max_queue) {  // counts incoming_ and waiting_
            return Status(StatusCode::kResourceExhausted,
                          "too many requests waiting (" + std::to_string(opts_.max_queue) + ")");
        }
        incoming_.push_back(std::move(s));
        n_waiting_.fetch_add(1);
    }
    cv_.notify_one();
    return handle;
}

Engine::Stats Engine::stats() const {
    Stats st;
    st.n_running = n_running_.load();
    st.n_waiting = n_waiting_.load();
    st.kv_blocks_used = kv_used_.load();
    st.kv_blocks_total = kv_->n_blocks();
    st.n_prompt_tokens = n_prompt_tokens_.load();
    st.n_generated_tokens = n_generated_tokens_.load();
    st.n_requests = n_requests_.load();
    st.kv_blocks_cached = kv_cached_.load();
    st.prefix_lookups = prefix_lookups_.load();
    st.prefix_lookup_tokens = prefix_lookup_tokens_.load();
    st.prefix_hit_tokens = prefix_hit_tokens_.load();
    st.n_preemptions = n_preemptions_.load();
    st.spec_drafted = spec_drafted_.load();
    st.spec_accepted = spec_accepted_.load();
    st.draft_prefix_hit_tokens = draft_hit_tokens_.load();
    st.draft_model_rate = draft_rate_.load(std::memory_order_relaxed);
    st.step_seconds = static_cast<double>(step_ns_.load()) * 1e-9;
    st.forward_seconds = static_cast<double>(forward_ns_.load()) * 1e-9;
    st.n_steps = n_steps_.load();
    return st;
}

std::string Engine::prometheus() const {
    const Stats st = stats();
    std::string out;
    char buf[256];
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
        std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
        out += buf;
    };
    metric("ferrox_requests_running", "gauge", "Requests generating now.", st.n_running);
    metric("ferrox_requests_waiting", "gauge", "Requests queued for a slot or KV room.", st.n_waiting);
    metric("ferrox_kv_blocks_used", "gauge", "KV cache blocks referenced by sequences.", st.kv_blocks_used);
    metric("ferrox_kv_blocks_total", "gauge", "KV cache blocks in the pool.", st.kv_blocks_total);
    metric("ferrox_kv_blocks_cached", "gauge", "KV cache blocks indexed by the prefix cache.", st.kv_blocks_cached);
    metric("ferrox_requests_total", "counter", "Requests admitted to generation.", static_cast<double>(st.n_requests));
    metric("ferrox_prompt_tokens_total", "counter", "Prompt tokens processed.", static_cast<double>(st.n_prompt_tokens));
    metric("ferrox_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(st.n_generated_tokens));
    metric("ferrox_prefix_cache_lookups_total", "counter", "Prefix cache lookups (one per admitted request).",
           static_cast<double>(st.prefix_lookups));
    metric("ferrox_prefix_cache_lookup_tokens_total", "counter", "Prompt tokens of the prefix cache lookups.",
           static_cast<double>(st.prefix_lookup_tokens));
    metric("ferrox_prefix_cache_hit_tokens_total", "counter", "Prompt tokens reused from the prefix cache.",
           static_cast<double>(st.prefix_hit_tokens));
    metric("ferrox_preemptions_total", "counter", "Sequences preempted for KV room.",
           static_cast<double>(st.n_preemptions));
    metric("ferrox_spec_draft_tokens_total", "counter", "Draft tokens verified by speculative decoding.",
           static_cast<double>(st.spec_drafted));
    metric("ferrox_spec_accepted_tokens_total", "counter", "Draft tokens accepted (tokens without a step of their own).",
           static_cast<double>(st.spec_accepted));
    if (draft_) {
        metric("ferrox_spec_draft_model_acceptance", "gauge",
               "The draft model's recent acceptance rate: where a new request's estimate starts.",
               st.draft_model_rate);
        metric("ferrox_spec_draft_prefix_hit_tokens_total", "counter",
               "Tokens whose draft-model KV came from the draft pool's prefix cache.",
               static_cast<double>(st.draft_prefix_hit_tokens));
    }
    metric("ferrox_engine_steps_total", "counter", "Engine steps that ran a forward pass.",
           static_cast<double>(st.n_steps));
    metric("ferrox_engine_step_seconds_total", "counter",
           "Wall time of those steps: admission, batching, forward, sampling, detokenizing, events.",
           st.step_seconds);
    metric("ferrox_engine_forward_seconds_total", "counter", "Wall time of their forward passes alone.",
           st.forward_seconds);
    out += ttft_.prometheus("ferrox_time_to_first_token_seconds", "Time from submission to the first token.");
    out += itl_.prometheus("ferrox_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
    return out;
}

void Engine::finish(Seq& s, FinishReason why, Status error) {
    if (s.done) return;
    s.done = true;
    if (why != FinishReason::kCancelled && why != FinishReason::kError && s.text) {
        std::string rest = s.text->finish();
        if (!rest.empty()) {
            EngineEvent ev;
            ev.kind = EngineEvent::Kind::kText;
            ev.text = std::move(rest);
            s.sink(std::move(ev));
        }
    }
    // Blocks go back before kDone, so a client that sees the end also sees them free.
    if (s.kv) s.kv->clear();
    update_gauges();
    EngineEvent ev;
    ev.kind = EngineEvent::Kind::kDone;
    ev.finish = why;
    ev.error = std::move(error);
    ev.n_prompt = s.n_prompt;
    ev.n_completion = s.n_generated;
    ev.n_cached = s.n_cached;
    ev.stop_matched = s.stop_matched;
    s.sink(std::move(ev));
}

std::shared_ptr<grammar::GrammarRuntime> Engine::grammar_runtime(const std::shared_ptr<const grammar::Grammar>& g,
                                                                  bool special) {
    ++grammar_clock_;
    for (GrammarEntry& e : grammars_) {
        if (e.special == special && (&e.rt->grammar() == g.get() || e.rt->grammar().source() == g->source())) {
            e.last_use = grammar_clock_;
            return e.rt;
        }
    }
    if (!mask_thread_.joinable()) mask_thread_ = std::thread([this] { mask_main(); });
    auto& vocab = grammar_vocab_[special ? 1 : 0];
    if (!vocab) {
        const Tokenizer& tok = *model_->tokenizer;
        const int n = model_->forward_model().n_vocab();
        std::vector<std::string> bytes(static_cast<size_t>(n));
        for (int32_t id = 0; id < n; ++id) {
            if (!tok.is_eog(id)) bytes[id] = std::string(tok.token_to_piece(id, special));
        }
        vocab = std::make_shared<grammar::TokenVocab>(std::move(bytes), tok.eog_ids());
    }
    // Keep the 32 most recently used grammars (each holds its masks, up to 64 MiB).
    constexpr size_t kKeep = 32;
    if (grammars_.size() >= kKeep) {
        auto oldest = std::min_element(grammars_.begin(), grammars_.end(),
                                       [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
        grammars_.erase(oldest);
    }
    grammars_.push_back({std::make_shared<grammar::GrammarRuntime>(g, vocab), special, grammar_clock_});
    return grammars_.back().rt;
}

void Engine::update_gauges() {
    n_running_.store(static_cast<int>(running_.size()));
    kv_used_.store(kv_->n_used());
    kv_cached_.store(kv_->n_cached());
}

namespace {

// Publishes to pool's prefix cache the blocks of a sequence's KV (`blocks`) that its first
// n_tokens tokens fill and that are not published yet (the first *n_published are); *chain and
// *chain_epoch: the cache's block for the last published position.
void publish_chain(KvPool& pool, const std::vector<int32_t>& blocks, const int32_t* tokens, int n_tokens,
                   int* n_published, int32_t* chain, uint32_t* chain_epoch) {
    const int bs = pool.geometry().block_size;
    while ((*n_published + 1) * bs <= n_tokens) {
        const int i = (*n_published)++;
        // When another sequence published the same prefix first (both computed it cold), the
        // chain continues from its block, so this sequence's later blocks are still found. That
        // block may have been evicted and handed out since: then the chain is broken.
        if (i > 0 && (*chain < 0 || pool.epoch(*chain) != *chain_epoch || !pool.published(*chain))) {
            *chain = -1;
            continue;  // nothing after a broken link can be found
        }
        *chain = pool.publish(blocks[i], i > 0 ? *chain : -1, tokens + static_cast<size_t>(i) * bs);
        if (*chain >= 0) *chain_epoch = pool.epoch(*chain);
    }
}

}  // namespace

// Publishes the sequence's newly completed blocks to the prefix cache.
void Engine::publish_blocks(Seq& s) {
    if (!s.caching(opts_)) return;
    publish_chain(*kv_, s.kv->blocks(), s.tokens.data(), s.n_in_kv, &s.n_published, &s.chain, &s.chain_epoch);
}

// The draft model's prefix cache: the draft pool publishes a sequence's full blocks of its own
// tokens (not the draft tokens past them, which may be rejected), and a sequence's draft KV
// starts from the longest cached prefix of its tokens, at most `limit` of them (the draft
// model must still compute one token for its logits). So a prompt found in the target's cache
// is mostly found in the draft's too, and the draft model catches up on what the target
// computes, not on the whole prompt.
void Engine::begin_draft_kv(Seq& s, int limit) {
    if (s.dkv) return;
    s.dkv = std::make_unique<SeqKv>(draft_kv_.get());
    const int bs = opts_.block_size;
    if (!s.caching(opts_) || limit < bs) return;
    std::vector<int32_t> matched;
    draft_kv_->match_prefix(std::span<const int32_t>(s.tokens.data(), limit), limit / bs, &matched);
    if (matched.empty()) return;
    s.dkv->adopt(matched);
    s.d_in_kv = static_cast<int>(matched.size()) * bs;
    s.d_published = static_cast<int>(matched.size());
    s.d_chain = matched.back();
    s.d_chain_epoch = draft_kv_->epoch(s.d_chain);
    draft_hit_tokens_.fetch_add(static_cast<uint64_t>(s.d_in_kv), std::memory_order_relaxed);
}

void Engine::publish_draft_blocks(Seq& s) {
    if (!s.caching(opts_) || !s.dkv) return;
    const int n = std::min(s.d_in_kv, static_cast<int>(s.tokens.size()));
    publish_chain(*draft_kv_, s.dkv->blocks(), s.tokens.data(), n, &s.d_published, &s.d_chain, &s.d_chain_epoch);
}

// Frees the sequence's blocks (the full ones stay in the prefix cache) and marks it to go back
// to the head of the queue; it recomputes its tokens when readmitted and continues.
void Engine::preempt(Seq& s) {
    s.kv->clear();
    s.kv.reset();
    s.drop_draft_kv();
    s.n_in_kv = 0;
    s.n_published = 0;
    s.chain = -1;
    s.preempted = true;
    n_preemptions_.fetch_add(1, std::memory_order_relaxed);
}

// Makes room for a decoding sequence's next position, preempting the newest sequences while
// the pool has no block to give. Returns false when `s` itself was preempted.
bool Engine::grow(Seq& s) {
    while (s.kv->capacity() < s.n_in_kv + 1) {
        if (s.kv->reserve(s.n_in_kv + 1).is_ok()) break;
        Seq* victim = nullptr;
        for (auto& r : running_) {
            if (!r->done && !r->preempted && (!victim || r->order > victim->order)) victim = r.get();
        }
        CHECK(victim != nullptr);
        preempt(*victim);
        if (victim == &s) return false;
    }
    return true;
}

// Samples from `logits` (the sequence's row), emits the token's text and decides whether the
// sequence ends.
void Engine::emit_token(Seq& s, int32_t token, const float* logits) {
    const Tokenizer& tok = *model_->tokenizer;
    const int n_vocab = model_->forward_model().n_vocab();
    const auto now = std::chrono::steady_clock::now();
    if (s.n_generated == 0) {
        ttft_.observe(std::chrono::duration<double>(now - s.t_submit).count());
    } else {
        itl_.observe(std::chrono::duration<double>(now - s.t_last_token).count());
    }
    s.t_last_token = now;
    s.tokens.push_back(token);
    ++s.n_generated;
    n_generated_tokens_.fetch_add(1, std::memory_order_relaxed);

    EngineEvent ev;
    ev.kind = EngineEvent::Kind::kText;
    ev.token = token;
    if (s.params.top_logprobs >= 0) {
        // Log-probabilities of the distribution the token was drawn from: the logits after
        // bias and penalties, at the sampling temperature (1 for greedy).
        // log Z in one vector pass (kernels/ops.h; a loop of double exps over the vocabulary cost
        // ~0.5 ms a token, on the engine thread); NaN and infinite logits weigh nothing in it.
        const float temp = s.params.sampling.temperature > 0 ? s.params.sampling.temperature : 1.0f;
        const float mx = max_finite(logits, n_vocab);
        lp_weights_.resize(static_cast<size_t>(n_vocab));
        const double z = exp_shifted(logits, mx, 1.0f / temp, lp_weights_.data(), n_vocab);
        const float log_z = static_cast<float>(std::log(z)) + mx / temp;
        TokenLogprob lp;
        lp.token = token;
        lp.logprob = logits[token] / temp - log_z;
        const int k = std::min(s.params.top_logprobs, n_vocab);
        if (k > 0) {
            // The k largest logits (ties to the lower id): only those at or above a floor that
            // at least k logits reach (sampler.h) are compared, not the whole vocabulary.
            const float floor = top_k_logit_floor(logits, n_vocab, k, lp_chunks_);
            lp_ids_.resize(static_cast<size_t>(n_vocab));
            const int64_t m = ids_at_or_above(logits, n_vocab, floor, lp_ids_.data());
            std::vector<std::pair<float, int32_t>> best;
            best.reserve(static_cast<size_t>(m));
            for (int64_t j = 0; j < m; ++j) best.emplace_back(logits[lp_ids_[j]], lp_ids_[j]);
            const auto first = [](const auto& a, const auto& b) {
                return a.first > b.first || (a.first == b.first && a.second < b.second);
            };
            const size_t kk = std::min(best.size(), static_cast<size_t>(k));
            std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(kk), best.end(), first);
            best.resize(kk);
            for (const auto& [l, i] : best) lp.top.emplace_back(i, l / temp - log_z);
        }
        ev.logprobs.push_back(std::move(lp));
    }

    const bool eog = !s.params.ignore_eos && tok.is_eog(token);
    if (eog) {
        if (!ev.logprobs.empty()) s.sink(std::move(ev));
        finish(s, FinishReason::kStop);
        return;
    }
    TextStream::Delta d = s.text->push(token);
    ev.text = std::move(d.text);
    s.sink(std::move(ev));
    if (d.stopped) {
        s.stop_matched = std::move(d.matched);
        finish(s, FinishReason::kStop);
    } else if (static_cast<int>(s.tokens.size()) >= s.max_total) {
        finish(s, FinishReason::kLength);
    }
}

void Engine::admit() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        while (!incoming_.empty()) {
            waiting_.push_back(std::move(incoming_.front()));
            incoming_.pop_front();
        }
    }
    // Cancelled while waiting: end them without touching the model.
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        const bool expired = (*it)->expired(std::chrono::steady_clock::now());
        if ((*it)->handle->cancelled() || expired) {
            finish(**it, expired ? FinishReason::kLength : FinishReason::kCancelled);
            n_waiting_.fetch_sub(1);
            it = waiting_.erase(it);
        } else {
            ++it;
        }
    }
    // First come, first served, while there is a free slot and KV room for what the prompt
    // needs beyond its cached prefix, plus its first new token. Beside running sequences, a
    // newcomer must also leave one block per running sequence (they grow as they decode), so
    // that admitting it does not immediately preempt someone.
    const int bs = opts_.block_size;
    std::vector<int32_t> matched;
    while (!waiting_.empty() && static_cast<int>(running_.size()) < opts_.n_parallel) {
        Seq& s = *waiting_.front();
        const int n_fill = s.n_fill();
        matched.clear();
        if (s.caching(opts_)) {
            // What is left of the prompt to compute must be none or two tokens or more, so the
            // prompt's last position is computed in a chunk, as in a cold prefill (engine.h).
            const int max_tokens = s.n_generated > 0 ? n_fill : n_fill - 2;
            if (max_tokens >= bs) {
                kv_->match_prefix(std::span<const int32_t>(s.tokens.data(), n_fill), max_tokens / bs, &matched);
            }
            while (!matched.empty() && static_cast<int>(matched.size()) * bs > s.n_prompt - 2 &&
                   static_cast<int>(matched.size()) * bs < s.n_prompt) {
                kv_->release(matched.back());
                matched.pop_back();
            }
        }
        const int n_matched = static_cast<int>(matched.size());
        const int need = (n_fill + 1 + bs - 1) / bs - n_matched;
        const int headroom = static_cast<int>(running_.size());
        if (!kv_->can_allocate(need + headroom)) {
            for (auto it = matched.rbegin(); it != matched.rend(); ++it) kv_->release(*it);
            break;
        }
        if (!s.admitted) {
            s.admitted = true;
            s.n_cached = n_matched * bs;
            n_prompt_tokens_.fetch_add(s.n_prompt, std::memory_order_relaxed);
            n_requests_.fetch_add(1, std::memory_order_relaxed);
            if (s.caching(opts_)) {
                prefix_lookups_.fetch_add(1, std::memory_order_relaxed);
                prefix_lookup_tokens_.fetch_add(s.n_prompt, std::memory_order_relaxed);
                prefix_hit_tokens_.fetch_add(s.n_cached, std::memory_order_relaxed);
            }
            s.sampler = std::make_unique<Sampler>(s.params.sampling, model_->forward_model().n_vocab());
            s.text = std::make_unique<TextStream>(*model_->tokenizer, s.params.stop, s.params.render_special);
            if (s.params.grammar) {
                s.matcher = std::make_unique<grammar::Matcher>(grammar_runtime(s.params.grammar, s.params.render_special));
            }
        }
        s.kv = std::make_unique<SeqKv>(kv_.get());
        s.kv->adopt(matched);
        CHECK(s.kv->reserve(n_fill + 1).is_ok());
        s.n_in_kv = n_matched * bs;
        s.n_published = n_matched;
        s.chain = n_matched > 0 ? matched.back() : -1;
        s.chain_epoch = n_matched > 0 ? kv_->epoch(s.chain) : 0;
        s.preempted = false;
        s.order = next_order_++;
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
        n_waiting_.fetch_sub(1);
    }
    update_gauges();
}

// A step whose draft candidates were all priced out: the draft model's engine-wide rate, when
// below the prior, drifts back up toward it, as a sequence's estimate does (after a bad
// stretch, or sampled or constrained requests, it would price the draft model out for every
// later request, with no trial to show it recovered). A rate above the prior stays: steps
// without candidates (requests that opt out) or priced out for their cost say nothing of it.
void Engine::drift_model_rate() {
    if (!draft_ || model_rate() >= kPriorAccept) return;
    model_hits_ *= 0.97;
    model_trials_ *= 0.97;
    draft_rate_.store(model_rate(), std::memory_order_relaxed);
}

double Engine::model_rate() const {
    return (model_hits_ + kPriorAccept * kPriorTrials) / (model_trials_ + kPriorTrials);
}

// Speculative decoding: the decoding sequences (the first n_decode entries of the batch) draft
// tokens by prompt lookup, from what is left of the step's token budget. Which draft tokens
// are verified is priced: draft token j of a sequence is accepted with probability alpha^j
// (alpha: that sequence's decayed acceptance rate), so tokens are taken in that order, most
// likely first, and the step keeps the prefix of that order that maximises its expected
// output per second, (tokens out + sum of the probabilities) / predicted time. A sequence
// running alone where a second token is nearly free drafts even at low acceptance; 16 running
// sequences (a step bound by arithmetic) draft only what is almost certain.
// Each draft token is one more one-token entry after every sequence's own ones, at the next
// position over the same blocks, so the forward computes it exactly as a decode step would
// (model.h), and its logits row follows the rows of the sequences' own entries
// (Seq::draft_row0). KV room for drafts is taken only where the pool keeps a block for every
// running sequence.
void Engine::add_drafts(int n_decode, int budget) {
    const size_t n_main = batch_.seqs.size();
    for (size_t i = 0; i < n_main; ++i) in_batch_[i]->draft.clear();
    int n_rows = 0;
    for (const BatchSeq& b : batch_.seqs) n_rows += b.want_logits ? 1 : 0;
    const int n_tokens = static_cast<int>(batch_.tokens.size());
    if ((!draft_ && opts_.spec_ngram <= 0) || opts_.draft_max <= 0 || n_decode == 0 || budget <= 0) return;
    const double t_plain = opts_.spec_unpriced ? 1 : step_cost_.predict(n_tokens);
    if (t_plain <= 0) return;  // no step timed yet
    // Candidates: each sequence's lookup, up to its limits.
    using Cand = DraftCandidate;
    std::vector<Cand>& cands = draft_cands_;
    cands.clear();
    // A draft model's acceptance is much the same from one request to the next: a sequence
    // without history starts from the engine's recent rate (prompt lookup's depends on the
    // text: its prior is fixed).
    const double prior = draft_ ? model_rate() : kPriorAccept;
    for (int i = 0; i < n_decode; ++i) {
        Seq& s = *in_batch_[i];
        const bool allowed = s.params.draft_max != 0;
        int k_max = s.params.draft_max > 0 ? std::min(s.params.draft_max, opts_.draft_max) : opts_.draft_max;
        // It emits at most max_total - tokens tokens: the step's own one, then drafts.
        k_max = std::min({k_max, budget, s.max_total - static_cast<int>(s.tokens.size()) - 1});
        const double alpha = (s.spec_hits + prior * kPriorTrials) / (s.spec_trials + kPriorTrials);
        if (draft_) {
            // The draft model proposes as many as the step takes (model_drafts, below), within
            // its own context.
            if (!allowed || k_max <= 0 ||
                static_cast<int64_t>(s.tokens.size()) + k_max > draft_ctx_ || s.d_off) {
                // A sequence that will not draft soon gives its draft KV back.
                if (!allowed || s.d_off || k_max <= 0) s.drop_draft_kv();
                drift_to_prior(s);
                continue;
            }
            cands.push_back({&s, alpha, alpha, 0, k_max});
            continue;
        }
        if (allowed && k_max > 0) ngram_draft(s.tokens, opts_.spec_ngram, k_max, &s.draft);
        if (s.draft.empty()) {
            drift_to_prior(s);
            continue;
        }
        cands.push_back({&s, alpha, alpha, 0, static_cast<int>(s.draft.size())});
    }
    if (cands.empty()) return;
    // Most likely draft tokens first; keep the best prefix of that order.
    std::vector<Seq*>& order = draft_order_;
    order.clear();
    double out = n_rows, best_rate = n_rows / t_plain;
    size_t best_len = 0;
    // With a draft model, draft token j of a sequence needs the sequence in the draft model's
    // j-th step: what the steps cost (t_draft) grows with how many sequences each one holds.
    int round_seqs[StepCost::kMax + 1] = {};
    double t_draft = 0;
    while (static_cast<int>(order.size()) < budget && n_tokens + static_cast<int>(order.size()) < StepCost::kMax) {
        Cand* c = nullptr;
        for (Cand& x : cands) {
            if (x.taken < x.limit && (!c || x.p > c->p)) c = &x;
        }
        if (!c) break;
        out += c->p;
        c->p *= c->alpha;
        ++c->taken;
        order.push_back(c->s);
        if (draft_ && c->taken <= StepCost::kMax) {
            const int n = round_seqs[c->taken]++;
            t_draft += draft_cost_.predict(n + 1) - draft_cost_.predict(n);
        }
        const double rate = out / (step_cost_.predict(n_tokens + static_cast<int>(order.size())) + t_draft);
        if (rate > best_rate || opts_.spec_unpriced) {
            best_rate = rate;
            best_len = order.size();
        }
    }
    for (Cand& c : cands) c.taken = 0;
    for (size_t i = 0; i < best_len; ++i) {
        for (Cand& c : cands) c.taken += c.s == order[i] ? 1 : 0;
    }
    if (best_len == 0) drift_model_rate();
    // A draft priced out is no trial either: without the drift a sequence whose first drafts
    // failed would never be tried again (its estimate only moves on trials), however well
    // its lookups would now do (a reply that falls into a loop after a bad start).
    for (Cand& c : cands) {
        if (c.taken == 0) drift_to_prior(*c.s);
    }
    if (draft_) model_drafts();
    const int bs = opts_.block_size;
    draft_owner_.clear();
    for (Cand& c : cands) {
        Seq& s = *c.s;
        int k = std::min(c.taken, static_cast<int>(s.draft.size()));
        const int need = (s.n_in_kv + 1 + k + bs - 1) / bs - static_cast<int>(s.kv->blocks().size());
        if (k > 0 && need > 0 && kv_->can_allocate(need + static_cast<int>(running_.size()))) {
            (void)s.kv->reserve(s.n_in_kv + 1 + k);
        }
        k = std::max(0, std::min(k, s.kv->capacity() - s.n_in_kv - 1));
        s.draft.resize(k);
        s.draft_row0 = n_rows;
        for (int j = 0; j < k; ++j) {
            BatchSeq b;
            b.i_begin = static_cast<int>(batch_.tokens.size());
            b.n_tokens = 1;
            b.n_past = s.n_in_kv + 1 + j;
            batch_.tokens.push_back(s.draft[j]);
            batch_.seqs.push_back(b);
            draft_owner_.push_back(&s);
            ++n_rows;
        }
    }
    // Taking blocks for drafts may have moved a sequence's block table.
    for (size_t i = 0; i < batch_.seqs.size(); ++i) {
        const Seq& o = i < n_main ? *in_batch_[i] : *draft_owner_[i - n_main];
        batch_.seqs[i].block_table = o.kv->blocks().data();
        batch_.seqs[i].n_blocks = static_cast<int>(o.kv->blocks().size());
    }
}

// Appends tokens toks[0, n) of s, from its draft KV's end on, to the draft model's batch.
void Engine::add_draft_entry(Seq& s, const int32_t* toks, int n, bool logits) {
    BatchSeq b;
    b.i_begin = static_cast<int>(draft_batch_.tokens.size());
    b.n_tokens = n;
    b.n_past = s.d_in_kv;
    b.block_table = s.dkv->blocks().data();
    b.n_blocks = static_cast<int>(s.dkv->blocks().size());
    b.want_logits = logits;
    draft_batch_.tokens.insert(draft_batch_.tokens.end(), toks, toks + n);
    draft_batch_.seqs.push_back(b);
}

// The draft model's proposals for the candidates add_drafts chose (DraftCandidate::taken
// tokens each): a first draft step in which each catches up on the tokens its draft KV lacks
// (usually the last one or two: the step's own token, and the last accepted draft token) and
// yields its first draft token, then one step per further token, each feeding the sequences
// the token before, all greedy. A sequence too far behind (a long prompt, or a reply that
// drafted nothing for a while) catches up in chunks over the step budget, drafting only once
// level, after the sequences that are level. In a full draft pool a sequence drafts what its
// blocks allow, and one that cannot take its next tokens gives its blocks back (kept, they
// would stall every sequence at its next block boundary). Leaves the tokens in Seq::draft
// (taken or fewer); the target verifies them as any draft.
void Engine::model_drafts() {
    ForwardModel& d = draft_->forward_model();
    const int n_vocab = d.n_vocab();
    const int budget = std::min(opts_.max_batch_tokens, d.max_batch_tokens());
    std::vector<Seq*>& active = draft_active_;
    const auto run = [&]() -> bool {
        const auto t0 = std::chrono::steady_clock::now();
        const Status st = d.forward(draft_batch_, *draft_kv_, draft_logits_);
        if (!st.is_ok()) {
            FERROX_LOG_WARN("draft model step failed: %s", st.message().c_str());
            return false;
        }
        draft_cost_.observe(static_cast<int>(draft_batch_.tokens.size()),
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return true;
    };
    const auto propose = [&](Seq& s, int row) {
        const float* l = draft_logits_.data() + static_cast<size_t>(row) * n_vocab;
        s.draft.push_back(static_cast<int32_t>(argmax_first(l, draft_vocab_)));
    };
    draft_batch_.tokens.clear();
    draft_batch_.seqs.clear();
    active.clear();
    for (DraftCandidate& c : draft_cands_) c.s->draft.clear();
    int used = 0;
    // Sequences one or two tokens behind first (they draft this step), then those catching up
    // on a prompt, in chunks over what the step budget leaves.
    constexpr int kNearlyLevel = 8;
    for (int pass = 0; pass < 2; ++pass) {
        for (DraftCandidate& c : draft_cands_) {
            Seq& s = *c.s;
            if (c.taken == 0) continue;
            const int n = static_cast<int>(s.tokens.size());
            begin_draft_kv(s, n - 1);
            if ((n - s.d_in_kv <= kNearlyLevel) != (pass == 0)) continue;
            const int chunk = std::min(n - s.d_in_kv, budget - used);
            if (chunk <= 0) {
                c.taken = 0;
                continue;
            }
            // A token the draft model lacks (the target's vocabulary may be up to 128 longer: a
            // token-id prompt, a special token of a fine-tuned target): no drafts for this one.
            const int32_t* toks = s.tokens.data() + s.d_in_kv;
            if (std::any_of(toks, toks + chunk, [&](int32_t t) { return t < 0 || t >= n_vocab; })) {
                s.d_off = true;
                s.drop_draft_kv();
                c.taken = 0;
                continue;
            }
            const bool level = s.d_in_kv + chunk == n;
            // A full draft pool: draft what the blocks held allow; a sequence that cannot even
            // take its next tokens gives its blocks back, so that the others can go on drafting.
            if (!s.dkv->reserve(level ? n + c.taken - 1 : s.d_in_kv + chunk).is_ok()) {
                const int room = s.dkv->capacity() - s.d_in_kv;
                if (room <= 0 || (level && room < chunk)) {
                    s.drop_draft_kv();
                    c.taken = 0;
                    continue;
                }
                if (level) c.taken = std::min(c.taken, room - chunk + 1);  // else: catch up on what fits
            }
            const int take = std::min(chunk, s.dkv->capacity() - s.d_in_kv);
            if (take < chunk || !level) c.taken = 0;
            add_draft_entry(s, toks, take, take == chunk && level);
            used += take;
            active.push_back(&s);
        }
    }
    if (active.empty()) return;
    if (!run()) {
        for (Seq* s : active) s->drop_draft_kv();
        for (DraftCandidate& c : draft_cands_) c.taken = 0;
        return;
    }
    int row = 0;
    for (size_t i = 0; i < active.size(); ++i) {
        Seq& s = *active[i];
        s.d_in_kv += draft_batch_.seqs[i].n_tokens;
        publish_draft_blocks(s);
        if (draft_batch_.seqs[i].want_logits) propose(s, row++);
    }
    // One step per further draft token, for the sequences that take it.
    for (int j = 1;; ++j) {
        draft_batch_.tokens.clear();
        draft_batch_.seqs.clear();
        active.clear();
        for (DraftCandidate& c : draft_cands_) {
            Seq& s = *c.s;
            if (c.taken <= j || static_cast<int>(s.draft.size()) != j) continue;
            add_draft_entry(s, &s.draft.back(), 1, true);
            active.push_back(&s);
        }
        if (active.empty()) return;
        if (!run()) return;  // the drafts so far stand
        for (size_t i = 0; i < active.size(); ++i) {
            ++active[i]->d_in_kv;
            propose(*active[i], static_cast<int>(i));
        }
    }
}

// The prompt chunks of this step (entries [n_decode, n_main) of the batch) fed to the draft
// model as well, so that a sequence's draft KV keeps level with the target's while its prompt
// is computed: it drafts from its first decoding step, and no decoding step carries a long
// catch-up (up to a step budget of draft forward a step, for as many steps as the prompt had).
// The draft model computes as many tokens of a sequence as the target does, so a prompt step
// costs the two models' ratio more, and no more. Best effort: a sequence the draft model
// cannot take, or whose blocks the draft pool cannot spare (one block is kept for each running
// sequence), or one that starts behind (a prompt found in the prefix cache), catches up later
// in model_drafts.
void Engine::draft_prefills(int n_decode, int n_main) {
    if (opts_.draft_max <= 0) return;
    ForwardModel& d = draft_->forward_model();
    const int n_vocab = d.n_vocab();
    const int bs = opts_.block_size;
    int budget = std::min(opts_.max_batch_tokens, d.max_batch_tokens());
    draft_batch_.tokens.clear();
    draft_batch_.seqs.clear();
    std::vector<Seq*>& active = draft_active_;
    active.clear();
    for (int i = n_decode; i < n_main && budget > 0; ++i) {
        Seq& s = *in_batch_[i];
        const int end = s.n_in_kv + batch_.seqs[i].n_tokens;  // the target's KV after this step
        if (s.params.draft_max == 0 || s.d_off || end >= draft_ctx_) continue;
        begin_draft_kv(s, std::min(end, static_cast<int>(s.tokens.size()) - 1));
        // As many tokens as the target computes for it (a prompt found in the prefix cache
        // leaves the draft model behind: its catch-up must not delay the first token).
        const int n = std::min({end - s.d_in_kv, batch_.seqs[i].n_tokens, budget});
        if (n <= 0) continue;
        const int32_t* toks = s.tokens.data() + s.d_in_kv;
        if (std::any_of(toks, toks + n, [&](int32_t t) { return t < 0 || t >= n_vocab; })) {
            s.d_off = true;  // as model_drafts: a token the draft model lacks
            s.drop_draft_kv();
            continue;
        }
        const int need = (s.d_in_kv + n + bs - 1) / bs - static_cast<int>(s.dkv->blocks().size());
        if (need > 0 && !draft_kv_->can_allocate(need + static_cast<int>(running_.size()))) continue;
        if (!s.dkv->reserve(s.d_in_kv + n).is_ok()) continue;
        add_draft_entry(s, toks, n, /*logits=*/false);
        active.push_back(&s);
        budget -= n;
    }
    if (active.empty()) return;
    // Not timed into draft_cost_: that prices draft steps, and a prompt chunk timed first would
    // make the small steps look dear before any was timed (and so never chosen and timed).
    const Status st = d.forward(draft_batch_, *draft_kv_, draft_logits_);
    if (!st.is_ok()) {
        FERROX_LOG_WARN("draft model step failed: %s", st.message().c_str());
        for (Seq* s : active) s->drop_draft_kv();
        return;
    }
    for (size_t i = 0; i < active.size(); ++i) {
        active[i]->d_in_kv += draft_batch_.seqs[i].n_tokens;
        publish_draft_blocks(*active[i]);
    }
}

// One forward step over every running sequence. Returns false when there was nothing to do.
bool Engine::step() {
    const auto now = std::chrono::steady_clock::now();
    for (auto& s : running_) {
        if (s->handle->cancelled()) finish(*s, FinishReason::kCancelled);
        if (s->expired(now)) finish(*s, FinishReason::kLength);  // the answer so far, cut
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }),
                   running_.end());
    if (running_.empty()) {
        update_gauges();  // the last sequences were cancelled: the engine now idles
        return false;
    }

    // Every decoding sequence needs a slot for its next token: the oldest take blocks first and
    // the newest are preempted while the pool has none. Preempted sequences go back to the head
    // of the queue, oldest first.
    for (auto& sp : running_) {
        if (!sp->preempted && !sp->prefilling()) grow(*sp);
    }
    std::vector<std::unique_ptr<Seq>> back;
    for (auto& sp : running_) {
        if (sp->preempted) back.push_back(std::move(sp));
    }
    if (!back.empty()) {
        running_.erase(std::remove(running_.begin(), running_.end(), nullptr), running_.end());
        for (auto it = back.rbegin(); it != back.rend(); ++it) waiting_.push_front(std::move(*it));
        n_waiting_.fetch_add(static_cast<int>(back.size()));
        update_gauges();
        if (running_.empty()) return true;
    }

    batch_.tokens.clear();
    batch_.seqs.clear();
    std::vector<Seq*>& in_batch = in_batch_;  // reused: no allocation per step
    in_batch.clear();
    int budget = opts_.max_batch_tokens;
    // Decoding sequences first (one token each), then prefill chunks in arrival order.
    int n_decode = 0;  // entries of pass 0
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) n_decode = static_cast<int>(batch_.seqs.size());
        for (auto& sp : running_) {
            Seq& s = *sp;
            if (s.prefilling() != (pass == 1) || budget <= 0) continue;
            int n = 1;
            if (pass == 1 && s.n_in_kv < s.n_prompt) {
                const int rest = s.n_prompt - s.n_in_kv;
                n = std::min(budget, rest);
                // A prompt is computed in chunks of two or more tokens, so every position sums
                // attention in the prefill order, however the budget splits it (engine.h).
                // (Only a step budget of 2 cannot split an odd remainder into such chunks:
                // then the last token goes alone rather than never.)
                if (n < rest && rest - n == 1 && n > 2) --n;
                if (n < 2 && rest > 1) continue;
            }
            // (A preempted sequence replays its generated tokens one per step, as they were
            // first computed, so its KV and its next tokens are bit for bit what they would
            // have been without the preemption.)
            CHECK(s.kv->capacity() >= s.n_in_kv + n);
            BatchSeq bsq;
            bsq.i_begin = static_cast<int>(batch_.tokens.size());
            bsq.n_tokens = n;
            bsq.n_past = s.n_in_kv;
            bsq.block_table = s.kv->blocks().data();
            bsq.n_blocks = static_cast<int>(s.kv->blocks().size());
            // A recomputed (preempted) sequence has its next token already.
            bsq.want_logits = pass == 0 || (s.n_in_kv + n == s.n_fill() && s.n_generated == 0);
            batch_.tokens.insert(batch_.tokens.end(), s.tokens.begin() + s.n_in_kv,
                                 s.tokens.begin() + s.n_in_kv + n);
            batch_.seqs.push_back(bsq);
            in_batch.push_back(&s);
            budget -= n;
        }
    }
    if (batch_.seqs.empty()) return true;
    const int n_main = static_cast<int>(batch_.seqs.size());
    add_drafts(n_decode, budget);
    if (draft_) draft_prefills(n_decode, n_main);

    // Masks not cached yet are computed beside the forward pass.
    bool masks_launched = false;
    if (mask_thread_.joinable()) {
        std::lock_guard<std::mutex> lk(mask_mu_);
        mask_jobs_.clear();
        for (size_t i = 0; i < in_batch.size(); ++i) {
            Seq& s = *in_batch[i];
            if (s.matcher && batch_.seqs[i].want_logits && !s.matcher->mask_ready()) mask_jobs_.push_back(s.matcher.get());
        }
        if (!mask_jobs_.empty()) {
            mask_busy_ = masks_launched = true;
            mask_cv_.notify_all();
        }
    }
    const auto t_forward = std::chrono::steady_clock::now();
    Status st = model_->forward_model().forward(batch_, *kv_, logits_);
    const auto forward_time = std::chrono::steady_clock::now() - t_forward;
    forward_ns_step_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(forward_time).count());
    // Decode-sized steps price the draft tokens (prompt chunks run other kernels).
    if (st.is_ok()) {
        step_cost_.observe(static_cast<int>(batch_.tokens.size()), std::chrono::duration<double>(forward_time).count());
    }
    if (masks_launched) {
        std::unique_lock<std::mutex> lk(mask_mu_);
        mask_cv_.wait(lk, [&] { return !mask_busy_; });
    }
    const int n_vocab = model_->forward_model().n_vocab();
    // Each sequence's first token of the step is drawn on the forward pass's threads, one
    // sequence at a time each (every sequence has its own sampler; a grammar's matcher shares
    // caches, so constrained sequences draw below, in order). The rest is in order: emitting
    // ends sequences, and a draft's next row waits on the token before it.
    pre_.assign(in_batch.size(), -1);
    if (st.is_ok()) {
        pre_rows_.clear();
        int r = 0;
        for (size_t i = 0; i < in_batch.size(); ++i) {
            if (!batch_.seqs[i].want_logits) continue;
            const Seq& s = *in_batch[i];
            if (!s.done && s.params.max_tokens != 0 && !s.matcher) pre_rows_.push_back({static_cast<int>(i), r});
            ++r;
        }
        if (pre_rows_.size() > 1) {
            model_->forward_model().parallel_for(static_cast<int>(pre_rows_.size()), [&](int k) {
                const auto [i, r] = pre_rows_[static_cast<size_t>(k)];
                Seq& s = *in_batch[static_cast<size_t>(i)];
                const std::span<float> l(logits_.data() + static_cast<size_t>(r) * n_vocab, n_vocab);
                pre_[static_cast<size_t>(i)] = s.sampler->sample(l, s.tokens);
            });
        }
    }
    int row = 0;
    for (size_t i = 0; i < in_batch.size(); ++i) {
        Seq& s = *in_batch[i];
        const BatchSeq& bsq = batch_.seqs[i];
        if (!st.is_ok()) {
            finish(s, FinishReason::kError, st);
            continue;
        }
        s.n_in_kv += bsq.n_tokens;
        publish_blocks(s);
        if (!bsq.want_logits) {
            EngineEvent ev;
            ev.kind = EngineEvent::Kind::kProgress;
            s.sink(std::move(ev));
            continue;
        }
        float* lg = logits_.data() + static_cast<size_t>(row++) * n_vocab;
        if (s.done) continue;
        if (s.params.max_tokens == 0) {  // only fill the cache (llama.cpp's n_predict 0)
            finish(s, FinishReason::kLength);
            continue;
        }
        // The next token from a logits row (`drawn`: already sampled from it above); -1 when
        // the sequence ended in an error.
        const auto next = [&](float* row_logits, int32_t drawn = -1) -> int32_t {
            const std::span<float> l(row_logits, n_vocab);
            if (s.matcher && !s.matcher->apply(l)) {
                finish(s, FinishReason::kError, invalid_argument("the grammar allows no token of this vocabulary here"));
                return -1;
            }
            const int32_t tok = drawn >= 0 ? drawn : s.sampler->sample(l, s.tokens);
            if (s.matcher && !s.matcher->accept_token(tok)) {  // (the mask excluded it: not reached)
                finish(s, FinishReason::kError, internal_error("the sampled token breaks the grammar"));
                return -1;
            }
            emit_token(s, tok, row_logits);
            if (!s.done && s.matcher && s.matcher->must_end()) finish(s, FinishReason::kStop);
            return tok;
        };
        int32_t tok = next(lg, pre_[i]);
        // Draft tokens: while the token just drawn is the next draft token, the draft position's
        // KV row and logits are the ones plain decoding would have computed; draw from them.
        const int k = static_cast<int>(s.draft.size());
        if (k == 0) continue;
        int accepted = 0;
        while (!s.done && accepted < k && tok == s.draft[accepted]) {
            ++accepted;
            ++s.n_in_kv;
            tok = next(logits_.data() + static_cast<size_t>(s.draft_row0 + accepted - 1) * n_vocab);
        }
        const bool rejected = !s.done && accepted < k;
        constexpr double kDecay = 0.85;
        s.spec_trials = s.spec_trials * kDecay + accepted + (rejected ? 1 : 0);
        s.spec_hits = s.spec_hits * kDecay + accepted;
        if (draft_) {
            constexpr double kModelDecay = 0.98;
            model_trials_ = model_trials_ * kModelDecay + accepted + (rejected ? 1 : 0);
            model_hits_ = model_hits_ * kModelDecay + accepted;
            draft_rate_.store(model_rate(), std::memory_order_relaxed);
        }
        spec_drafted_.fetch_add(static_cast<uint64_t>(k), std::memory_order_relaxed);
        spec_accepted_.fetch_add(static_cast<uint64_t>(accepted), std::memory_order_relaxed);
        s.draft.clear();
        if (accepted > 0 && !s.done) publish_blocks(s);
    }
    // Draft KV holds a sequence's tokens up to its first rejected draft token.
    for (Seq* s : in_batch) {
        if (s->dkv) s->d_in_kv = std::min(s->d_in_kv, s->n_in_kv);
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }),
                   running_.end());
    update_gauges();
    return true;
}

void Engine::run() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            // waiting_ and running_ belong to this thread; reading them here is safe.
            cv_.wait(lk, [&] {
                return stop_ || !incoming_.empty() || !running_.empty() || !waiting_.empty();
            });
            if (stop_) break;
        }
        const auto t0 = std::chrono::steady_clock::now();
        forward_ns_step_ = 0;
        admit();
        step();
        if (forward_ns_step_ > 0) {
            const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
            step_ns_.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
            forward_ns_.fetch_add(forward_ns_step_, std::memory_order_relaxed);
            n_steps_.fetch_add(1, std::memory_order_relaxed);
        }
    }
    // Shutdown: every request still known gets its kDone.
    admit();
    for (auto& s : running_) finish(*s, FinishReason::kCancelled);
    for (auto& s : waiting_) finish(*s, FinishReason::kCancelled);
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& s : incoming_) finish(*s, FinishReason::kCancelled);
    running_.clear();
    waiting_.clear();
    incoming_.clear();
}

}  // namespace ferrox
