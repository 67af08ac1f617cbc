#pragma once
// A decoder's weights as the file holds them: hyperparameters, the architecture's traits and
// every tensor by name, with its shape checked (N-D: a mixture of experts' tensors are 3-D,
// the expert the slowest dimension). Backend-neutral: views into the mapped GGUF file, which
// a backend places where its products want them (the CPU model repacks and copies them into
// its arena, model.h; a GPU backend would upload them).

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/gguf.h"
#include "model/hparams.h"

namespace ferrox {

enum class FfnActivation {
    kSilu,      // SwiGLU: silu(gate) * up
    kGeluTanh,  // GeGLU: gelu_tanh(gate) * up (gemma)
};

// The feed-forward block a layer has. Only kDense is implemented; a mixture of experts (a
// router over experts' 3-D gate/up/down tensors) is the next kind.
enum class FfnKind { kDense };

// What differs between architectures of the family; each architecture file fills one in
// (arch_<name>.cc, registered in archs.def): which blocks and options the forward uses.
struct ArchTraits {
    const char* name;
    RopeOrdering rope_ordering;
    bool qkv_bias;  // qwen2
    bool qk_norm;   // qwen3, gemma3: RMSNorm over each head of Q and K before RoPE
    // gemma3: RMSNorm (post_attention_norm, post_ffw_norm) of the attention and FFN outputs
    // before each residual add.
    bool post_norms = false;
    FfnActivation ffn_act = FfnActivation::kSilu;
    FfnKind ffn = FfnKind::kDense;
    // The architecture's own metadata, read after the family's keys (null: none).
    Status (*read_hparams)(const GgufFile& f, ModelHParams* hp) = nullptr;
};

// The traits of a decoder architecture by its general.architecture name (archs.def lists them;
// each is defined in its arch_<name>.cc), or null.
const ArchTraits* find_arch(const std::string& name);

struct LayerWeights {
    // Attention block.
    const TensorView* wq;  // (n_embd -> q_dim)
    const TensorView* wk;  // (n_embd -> kv_dim)
    const TensorView* wv;  // (n_embd -> kv_dim)
    const TensorView* wo;  // (q_dim -> n_embd)
    std::vector<float> attn_norm;  // (n_embd)
    std::vector<float> bq, bk, bv;  // (q_dim), (kv_dim), (kv_dim); empty unless qkv_bias
    std::vector<float> q_norm, k_norm;  // (head_dim); empty unless qk_norm
    std::vector<float> post_attn_norm;  // (n_embd); empty unless post_norms
    // FFN block (FfnKind::kDense).
    const TensorView* w_gate;  // (n_embd -> n_ff)
    const TensorView* w_up;    // (n_embd -> n_ff)
    const TensorView* w_down;  // (n_ff -> n_embd)
    std::vector<float> ffn_norm;       // (n_embd)
    std::vector<float> post_ffn_norm;  // (n_embd); empty unless post_norms
};

struct ModelWeights {
    ModelHParams hp;
    ArchTraits traits{};
    const TensorView* tok_embd = nullptr;  // (n_embd, n_vocab)
    const TensorView* output = nullptr;    // (n_embd, n_vocab); == tok_embd when tied
    std::vector<float> output_norm;        // (n_embd)
    std::vector<float> rope_freq_factors;  // (n_rot/2) or empty
    std::vector<LayerWeights> layers;      // (n_layer)

    // Reads the architecture named in general.architecture: hyperparameters and every tensor,
    // checked by name, type and shape; errors are one line naming the file. The views point
    // into `f`, which must outlive them.
    static Expected<ModelWeights> load(const GgufFile& f);
};

// Checks a tensor's shape, innermost dimension first ({n_in, n_out} for a matrix, {n_in, n_out,
// n_expert} for experts' matrices); dimensions not given must be 1. The error names the tensor
// and both shapes (the caller adds the file).
Status check_tensor_shape(const TensorView& t, std::initializer_list<int64_t> ne);

}  // namespace ferrox
