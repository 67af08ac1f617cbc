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
    // gpt-oss's experts: x = min(gate, 7), y = clamp(up, -7, 7), x * sigmoid(1.702 x) * (y + 1)
    kSwigluOai,
};

// The feed-forward block a layer has.
enum class FfnKind {
    kDense,  // gate, up, down
    kMoe,    // a router's top n_expert_used of n_expert experts (3-D gate/up/down), weighted
};

// How the router's logits become the selected experts' weights (llama.cpp's
// LLAMA_EXPERT_GATING_FUNC_TYPE_*): the top n_expert_used by probability, their probabilities
// as weights.
enum class MoeGating {
    kSoftmax,  // probabilities = softmax over all experts
    // gpt-oss: the top n_expert_used by logit, weights = softmax over those alone
    kSoftmaxWeight,
};

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
    // llama: a file with expert_count > 0 is a mixture of experts (Mixtral) with these traits.
    bool moe_if_experts = false;
    // MoE: the selected experts' weights divided by their sum (qwen3moe, Mixtral; not qwen2moe, olmoe).
    bool moe_norm_weights = false;
    MoeGating moe_gating = MoeGating::kSoftmax;
    // MoE: a dense expert beside the routed ones, its output scaled by
    // sigmoid(ffn_gate_inp_shexp · x) (qwen2moe).
    bool shared_expert = false;
    // olmoe: the QK norm over the whole Q and K rows (q_dim, kv_dim wide), not per head.
    bool qk_norm_full = false;
    // gpt-oss: a bias on the attention output (attn_output.bias); a learned logit per head
    // (attn_sinks.weight) that takes part in each query's softmax without a value; biases on the
    // router and on every expert's gate, up and down.
    bool attn_out_bias = false;
    bool attn_sinks = false;
    bool moe_biases = false;
    // The FFN's input norm's tensor (gpt-oss calls it post_attention_norm).
    const char* ffn_norm_name = "ffn_norm";
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
    std::vector<float> bo;              // (n_embd); empty unless attn_out_bias
    std::vector<float> attn_sinks;      // (n_head); empty unless attn_sinks
    // FFN block (FfnKind::kDense; a MoE layer's shared expert, null without one).
    const TensorView* w_gate = nullptr;  // (n_embd -> n_ff)
    const TensorView* w_up = nullptr;    // (n_embd -> n_ff)
    const TensorView* w_down = nullptr;  // (n_ff -> n_embd)
    // FFN block (FfnKind::kMoe): the router and the experts' matrices, expert e's rows at
    // [e * n_out, (e + 1) * n_out) of a (n_in, n_out, n_expert) tensor.
    const TensorView* gate_inp = nullptr;   // (n_embd -> n_expert)
    const TensorView* gate_exps = nullptr;  // (n_embd -> n_ff_exp) x n_expert
    const TensorView* up_exps = nullptr;    // (n_embd -> n_ff_exp) x n_expert
    const TensorView* down_exps = nullptr;  // (n_ff_exp -> n_embd) x n_expert
    // Shared expert (ArchTraits::shared_expert): a dense FFN of width n_ff_shexp in
    // w_gate/w_up/w_down, and its gate's weights.
    std::vector<float> gate_inp_shexp;  // (n_embd)
    // ArchTraits::moe_biases: the router's (n_expert) and the experts' ((n_expert, n_ff_exp) for
    // gate and up, (n_expert, n_embd) for down), expert e's at e * width.
    std::vector<float> gate_inp_b, gate_exps_b, up_exps_b, down_exps_b;
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
