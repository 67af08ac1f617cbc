#pragma once
// Hyperparameters of a decoder-only transformer, read from GGUF metadata.

#include <string>

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

    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_head_kv * head_dim; }
};

// Reads the keys shared by the llama family ("<arch>.block_count" ...). Validates ranges and
// divisibility; errors name the file and the key.
Expected<ModelHParams> read_llama_family_hparams(const GgufFile& f, const std::string& arch);

}  // namespace ferrox
