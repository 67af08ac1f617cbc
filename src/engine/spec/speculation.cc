#include "engine/spec/speculation.h"

#include <algorithm>

namespace ferrox {

namespace {

// While only one step size has been timed, each further token is assumed to cost this fraction
// of it: optimistic (on 2 cores a small model's extra decode token costs 0.15 to 0.45 of a
// one-token step), so that short drafts are tried and the sizes they make get timed.
constexpr double kOptimisticTokenCost = 0.15;

}  // namespace

void StepCost::observe(int n, double seconds) {
    if (n < 1 || n > kMax) return;
    t[n] = t[n] == 0 ? seconds : 0.9 * t[n] + 0.1 * seconds;
}

// A step size timed: its mean, but at most 1.2x the line through all the sizes timed (one slow
// step, a page fault or a busy machine, must not make a size look dear for good, since a size
// that looks dear is not chosen and so not timed again). A size not timed: interpolated
// between the nearest timed ones, or extended along that line (kOptimisticTokenCost while
// only one size is timed).
double StepCost::predict(int n) const {
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

void Speculation::propose(BatchPlan& plan, int n_running) {
    for (int i = 0; i < plan.n_main; ++i) plan.owner[static_cast<size_t>(i)]->spec.draft.clear();
    cands_.clear();
    if (cfg_.draft_max > 0 && plan.n_decode > 0 && plan.budget > 0) {
        const double t_plain = cfg_.unpriced ? 1 : step_cost_.predict(plan.n_tokens());
        if (t_plain > 0) {  // (0: no step timed yet)
            candidates(plan);
            if (!cands_.empty()) {
                price(plan, t_plain);
                proposer_->fill(cands_, n_running);
                add_entries(plan, n_running);
            }
        }
    }
    if (cfg_.draft_max > 0) proposer_->prefill(plan, n_running);
}

// Each decoding sequence the proposer can draft for, up to its limits.
void Speculation::candidates(const BatchPlan& plan) {
    const double prior = proposer_->prior();
    for (int i = 0; i < plan.n_decode; ++i) {
        Sequence& s = *plan.owner[static_cast<size_t>(i)];
        const bool allowed = s.params.draft_max != 0;
        int k_max = s.params.draft_max > 0 ? std::min(s.params.draft_max, cfg_.draft_max) : cfg_.draft_max;
        // It emits at most max_total - tokens tokens: the step's own one, then drafts.
        k_max = std::min({k_max, plan.budget, s.max_total - static_cast<int>(s.tokens.size()) - 1});
        const double alpha = (s.spec.hits + prior * kPriorTrials) / (s.spec.trials + kPriorTrials);
        int limit = 0;
        if (proposer_->candidate(s, allowed, k_max, &limit)) {
            cands_.push_back({&s, alpha, alpha, 0, limit});
        } else {
            drift_to_prior(s.spec);
        }
    }
}

// Sets each candidate's `taken`: the most likely draft tokens first, the prefix of that order
// with the best expected tokens per second.
void Speculation::price(const BatchPlan& plan, double t_plain) {
    const int n_tokens = plan.n_tokens();
    const int n_rows = plan.n_rows();
    order_.clear();
    double out = n_rows, best_rate = n_rows / t_plain;
    size_t best_len = 0;
    // With a draft model, draft token j of a sequence needs the sequence in the draft model's
    // j-th step: what the steps cost (t_draft) grows with how many sequences each one holds.
    int round_seqs[StepCost::kMax + 1] = {};
    double t_draft = 0;
    while (static_cast<int>(order_.size()) < plan.budget &&
           n_tokens + static_cast<int>(order_.size()) < StepCost::kMax) {
        DraftCandidate* c = nullptr;
        for (DraftCandidate& x : cands_) {
            if (x.taken < x.limit && (!c || x.p > c->p)) c = &x;
        }
        if (!c) break;
        out += c->p;
        c->p *= c->alpha;
        ++c->taken;
        order_.push_back(c->s);
        if (c->taken <= StepCost::kMax) t_draft += proposer_->marginal_cost(round_seqs[c->taken]++);
        const double rate = out / (step_cost_.predict(n_tokens + static_cast<int>(order_.size())) + t_draft);
        if (rate > best_rate || cfg_.unpriced) {
            best_rate = rate;
            best_len = order_.size();
        }
    }
    for (DraftCandidate& c : cands_) c.taken = 0;
    for (size_t i = 0; i < best_len; ++i) {
        for (DraftCandidate& c : cands_) c.taken += c.s == order_[i] ? 1 : 0;
    }
    if (best_len == 0) proposer_->priced_out();
    // A draft priced out is no trial either: without the drift a sequence whose first drafts
    // failed would never be tried again (its estimate only moves on trials), however well
    // its lookups would now do (a reply that falls into a loop after a bad start).
    for (DraftCandidate& c : cands_) {
        if (c.taken == 0) drift_to_prior(c.s->spec);
    }
}

// The chosen draft tokens as one-token entries after the main ones (their logits rows follow
// the main entries' rows: SeqSpec::draft_row0).
void Speculation::add_entries(BatchPlan& plan, int n_running) {
    const int bs = blocks_.block_size();
    int n_rows = plan.n_rows();
    for (DraftCandidate& c : cands_) {
        Sequence& s = *c.s;
        int k = std::min(c.taken, static_cast<int>(s.spec.draft.size()));
        const int need = (s.n_in_kv + 1 + k + bs - 1) / bs - static_cast<int>(s.kv->blocks().size());
        if (k > 0 && need > 0 && blocks_.can_allocate(need + n_running)) (void)s.kv->reserve(s.n_in_kv + 1 + k);
        k = std::max(0, std::min(k, s.kv->capacity() - s.n_in_kv - 1));
        s.spec.draft.resize(static_cast<size_t>(k));
        s.spec.draft_row0 = n_rows;
        for (int j = 0; j < k; ++j) plan.add(s, &s.spec.draft[static_cast<size_t>(j)], 1, s.n_in_kv + 1 + j, true);
        n_rows += k;
    }
    plan.bind_block_tables();  // taking blocks for drafts may have moved a table
}

void Speculation::observe(Sequence& s, int drafted, int accepted, bool rejected) {
    constexpr double kDecay = 0.85;
    s.spec.trials = s.spec.trials * kDecay + accepted + (rejected ? 1 : 0);
    s.spec.hits = s.spec.hits * kDecay + accepted;
    proposer_->observe(accepted, rejected);
    EngineMetrics::add<uint64_t>(metrics_.spec_drafted, static_cast<uint64_t>(drafted));
    EngineMetrics::add<uint64_t>(metrics_.spec_accepted, static_cast<uint64_t>(accepted));
}

}  // namespace ferrox
