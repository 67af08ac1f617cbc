// olmoe (OLMoE-1B-7B): llama-style attention with an RMSNorm over the whole Q and K rows
// (attn_q_norm, attn_k_norm: q_dim and kv_dim wide) before NeoX RoPE, and a mixture of experts
// in every layer: softmax router, top expert_used_count, weights not renormalized; the experts'
// width is feed_forward_length.
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchOlmoe = {
    .name = "olmoe",
    .rope_ordering = RopeOrdering::kNeox,
    .qkv_bias = false,
    .qk_norm = true,
    .ffn = FfnKind::kMoe,
    .moe_norm_weights = false,
    .qk_norm_full = true,
};
}
