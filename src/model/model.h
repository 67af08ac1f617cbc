#pragma once
// The CPU backend's decoder: a llama-family transformer's weights (weights.h) placed for the
// CPU's products, with a batched forward pass: one call processes tokens of several sequences,
// each weight matrix read once per call. The class is spread over model.cc (load) and cpu/
// (place.cc: weights in the arena; matmul.cc: products; attention.cc: attention over the KV
// storage; forward.cc: the forward and the layers' blocks).
//
// Threading: forward() runs on the calling (engine) thread and uses the model's thread pool;
// one forward at a time per Model.

#include <cstdint>
#include <cstdlib>
#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "loader/gguf.h"
#include "model/hparams.h"
#include "model/forward_model.h"
#include "model/kv_storage.h"
#include "model/weights.h"

namespace ferrox {

struct QuantKernels;

struct ModelOptions {
    int n_threads = 0;      // 0: all cores
    int max_batch_tokens = 512;  // largest Batch::tokens.size() a forward accepts
    int max_ctx = 4096;     // longest sequence attention must handle
    // Weights a matrix product does not repack stay in the file's mapping (true) or are copied
    // into the model's huge-page memory (false). load_model() maps the file either way. With
    // mmap, a mixture of experts' expert tensors are not repacked either: they stay mapped,
    // read in place by the row kernels (a file larger than memory still runs; a token reads
    // only its experts' pages).
    bool mmap = false;
    // load_model() sets mmap for a file whose weights exceed 3/4 of physical memory (the CLI's
    // default when neither --mmap nor --no-mmap is given).
    bool mmap_auto = false;
    // Repack matrices of types with a packed decode layout (8 rows interleaved) at load.
    bool repack = true;
    // Matrix products in llama.cpp's x86 order: logits bit-identical to llama.cpp's AVX2 build
    // for models of Q4_1, Q5_0, Q8_0, Q4_K and Q6_K matrices (SmolLM2 and Gemma 3 golden tests),
    // for each sequence as llama.cpp computes it alone (prompt in chunks of 512, n_batch 512;
    // decode one token a step). Q4_1 keeps its packed layout, summed in ggml's 8 lanes of 4
    // products per block (about half the batched throughput of the default, the reference block
    // order, QuantKernels::gemm_packed8_ref_order); the others are not packed and go through
    // QuantKernels::vec_dot_rows_x86(_batch), which, as llama.cpp's kernels, sum a token's Q4_K
    // and Q6_K products in an order that depends on how many tokens of its sequence the batch
    // holds (not on other sequences). A fidelity mode (tests, comparisons), several times slower
    // on those types; without it every type's order is fixed on every ISA and in every batch.
    // No effect on the scalar ISA.
    bool ggml_order = false;
};

class Model final : public ForwardModel {
public:
    // Loads the architecture named in general.architecture. The GgufFile must outlive it.
    static Expected<std::unique_ptr<Model>> load(const GgufFile& file, const ModelOptions& opts);
    ~Model() override;

    const ModelHParams& hparams() const { return w_.hp; }
    const ArchTraits& traits() const { return w_.traits; }
    const ModelWeights& weights() const { return w_; }
    int n_vocab() const override { return w_.hp.n_vocab; }
    int n_threads() const { return pool_->n_threads(); }
    int max_ctx() const override { return opts_.max_ctx; }
    int n_ctx_train() const override { return w_.hp.n_ctx_train; }
    int max_batch_tokens() const override { return opts_.max_batch_tokens; }
    KvGeometry kv_geometry(int block_size, KvType type = KvType::kF16) const override {
        return {w_.hp.n_layer, w_.hp.kv_dim(), block_size, type};
    }
    Status check_kv_type(KvType type) const override;
    bool all_logits() const override { return true; }

