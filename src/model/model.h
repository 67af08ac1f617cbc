#pragma once
// A decoder-only transformer of the llama family, loaded from GGUF, with a batched forward
// pass: one call processes tokens of several sequences, each weight matrix read once per call.
//
// Threading: forward() runs on the calling (engine) thread and uses the model's thread pool;
// one forward at a time per Model.

#include <cstdint>
#include <cstdlib>
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

namespace ferrox {

struct QuantKernels;

enum class FfnActivation {
    kSilu,      // SwiGLU: silu(gate) * up
    kGeluTanh,  // GeGLU: gelu_tanh(gate) * up (gemma)
};

// What differs between architectures of the family; each architecture file fills one in.
struct ArchTraits {
    const char* name;
    RopeOrdering rope_ordering;
    bool qkv_bias;  // qwen2
    bool qk_norm;   // qwen3, gemma3: RMSNorm over each head of Q and K before RoPE
    // gemma3: RMSNorm (post_attention_norm, post_ffw_norm) of the attention and FFN outputs
    // before each residual add.
    bool post_norms = false;
    FfnActivation ffn_act = FfnActivation::kSilu;
    // The architecture's own metadata, read after the family's keys (null: none).
    Status (*read_hparams)(const GgufFile& f, ModelHParams* hp) = nullptr;
};

struct LayerWeights {
    const TensorView* wq;  // (n_embd -> q_dim)
    const TensorView* wk;  // (n_embd -> kv_dim)
    const TensorView* wv;  // (n_embd -> kv_dim)
    const TensorView* wo;  // (q_dim -> n_embd)
    const TensorView* w_gate;  // (n_embd -> n_ff)
    const TensorView* w_up;    // (n_embd -> n_ff)
    const TensorView* w_down;  // (n_ff -> n_embd)
    std::vector<float> attn_norm;  // (n_embd)
    std::vector<float> ffn_norm;   // (n_embd)
    std::vector<float> bq, bk, bv;  // (q_dim), (kv_dim), (kv_dim); empty unless qkv_bias
    std::vector<float> q_norm, k_norm;  // (head_dim); empty unless qk_norm
    std::vector<float> post_attn_norm, post_ffn_norm;  // (n_embd); empty unless post_norms
};

struct ModelOptions {
    int n_threads = 0;      // 0: all cores
    int max_batch_tokens = 512;  // largest Batch::tokens.size() a forward accepts
    int max_ctx = 4096;     // longest sequence attention must handle
    // Weights a matrix product does not repack stay in the file's mapping (true) or are copied
    // into the model's huge-page memory (false). load_model() maps the file either way.
    bool mmap = false;
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

    const ModelHParams& hparams() const { return hp_; }
    const ArchTraits& traits() const { return traits_; }
    int n_vocab() const override { return hp_.n_vocab; }
    int n_threads() const { return pool_->n_threads(); }
    int max_ctx() const override { return opts_.max_ctx; }
    int n_ctx_train() const override { return hp_.n_ctx_train; }
    int max_batch_tokens() const override { return opts_.max_batch_tokens; }
    KvGeometry kv_geometry(int block_size, KvType type = KvType::kF16) const override {
        return {hp_.n_layer, hp_.kv_dim(), block_size, type};
    }
    Status check_kv_type(KvType type) const override;

    // Runs the batch; writes n_vocab logits per sequence with want_logits, in order, to
    // `logits` (size >= that count * n_vocab). KV rows of the new positions are written.
    Status forward(const Batch& batch, KvStorage& kv, std::span<float> logits) override;
    void parallel_for(int n, const std::function<void(int)>& fn) override;

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
    void ffn_residual(const LayerWeights& L, int t0, int t1);
    void plan_attention(const Batch& batch);
    bool plan_kv_prefetch(const Batch& batch, KvStorage& kv, int il, int64_t steps);
    int64_t feed_steps(const MatJob* jobs, int n_jobs, int n_tok) const;
    void write_v_f16(KvStorage& kv, const Batch& batch, int il, int t, int h);
    void attention(const Batch& batch, KvStorage& kv, int il);
    void attention_q8_0(const Batch& batch, KvStorage& kv, int il);
    void place_weights(const GgufFile& f, bool repack, bool copy);

    ModelHParams hp_;
    ArchTraits traits_{};
    ModelOptions opts_;
    const TensorView* tok_embd_ = nullptr;  // (n_embd, n_vocab)
    const TensorView* output_ = nullptr;    // (n_embd, n_vocab); == tok_embd_ when tied
    std::vector<float> output_norm_;        // (n_embd)
    std::vector<float> rope_freq_factors_;  // (n_rot/2) or empty
    std::vector<LayerWeights> layers_;
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Scratch> s_;
    struct FreeDeleter {
        void operator()(uint8_t* p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, FreeDeleter> packed_arena_;      // repacked (and copied) weights
    std::vector<std::unique_ptr<TensorView>> packed_views_;   // their views
};

// The traits of a decoder architecture by its general.architecture name (model/archs.def lists
// them; each is defined in its arch_<name>.cc), or null.
const ArchTraits* find_arch(const std::string& name);

}  // namespace ferrox
