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
    float rope_freq_scale = 1.0f;  // 1 / scaling factor (linear or YaRN)
    // YaRN (rope.scaling.type "yarn"), as ggml's rope_yarn: each pair's angle mixes the scaled and
    // the unscaled one by a ramp over the correction dimensions (from n_ctx_orig_yarn and the two
    // betas), and cos/sin are multiplied by yarn_attn_factor * (1 + 0.1 ln(1 / freq_scale)).
    // yarn_ext_factor 0: plain RoPE.
    float yarn_ext_factor = 0.0f;
    float yarn_attn_factor = 1.0f;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    int n_ctx_orig_yarn = 0;  // rope.scaling.original_context_length, else n_ctx_train
    RopeOrdering rope_ordering = RopeOrdering::kNormal;

    // Architecture-specific (read by the architecture's read_hparams hook; these defaults are
    // the llama family's).
    // Sliding-window attention: a layer with swa_layers[il] != 0 lets position p attend only
    // to positions (p - n_swa, p], llama.cpp's LLAMA_SWA_TYPE_STANDARD. n_swa == 0: none.
    int n_swa = 0;
    std::vector<uint8_t> swa_layers;    // (n_layer) 1: local (sliding-window) layer
    float rope_freq_base_swa = 10000.0f;  // RoPE base of the local layers
    bool rope_scaled_swa = false;  // local layers scaled as the global ones (gpt-oss), else scale 1
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

// Sliding-window attention (llama.cpp's load_swa_pattern): attention.sliding_window (default
// n_swa), the local layers from attention.sliding_window_pattern (a per-layer bool array, or an
// int n: layer il is local when il % n < n - 1, default `pattern`), rope.freq_base_swa (default
// 10000, or rope.freq_base where base_is_global).
Status read_swa_hparams(const GgufFile& f, ModelHParams* hp, int n_swa, int pattern, bool base_is_global);

// One integer key: *out unchanged when absent and !required; errors name the key and range.
Status read_hparam_int(const GgufFile& f, const std::string& key, bool required, int lo, int hi, int* out);

}  // namespace ferrox