    // Runs the batch; writes n_vocab logits per sequence with want_logits, in order, to
    // `logits` (size >= that count * n_vocab). KV rows of the new positions are written.
    Status forward(const Batch& batch, KvStorage& kv, std::span<float> logits) override;
    void parallel_for(int n, const std::function<void(int)>& fn) override;
    ExpertRouting expert_routing() const override;

private:
    Model() = default;
    struct Scratch;
    struct MatJob {
        const TensorView* w;  // (n_in -> n_out)
        const float* x;       // (n_tok, n_in)
        float* y;             // (n_tok, n_out)
    };
    static constexpr int kMaxMatJobs = 3;
    // rows_are_tokens: row t of each input is the batch's token t (else rows stand alone, as
    // the output product's, one per sequence that wants logits).
    // quantized: quantize_inputs already wrote every input row (inside a parallel region that
    // computed them, saving the barrier of a region of its own).
    // kv_feed: the threads' KV feeds (plan_kv_prefetch) are asked for during the product.
    void matmuls(const MatJob* jobs, int n_jobs, int n_tok, bool rows_are_tokens = true, bool quantized = false,
                 bool kv_feed = false);
    // The inputs' quantized rows [t0, t1) as matmuls(jobs, n_jobs, n_tok) would write them.
    void quantize_inputs(const MatJob* jobs, int n_jobs, int n_tok, int t0, int t1);
    // Where matmuls keeps each distinct input's quantized rows.
    struct ActSlot {
        const float* x;
        DType act_type;
        int64_t n_in;
        int64_t row_bytes;
        uint8_t* data;
        void (*quantize)(const float* src, void* dst, int64_t n);  // rows -> act_type
    };
    struct ActSlots {
        ActSlot slots[kMaxMatJobs];
        int slot_of[kMaxMatJobs];
        int n_slots = 0;
    };
    ActSlots act_slots(const MatJob* jobs, int n_jobs, int n_tok) const;
    // The packed product of a type's kernels in the order ModelOptions::ggml_order chose.
    using GemmPacked = void (*)(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                                int64_t n_cols, float* out, int64_t out_stride);
    GemmPacked packed_gemm(const QuantKernels& k) const;
    // The layer's blocks (cpu/forward.cc): input steps and output steps on token ranges (run
    // fused in the parallel region between two blocks), bodies on the whole batch.
    Status prepare_batch(const Batch& batch, const KvStorage& kv, std::span<float> logits);
    void embed(const Batch& batch);
    void rope_tables(int n_tok);
    void output_logits(const Batch& batch, std::span<float> logits);
    struct LayerJobs;
    LayerJobs layer_jobs(const LayerWeights& L) const;
    void attn_input(const LayerWeights& L, const LayerJobs& J, int n_tok, int t0, int t1);
    void qkv_finish(const Batch& batch, KvStorage& kv, int il, int t0, int t1);
    bool attn_body(const Batch& batch, KvStorage& kv, int il, const LayerJobs& J, int n_tok, bool kv_feed,
                   bool feeding);
    void attn_output(const LayerWeights& L, int t0, int t1);
    void ffn_input(const LayerWeights& L, const LayerJobs& J, int n_tok, int t0, int t1);
    void ffn_body(const LayerWeights& L, const LayerJobs& J, int il, int n_tok, bool kv_feed);
    int64_t ffn_feed_steps(const LayerJobs& J, int n_tok) const;
    void dense_ffn(const LayerJobs& J, int n_tok, bool kv_feed);
    void ffn_output(const LayerWeights& L, int t0, int t1);
    // Mixture of experts (cpu/moe.cc): routing, grouping by expert, the grouped products.
    struct ExpertJob;
    void moe_ffn(const LayerWeights& L, const LayerJobs& J, int il, int n_tok);
    void moe_route(int il, int t0, int t1);
    void moe_group(int il, int n_tok);
    void expert_products(const ExpertJob* jobs, int n_jobs);
    void plan_attention(const Batch& batch);
    bool plan_kv_prefetch(const Batch& batch, KvStorage& kv, int il, int64_t steps);
    int64_t feed_steps(const MatJob* jobs, int n_jobs, int n_tok) const;
    void write_v_f16(KvStorage& kv, const Batch& batch, int il, int t, int h);
    void attention(const Batch& batch, KvStorage& kv, int il);
    void attention_q8_0(const Batch& batch, KvStorage& kv, int il);
    void place_weights(const GgufFile& f, bool repack, bool copy);

    // The file's weights; the matrices this model placed in its arena point there instead.
    ModelWeights w_;
    ModelOptions opts_;
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Scratch> s_;
    struct FreeDeleter {
        void operator()(uint8_t* p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, FreeDeleter> packed_arena_;      // repacked (and copied) weights
    std::vector<std::unique_ptr<TensorView>> packed_views_;   // their views
    // Tokens routed to each expert of each layer since load ((n_layer, n_expert), MoE only).
    std::unique_ptr<std::atomic<uint64_t>[]> expert_tokens_;
};

}  // namespace ferrox
