#pragma once
// Hyperparameters of a decoder-only transformer, read from GGUF metadata.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/gguf.h"

namespace ferrox {

enum class RopeOrdering {
    kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]): llama, mistral (GGUF permutes Q/K for it)
    kNeox,    // rotate halves (x[i], x[i + n_rot/2]): qwen2, qwen3
};

struct ModelHParams {
    std::string arch;        // general.architecture
    int n_vocab = 0;
    int n_ctx_train = 0;     // context length the model was trained for
    int n_embd = 0;          // residual width
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;        // attention.key_length, else n_embd / n_head
    int n_ff = 0;
    int n_rot = 0;           // rope.dimension_count, else head_dim
    float rms_eps = 1e-5f;
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
    RopeOrdering rope_ordering = RopeOrdering::kNormal;

    // Architecture-specific (read by the architecture's read_hparams hook; these defaults are
    // the llama family's).
    // Sliding-window attention: a layer with swa_layers[il] != 0 lets position p attend only
    // to positions (p - n_swa, p], llama.cpp's LLAMA_SWA_TYPE_STANDARD. n_swa == 0: none.
    int n_swa = 0;
    std::vector<uint8_t> swa_layers;    // (n_layer) 1: local (sliding-window) layer
    float rope_freq_base_swa = 10000.0f;  // RoPE base of the local layers (scale 1)
    float q_scale = 1.0f;   // multiplies Q after RoPE, before it meets K (gemma)
    float kq_scale = 0.0f;  // scale of Q·K; 0: 1 / sqrt(head_dim)
    float embd_scale = 1.0f;  // multiplies the token embeddings (gemma: sqrt(n_embd))
    float final_logit_softcap = 0.0f;  // logits = c * tanh(logits / c) when > 0
    float attn_logit_softcap = 0.0f;   // scores = c * tanh(scores / c) before the softmax when > 0 (gemma2)

    // Mixture of experts (FfnKind::kMoe): each token's FFN is the weighted sum of n_expert_used
    // of n_expert experts of width n_ff_exp, chosen by a router (expert_count, expert_used_count,
    // expert_feed_forward_length; the latter defaults to feed_forward_length). n_ff_shexp: the
    // shared expert's width (qwen2moe: expert_shared_feed_forward_length, default n_ff).
    int n_expert = 0;
    int n_expert_used = 0;
    int n_ff_exp = 0;
    int n_ff_shexp = 0;

    bool is_swa(int il) const { return n_swa > 0 && !swa_layers.empty() && swa_layers[il] != 0; }

    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_head_kv * head_dim; }
};

// Reads the keys shared by the llama family ("<arch>.block_count" ...). Validates ranges and
// divisibility; errors name the file and the key.
Expected<ModelHParams> read_llama_family_hparams(const GgufFile& f, const std::string& arch);

// The expert keys of a mixture of experts (n_expert stays 0 when the file has no
// expert_count). A per-layer array of expert_used_count or expert_feed_forward_length is
// accepted when every layer has the same value; other values are a one-line error.
Status read_moe_hparams(const GgufFile& f, ModelHParams* hp);

// One integer key: *out unchanged when absent and !required; errors name the key and range.
Status read_hparam_int(const GgufFile& f, const std::string& key, bool required, int lo, int hi, int* out);

}  // namespace ferrox
