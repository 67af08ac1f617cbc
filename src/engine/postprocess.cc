#include "engine/postprocess.h"

#include <algorithm>
#include <cmath>

#include "engine/scheduler.h"
#include "engine/spec/speculation.h"
#include "kernels/ops.h"

namespace ferrox {

Postprocessor::Postprocessor(const Tokenizer& tokenizer, ForwardModel& model, EngineMetrics& metrics,
                             const EngineClock& clock, std::function<void()> on_blocks_freed)
    : tok_(tokenizer),
      model_(model),
      metrics_(metrics),
      clock_(clock),
      on_blocks_freed_(std::move(on_blocks_freed)),
      n_vocab_(model.n_vocab()) {}

Postprocessor::~Postprocessor() {
    {
        std::lock_guard<std::mutex> lk(mask_mu_);
        mask_stop_ = true;
    }
    mask_cv_.notify_all();
    if (mask_thread_.joinable()) mask_thread_.join();
}

void Postprocessor::mask_main() {
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

void Postprocessor::prepare(Sequence& s) {
    const SamplingParams& sp = s.params.sampling;
    std::shared_ptr<const DryBreakers> breakers;
    if (sp.dry_multiplier != 0.0f && sp.dry_base >= 1.0f && sp.dry_penalty_last_n != 0 && sp.mirostat == 0) {
        breakers = dry_breakers(sp.dry_sequence_breakers);
    }
    s.sampler = std::make_unique<Sampler>(sp, n_vocab_, std::move(breakers));
    s.text = std::make_unique<TextStream>(tok_, s.params.stop, s.params.render_special);
    if (s.params.grammar) {
        s.matcher = std::make_unique<grammar::Matcher>(grammar_runtime(s.params.grammar, s.params.render_special));
    }
}

std::shared_ptr<grammar::GrammarRuntime> Postprocessor::grammar_runtime(
    const std::shared_ptr<const grammar::Grammar>& g, bool special) {
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
        std::vector<std::string> bytes(static_cast<size_t>(n_vocab_));
        for (int32_t id = 0; id < n_vocab_; ++id) {
            if (!tok_.is_eog(id)) bytes[id] = std::string(tok_.token_to_piece(id, special));
        }
        vocab = std::make_shared<grammar::TokenVocab>(std::move(bytes), tok_.eog_ids());
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

std::shared_ptr<const DryBreakers> Postprocessor::dry_breakers(const std::vector<std::string>& breakers) {
    for (const auto& [list, b] : dry_breakers_) {
        if (list == breakers) return b;
    }
    auto b = build_dry_breakers(
        breakers, n_vocab_, [&](int32_t id) { return tok_.token_to_piece(id, true); },
        [&](std::string_view text) { return tok_.encode(text, false, false); });
    constexpr size_t kKeep = 8;
    if (dry_breakers_.size() >= kKeep) dry_breakers_.erase(dry_breakers_.begin());
    dry_breakers_.emplace_back(breakers, b);
    return b;
}

void Postprocessor::launch_masks(const BatchPlan& plan) {
    masks_launched_ = false;
    if (!mask_thread_.joinable()) return;
    std::lock_guard<std::mutex> lk(mask_mu_);
    mask_jobs_.clear();
    for (int i = 0; i < plan.n_main; ++i) {
        Sequence& s = *plan.owner[static_cast<size_t>(i)];
        if (s.matcher && plan.batch.seqs[static_cast<size_t>(i)].want_logits && !s.matcher->mask_ready()) {
            mask_jobs_.push_back(s.matcher.get());
        }
    }
    if (!mask_jobs_.empty()) {
        mask_busy_ = masks_launched_ = true;
        mask_cv_.notify_all();
    }
}

void Postprocessor::wait_masks() {
    if (!masks_launched_) return;
    std::unique_lock<std::mutex> lk(mask_mu_);
    mask_cv_.wait(lk, [&] { return !mask_busy_; });
    masks_launched_ = false;
}

// Each sequence's first token of the step, drawn on the forward pass's threads, one sequence at
// a time each (every sequence has its own sampler; a grammar's matcher shares caches, so
// constrained sequences draw in order in next_token). The rest is in order: emitting ends
// sequences, and a draft's next row waits on the token before it.
void Postprocessor::sample_first_tokens(const BatchPlan& plan, std::span<float> logits) {
    pre_.assign(static_cast<size_t>(plan.n_main), -1);
    pre_rows_.clear();
    int r = 0;
    for (int i = 0; i < plan.n_main; ++i) {
        const BatchSeq& b = plan.batch.seqs[static_cast<size_t>(i)];
        if (!b.want_logits) continue;
        r += b.n_rows();
        const Sequence& s = *plan.owner[static_cast<size_t>(i)];
        if (b.all_logits && b.n_past + b.n_tokens < s.n_fill()) continue;  // a prompt chunk before the last
        if (!s.done && s.params.max_tokens != 0 && !s.matcher) pre_rows_.push_back({i, r - 1});
    }
    if (pre_rows_.size() < 2) return;
    model_.parallel_for(static_cast<int>(pre_rows_.size()), [&](int k) {
        const auto [i, row] = pre_rows_[static_cast<size_t>(k)];
        Sequence& s = *plan.owner[static_cast<size_t>(i)];
        const std::span<float> l(logits.data() + static_cast<size_t>(row) * n_vocab_, static_cast<size_t>(n_vocab_));
        pre_[static_cast<size_t>(i)] = s.sampler->sample(l, s.tokens);
    });
}

void Postprocessor::process(BatchPlan& plan, const Status& st, std::span<float> logits, Speculation* spec,
                            Scheduler& scheduler) {
    wait_masks();
    if (st.is_ok()) sample_first_tokens(plan, logits);
    int row = 0;
    for (int i = 0; i < plan.n_main; ++i) {
        Sequence& s = *plan.owner[static_cast<size_t>(i)];
        const BatchSeq& b = plan.batch.seqs[static_cast<size_t>(i)];
        if (!st.is_ok()) {
            finish(s, FinishReason::kError, st);
            continue;
        }
        s.n_in_kv += b.n_tokens;
        scheduler.publish_blocks(s);
        if (b.all_logits && !s.done) {
            emit_prompt_logprobs(s, b, logits.data() + static_cast<size_t>(row) * n_vocab_);
        }
        row += b.n_rows();
        if (!b.want_logits || (b.all_logits && s.prefilling())) {
            if (!b.all_logits) {
                EngineEvent ev;
                ev.kind = EngineEvent::Kind::kProgress;
                s.sink(std::move(ev));
            }
            continue;
        }
        float* lg = logits.data() + static_cast<size_t>(row - 1) * n_vocab_;
        if (s.done) continue;
        if (s.params.max_tokens == 0) {  // only fill the cache (llama.cpp's n_predict 0)
            finish(s, FinishReason::kLength);
            continue;
        }
        const int32_t tok = next_token(s, lg, pre_[static_cast<size_t>(i)]);
        if (!s.spec.draft.empty()) {
            accept_drafts(s, tok, logits, spec);
            if (!s.done) scheduler.publish_blocks(s);
        }
    }
}

int32_t Postprocessor::next_token(Sequence& s, float* row, int32_t drawn) {
    const std::span<float> l(row, static_cast<size_t>(n_vocab_));
    if (s.matcher && !s.matcher->apply(l)) {
        finish(s, FinishReason::kError, invalid_argument("the grammar allows no token of this vocabulary here"));
        return -1;
    }
    const int32_t tok = drawn >= 0 ? drawn : s.sampler->sample(l, s.tokens);
    if (s.matcher && !s.matcher->accept_token(tok)) {  // (the mask excluded it: not reached)
        finish(s, FinishReason::kError, internal_error("the sampled token breaks the grammar"));
        return -1;
    }
    emit_token(s, tok, row);
    if (!s.done && s.matcher && s.matcher->must_end()) finish(s, FinishReason::kStop);
    return tok;
}

// While the token just drawn is the next draft token, the draft position's KV row and logits
// are the ones plain decoding would have computed: draw from them.
void Postprocessor::accept_drafts(Sequence& s, int32_t tok, std::span<float> logits, Speculation* spec) {
    const std::vector<int32_t>& draft = s.spec.draft;
    const int k = static_cast<int>(draft.size());
    int accepted = 0;
    // The request's own counts, before a token below may end it (its kDone carries them).
    if (!s.done) s.spec.n_drafted += k;
    while (!s.done && accepted < k && tok == draft[static_cast<size_t>(accepted)]) {
        ++accepted;
        ++s.spec.n_accepted;
        ++s.n_in_kv;
        tok = next_token(s, logits.data() + static_cast<size_t>(s.spec.draft_row0 + accepted - 1) * n_vocab_, -1);
    }
    if (spec) spec->observe(s, k, accepted, !s.done && accepted < k);
    s.spec.draft.clear();
}

// Log-probabilities of the distribution the token was drawn from: the logits after bias and
// penalties, at the sampling temperature (1 for greedy). log Z in one vector pass (a loop of
// double exps over the vocabulary cost ~0.5 ms a token, on the engine thread); NaN and
// infinite logits weigh nothing in it.
TokenLogprob Postprocessor::logprob(const Sequence& s, int32_t token, const float* logits) {
    if (!(s.params.post_sampling_probs && s.sampler)) {
        return logprob_at(token, logits, s.params.sampling.temperature > 0 ? s.params.sampling.temperature : 1.0f,
                          s.params.top_logprobs);
    }
    // The sampler's last draw was this token's (next_token emits right after it).
    TokenLogprob lp;
    lp.token = token;
    lp.logprob = std::log(s.sampler->last_prob());
    std::vector<std::pair<int32_t, float>> top;
    s.sampler->chain_probs(std::min(s.params.top_logprobs, n_vocab_), &top);
    for (const auto& [id, p] : top) lp.top.emplace_back(id, std::log(p));
    return lp;
}

TokenLogprob Postprocessor::logprob_at(int32_t token, const float* logits, float temp, int top_k) {
    const float mx = max_finite(logits, n_vocab_);
    lp_weights_.resize(static_cast<size_t>(n_vocab_));
    const double z = exp_shifted(logits, mx, 1.0f / temp, lp_weights_.data(), n_vocab_);
    const float log_z = static_cast<float>(std::log(z)) + mx / temp;
    TokenLogprob lp;
    lp.token = token;
    lp.logprob = logits[token] / temp - log_z;
    const int k = std::min(top_k, n_vocab_);
    if (k <= 0) return lp;
    // The k largest logits (ties to the lower id): only those at or above a floor that at least
    // k logits reach (sampler.h) are compared, not the whole vocabulary.
    const float floor = top_k_logit_floor(logits, n_vocab_, k, lp_chunks_);
    lp_ids_.resize(static_cast<size_t>(n_vocab_));
    const int64_t m = ids_at_or_above(logits, n_vocab_, floor, lp_ids_.data());
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
    return lp;
}

// The logprobs of the prompt tokens that the rows of an all_logits entry predict (row j, at
// position n_past + j, predicts the token after it), those not sent before (a preempted request
// recomputes its prompt), under the raw distribution: as llama.cpp's logits and vLLM's prompt
// logprobs, whatever the request's sampling.
void Postprocessor::emit_prompt_logprobs(Sequence& s, const BatchSeq& b, const float* rows) {
    EngineEvent ev;
    ev.kind = EngineEvent::Kind::kPromptLogprobs;
    for (int j = 0; j < b.n_tokens; ++j) {
        const int at = b.n_past + j + 1;  // the prompt index this row predicts
        if (at < s.n_prompt_lp || at >= s.n_prompt) continue;
        const float* row = rows + static_cast<size_t>(j) * n_vocab_;
        const int32_t tok = s.tokens[static_cast<size_t>(at)];
        ev.logprobs.push_back(logprob_at(tok, row, 1.0f, s.params.prompt_logprobs));
        int32_t above = 0;  // (vLLM's rank)
        for (int v = 0; v < n_vocab_; ++v) above += row[v] > row[tok] ? 1 : 0;
        ev.logprobs.back().rank = above + 1;
        s.n_prompt_lp = at + 1;
    }
    s.sink(std::move(ev));  // (also the chunk's progress)
}

// Emits the token drawn from `logits` (the sequence's row) and decides whether the sequence ends.
void Postprocessor::emit_token(Sequence& s, int32_t token, const float* logits) {
    const auto now = clock_();
    if (s.n_generated == 0) {
        metrics_.ttft.observe(std::chrono::duration<double>(now - s.t_submit).count());
    } else {
        metrics_.itl.observe(std::chrono::duration<double>(now - s.t_last_token).count());
    }
    s.t_last_token = now;
    s.tokens.push_back(token);
    ++s.n_generated;
    EngineMetrics::add<uint64_t>(metrics_.n_generated_tokens, 1);

    EngineEvent ev;
    ev.kind = EngineEvent::Kind::kText;
    ev.token = token;
    if (s.params.top_logprobs >= 0) ev.logprobs.push_back(logprob(s, token, logits));
    if (!s.params.ignore_eos && tok_.is_eog(token)) {
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

void Postprocessor::finish(Sequence& s, FinishReason why, Status error) {
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
    on_blocks_freed_();
    EngineEvent ev;
    ev.kind = EngineEvent::Kind::kDone;
    ev.finish = why;
    ev.error = std::move(error);
    ev.n_prompt = s.n_prompt;
    ev.n_completion = s.n_generated;
    ev.n_cached = s.n_cached;
    ev.n_draft = s.spec.n_drafted;
    ev.n_draft_accepted = s.spec.n_accepted;
    ev.stop_matched = s.stop_matched;
    s.sink(std::move(ev));
}

}  // namespace ferrox
