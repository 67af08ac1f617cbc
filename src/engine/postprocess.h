#pragma once
// After the forward pass: grammar masks, sampling, draft acceptance and the request's events.
// For each entry of the step's plan that wants logits it draws the next token (constrained by
// the request's grammar), emits its text (stop strings held back, logprobs when asked), accepts
// the sequence's draft tokens while they equal what it draws, and ends the sequence on end of
// generation, a stop string, its length or its grammar's end.
//
// Threading: engine thread. The masks a step will need are computed on a thread of its own
// while the forward pass runs (launch_masks, then process waits for them; the engine thread
// touches no grammar runtime meanwhile). Each sequence's first token of a step is drawn on the
// forward pass's threads (ForwardModel::parallel_for), one sequence at a time each.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "engine/batch_plan.h"
#include "engine/metrics.h"
#include "engine/sequence.h"
#include "model/forward_model.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

class Scheduler;
class Speculation;

class Postprocessor {
public:
    // clock: the engine's (the latency histograms). on_blocks_freed: called when a finished
    // sequence gave its blocks back, before its kDone (the gauges, so that a client that sees
    // the end also sees them free).
    Postprocessor(const Tokenizer& tokenizer, ForwardModel& model, EngineMetrics& metrics, const EngineClock& clock,
                  std::function<void()> on_blocks_freed);
    ~Postprocessor();
    Postprocessor(const Postprocessor&) = delete;
    Postprocessor& operator=(const Postprocessor&) = delete;

    // A sequence's sampler, text stream and grammar matcher, at its first admission.
    void prepare(Sequence& s);
    // Starts computing the masks the plan's constrained rows need, beside the forward pass.
    void launch_masks(const BatchPlan& plan);
    // The step's tokens from `logits` (the plan's rows, in order), or every entry's sequence
    // ended with `st` when the forward failed. spec: where draft acceptance is reported (null
    // without speculation).
    void process(BatchPlan& plan, const Status& st, std::span<float> logits, Speculation* spec,
                 Scheduler& scheduler);
    // Ends a sequence: the rest of its text (unless cancelled or failed), its blocks back, kDone.
    void finish(Sequence& s, FinishReason why, Status error = Status::ok());

private:
    void wait_masks();
    void mask_main();
    void sample_first_tokens(const BatchPlan& plan, std::span<float> logits);
    // The next token from a logits row (`drawn`: already sampled from it); -1 when s ended in an
    // error.
    int32_t next_token(Sequence& s, float* row, int32_t drawn);
    // Accepts s's draft tokens while they equal what it draws (each draft position's logits row
    // follows its main rows, SeqSpec::draft_row0); `tok`: the token its own row gave.
    void accept_drafts(Sequence& s, int32_t tok, std::span<float> logits, Speculation* spec);
    void emit_token(Sequence& s, int32_t token, const float* logits);
    TokenLogprob logprob(const Sequence& s, int32_t token, const float* logits);
    // token's log-probability in softmax(logits / temp) and the top_k best (top_k <= 0: none).
    TokenLogprob logprob_at(int32_t token, const float* logits, float temp, int top_k);
    // kPromptLogprobs for the prompt tokens that an all_logits entry's rows predict.
    void emit_prompt_logprobs(Sequence& s, const BatchSeq& b, const float* rows);
    std::shared_ptr<grammar::GrammarRuntime> grammar_runtime(const std::shared_ptr<const grammar::Grammar>& g,
                                                             bool special);
    // DRY's processed sequence breakers for a list (a pass over the vocabulary: the last few
    // lists are kept, the default one among them).
    std::shared_ptr<const DryBreakers> dry_breakers(const std::vector<std::string>& breakers);

    const Tokenizer& tok_;
    ForwardModel& model_;
    EngineMetrics& metrics_;
    const EngineClock& clock_;
    std::function<void()> on_blocks_freed_;
    const int n_vocab_;

    // Constrained decoding: the vocabulary's bytes (without and with control tokens' text),
    // built at the first constrained request, and the runtimes of recent grammars.
    std::shared_ptr<const grammar::TokenVocab> grammar_vocab_[2];
    struct GrammarEntry {
        std::shared_ptr<grammar::GrammarRuntime> rt;
        bool special;
        uint64_t last_use;
    };
    std::vector<GrammarEntry> grammars_;
    uint64_t grammar_clock_ = 0;
    std::thread mask_thread_;  // started at the first grammar
    std::mutex mask_mu_;
    std::condition_variable mask_cv_;
    std::vector<grammar::Matcher*> mask_jobs_;    // guarded by mask_mu_
    bool mask_busy_ = false, mask_stop_ = false;  // guarded by mask_mu_
    bool masks_launched_ = false;

    std::vector<std::pair<std::vector<std::string>, std::shared_ptr<const DryBreakers>>> dry_breakers_;

    std::vector<int32_t> pre_;                   // each entry's first token, drawn in parallel
    std::vector<std::pair<int, int>> pre_rows_;  // (entry, logits row) drawn in parallel
    std::vector<float> lp_weights_;              // logprob(): exp_shifted's output
    std::vector<float> lp_chunks_;               // logprob(): top_k_logit_floor's scratch
    std::vector<int32_t> lp_ids_;                // logprob(): the top logprobs' candidates
};

}  // namespace ferrox
