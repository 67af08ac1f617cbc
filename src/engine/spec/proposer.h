#pragma once
// Speculative decoding's proposers: where draft tokens come from. Speculation (speculation.h)
// asks the proposer which decoding sequences can draft and how far, prices the draft tokens,
// and has the proposer fill in the tokens it chose; the target verifies every draft the same
// way, so a proposer changes how many steps an answer takes, never its tokens.
//
// Engine thread only.

#include <vector>

#include "engine/batch_plan.h"
#include "engine/sequence.h"

namespace ferrox {

// A sequence that may draft this step.
struct DraftCandidate {
    Sequence* s;
    double alpha, p;  // acceptance estimate; the probability of its next draft token
    int taken;        // draft tokens the pricing chose
    int limit;        // draft tokens it may take (its lookup's, or the draft model's limit)
};

class Proposer {
public:
    virtual ~Proposer() = default;
    // The acceptance estimate of a sequence without history.
    virtual double prior() const = 0;
    // Whether decoding sequence s (allowed: its request lets it draft; k_max: at most so many
    // tokens) is a candidate, and for how many tokens at most (*limit). A proposer that knows
    // its tokens now (prompt lookup) leaves them in s.spec.draft.
    virtual bool candidate(Sequence& s, bool allowed, int k_max, int* limit) = 0;
    // What one more sequence in a draft step costs beside the target's step, when `n` are in it
    // already (0 for proposers without a model).
    virtual double marginal_cost(int /*n*/) const { return 0; }
    // The pricing chose no draft token at all this step.
    virtual void priced_out() {}
    // Leaves at most c.taken tokens in each candidate's s.spec.draft (fewer where it cannot).
    virtual void fill(std::vector<DraftCandidate>& /*cands*/, int /*n_running*/) {}
    // The step's prompt chunks (plan entries [n_decode, n_main)) are about to be computed.
    virtual void prefill(const BatchPlan& /*plan*/, int /*n_running*/) {}
    // After the step's tokens were accepted or rejected.
    virtual void after_step(const BatchPlan& /*plan*/) {}
    // A verification of `drafted` tokens accepted `accepted` of them (rejected: one was refused).
    virtual void observe(int /*accepted*/, bool /*rejected*/) {}
};

}  // namespace ferrox
