#pragma once
// Speculative decoding, proposer-neutral: which decoding sequences draft how many tokens this
// step, and the draft entries of the batch. Each draft token is one more one-token entry after
// the step's main entries, at the next position over the sequence's own blocks, so the forward
// computes it exactly as a decode step would, and the postprocessor samples every position in
// order as plain decoding would have: the output is the same tokens with and without it.
//
// Pricing: draft token j of a sequence is accepted with probability alpha^j (alpha: that
// sequence's decayed acceptance rate), so tokens are taken in that order, most likely first,
// and the step keeps the prefix of that order that maximises its expected output per second,
// (tokens out + sum of the probabilities) / predicted time, with the step times measured by
// size (StepCost). A sequence running alone where a second token is nearly free drafts even
// at low acceptance; 16 running sequences (a step bound by arithmetic) draft only what is
// almost certain.
//
// Engine thread only.

#include <memory>
#include <vector>

#include "engine/batch_plan.h"
#include "engine/block_manager.h"
#include "engine/metrics.h"
#include "engine/spec/proposer.h"

namespace ferrox {

// What a forward step of n tokens costs (n <= kMax): a decayed mean of the steps timed with
// exactly n tokens, else scaled from the nearest timed n by a prior shape.
struct StepCost {
    static constexpr int kMax = 64;
    double t[kMax + 1] = {};  // seconds; 0: no step of n tokens timed yet
    void observe(int n, double seconds);
    double predict(int n) const;  // 0 when nothing is known
};

// The acceptance estimate of a sequence without history: a draft token is accepted with this
// probability, worth this many observed tokens.
inline constexpr double kPriorAccept = 0.6, kPriorTrials = 2;
// A step without a trial for a sequence: its acceptance estimate drifts back toward the prior,
// so a sequence whose drafts failed tries again now and then.
inline void drift_to_prior(SeqSpec& s) {
    s.hits *= 0.97;
    s.trials *= 0.97;
}

struct SpecConfig {
    int draft_max = 8;            // draft tokens per sequence and step
    bool unpriced = false;        // verify every draft token found (tests and measurements)
};

class Speculation {
public:
    Speculation(const SpecConfig& cfg, std::unique_ptr<Proposer> proposer, BlockManager& blocks,
                EngineMetrics& metrics)
        : cfg_(cfg), proposer_(std::move(proposer)), blocks_(blocks), metrics_(metrics) {}

    // Appends the step's draft entries to `plan` (from its token budget) and feeds a draft
    // model the step's prompt chunks. n_running: the running sequences (KV room for drafts is
    // taken only where the pool keeps a block for each).
    void propose(BatchPlan& plan, int n_running);
    // A forward step of n_tokens took `seconds`.
    void observe_step(int n_tokens, double seconds) { step_cost_.observe(n_tokens, seconds); }
    // s verified `drafted` draft tokens and accepted `accepted`; rejected: one was refused.
    void observe(Sequence& s, int drafted, int accepted, bool rejected);
    void after_step(const BatchPlan& plan) { proposer_->after_step(plan); }

private:
    void candidates(const BatchPlan& plan);
    void price(const BatchPlan& plan, double t_plain);
    void add_entries(BatchPlan& plan, int n_running);

    SpecConfig cfg_;
    std::unique_ptr<Proposer> proposer_;
    BlockManager& blocks_;
    EngineMetrics& metrics_;
    StepCost step_cost_;
    std::vector<DraftCandidate> cands_;
    std::vector<Sequence*> order_;  // price()'s scratch
};

}  // namespace ferrox
