// qwen2moe (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): qwen2's attention (QKV bias, NeoX RoPE) and in
// every layer a softmax router's top expert_used_count experts, weights not renormalized, plus
// a shared expert (expert_shared_feed_forward_length wide) scaled by sigmoid(ffn_gate_inp_shexp · x).
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchQwen2Moe = {
    .name = "qwen2moe",
    .rope_ordering = RopeOrdering::kNeox,
    .qkv_bias = true,
    .qk_norm = false,
    .ffn = FfnKind::kMoe,
    .moe_norm_weights = false,
    .shared_expert = true,
};
}
