// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B): qwen3's attention (per-head QK
// norm, NeoX RoPE, head_dim from attention.key_length) and a mixture of experts in every layer:
// softmax router over expert_count experts, the top expert_used_count renormalized to sum 1,
// SwiGLU experts of expert_feed_forward_length.
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchQwen3Moe = {
    .name = "qwen3moe",
    .rope_ordering = RopeOrdering::kNeox,
    .qkv_bias = false,
    .qk_norm = true,
    .ffn = FfnKind::kMoe,
    .moe_norm_weights = true,
};
}
