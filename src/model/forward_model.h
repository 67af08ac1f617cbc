#pragma once
// What the engine needs of a model, and nothing of how it computes: a batch of sequences'
// tokens over their KV blocks in, logits out. The CPU model (model.h) implements it; the
// engine's tests use fakes; a GPU backend would be a third. No tensor header here, so the
// scheduler can include it.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/kv_storage.h"

namespace ferrox {

// One sequence's share of a batch: tokens [i_begin, i_begin + n_tokens) of Batch::tokens
// are its positions n_past, n_past + 1, ...; its KV blocks must already cover them.
struct BatchSeq {
    int i_begin = 0;
    int n_tokens = 0;
    int n_past = 0;
    const int32_t* block_table = nullptr;
    int n_blocks = 0;
    bool want_logits = true;  // logits of the last token
    // With want_logits: logits of every token of the entry, in order (n_tokens rows; a prompt's
    // logprobs). Only for models whose all_logits() is true.
    bool all_logits = false;
    int n_rows() const { return want_logits ? (all_logits ? n_tokens : 1) : 0; }
};

struct Batch {
    std::vector<int32_t> tokens;
    std::vector<BatchSeq> seqs;
};

// A mixture of experts' routing since load: tokens[il * n_expert + e] tokens of layer il went
// to expert e (each token counts once per expert it chose). Empty for dense models.
struct ExpertRouting {
    int n_layer = 0;
    int n_expert = 0;
    std::vector<uint64_t> tokens;
};

// What the engine needs of a model: its limits, the KV geometry and the batched forward.
// Model implements it; scheduler tests use a fake.
class ForwardModel {
public:
    virtual ~ForwardModel() = default;
    virtual int n_vocab() const = 0;
    virtual int max_ctx() const = 0;           // longest sequence forward() accepts
    virtual int n_ctx_train() const = 0;       // the context the model was trained for
    virtual int max_batch_tokens() const = 0;  // largest batch forward() accepts
    virtual KvGeometry kv_geometry(int block_size, KvType type) const = 0;
    // Whether the cache type works with this model (a one-line reason when not).
    virtual Status check_kv_type(KvType type) const = 0;
    // The KV storage this model's forward reads and writes (its layout is the backend's).
    virtual std::unique_ptr<KvStorage> make_kv_storage(KvGeometry geo, int n_blocks) const {
        return std::make_unique<KvStorage>(geo, n_blocks);
    }
    // Whether forward() honours BatchSeq::all_logits (the engine refuses prompt logprobs
    // otherwise).
    virtual bool all_logits() const { return false; }
    // Runs the batch; writes n_vocab logits per sequence with want_logits (n_tokens rows for
    // one with all_logits), in order, to `logits` (size >= the rows * n_vocab). KV rows of the
    // new positions are written.
    virtual Status forward(const Batch& batch, KvStorage& kv, std::span<float> logits) = 0;
    // Runs fn(i) for i in [0, n), on the forward pass's threads where the model has them (the
    // caller's thread takes part; no forward may run meanwhile). Work between forward passes
    // that splits by sequence, such as sampling each row.
    virtual void parallel_for(int n, const std::function<void(int)>& fn) {
        for (int i = 0; i < n; ++i) fn(i);
    }
    // Any thread, also while a forward runs (the counts are relaxed atomics).
    virtual ExpertRouting expert_routing() const { return {}; }
};

}  // namespace ferrox
