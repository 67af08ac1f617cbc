#pragma once
// Speculation by a draft model: a smaller model of the target's vocabulary proposes its greedy
// next tokens. Each drafting sequence keeps its own KV in the draft model's pool (as many
// blocks as the target's, with a prefix cache of its own), computes a prompt's chunks in the
// steps that compute them for the target (so it drafts from its first decoding step), catches
// up on the tokens it has not seen, and drafts one batched draft step per token for all
// drafting sequences. Drafts stay within the draft model's trained context; a sequence holding
// an id the draft model lacks drafts nothing; in a full draft pool a sequence drafts what its
// blocks allow, and one that cannot go on gives its blocks back. The draft length is priced
// with the measured cost of draft steps added (marginal_cost), and a new request starts from
// the draft model's recent acceptance rate (prior), which drifts back toward the prior while
// nothing is drafted.
//
// Engine thread only.

#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "engine/metrics.h"
#include "engine/spec/proposer.h"
#include "engine/spec/speculation.h"

namespace ferrox {

struct DraftModelConfig {
    int block_size = 32;
    int n_blocks = 0;            // the draft pool's blocks (the target's count)
    int max_batch_tokens = 512;
    int n_parallel = 4;
    KvType kv_type = KvType::kF16;
    bool prefix_cache = true;
};

class DraftModelProposer final : public Proposer {
public:
    // Checks that `draft` speaks the target's vocabulary (the same text for every id both have,
    // at most 128 ids more or fewer, llama.cpp's rule) and the KV type. clock: the engine's, which
    // times the draft steps.
    static Expected<std::unique_ptr<DraftModelProposer>> create(std::shared_ptr<LoadedModel> draft,
                                                                const LoadedModel& target,
                                                                const DraftModelConfig& cfg, EngineMetrics& metrics,
                                                                const EngineClock& clock);

    double prior() const override;
    bool candidate(Sequence& s, bool allowed, int k_max, int* limit) override;
    double marginal_cost(int n) const override { return cost_.predict(n + 1) - cost_.predict(n); }
    void priced_out() override;
    void fill(std::vector<DraftCandidate>& cands, int n_running) override;
    void prefill(const BatchPlan& plan, int n_running) override;
    void after_step(const BatchPlan& plan) override;
    void observe(int accepted, bool rejected) override;

    const LoadedModel& model() const { return *draft_; }
    size_t kv_bytes() const { return storage_->bytes(); }
    const BlockManager& blocks() const { return blocks_; }

private:
    DraftModelProposer(std::shared_ptr<LoadedModel> draft, const DraftModelConfig& cfg, EngineMetrics& metrics,
                       const EngineClock& clock);
    void begin_kv(Sequence& s, int limit);
    void publish(Sequence& s);
    void add_entry(Sequence& s, const int32_t* toks, int n, bool logits);
    bool run_step(bool timed);
    // First draft step: catch-ups and first tokens; 0: nothing to run.
    size_t first_step(std::vector<DraftCandidate>& cands);

    std::shared_ptr<LoadedModel> draft_;
    DraftModelConfig cfg_;
    EngineMetrics& metrics_;
    const EngineClock& clock_;
    BlockManager blocks_;
    std::unique_ptr<KvStorage> storage_;
    int n_vocab_ = 0;      // the draft model's vocabulary
    int draft_vocab_ = 0;  // ids a draft token may take: those both vocabularies have
    int ctx_ = 0;          // the draft model's context: no drafts past it
    double trials_ = 0, hits_ = 0;  // decayed counts over every sequence's drafts
    StepCost cost_;        // the draft model's steps
    Batch batch_;
    std::vector<Sequence*> owner_;  // the sequence of each batch_ entry
    std::vector<float> logits_;
};

}  // namespace ferrox
