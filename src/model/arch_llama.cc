// llama (and every checkpoint converted as "llama": Llama 2/3, SmolLM, TinyLlama...):
// RMSNorm, RoPE on adjacent pairs (the GGUF converter permutes Q/K rows for it), GQA, SwiGLU.
// Llama 3's frequency scaling arrives as the optional rope_freqs tensor.
// A file with llama.expert_count > 0 (Mixtral) has a mixture of experts in every layer: softmax
// router, the top expert_used_count renormalized to sum 1, SwiGLU experts (ffn_*_exps).
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchLlama = {
    .name = "llama",
    .rope_ordering = RopeOrdering::kNormal,
    .qkv_bias = false,
    .qk_norm = false,
    .moe_if_experts = true,
    .moe_norm_weights = true,
};
}
