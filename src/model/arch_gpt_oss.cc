// gpt-oss (gpt-oss-20b, gpt-oss-120b; llama.cpp's LLM_ARCH_OPENAI_MOE):
// - attention with Q/K/V and output biases, NeoX RoPE with YaRN scaling on every layer, and a
//   learned sink logit per head in each softmax (attn_sinks.weight);
// - sliding-window attention (attention.sliding_window, 128 in the releases) on the even layers
//   (attention.sliding_window_pattern, default 2), full attention on the odd ones;
// - the FFN's input norm stored as post_attention_norm.weight;
// - a mixture of experts in every layer: router with a bias, the top expert_used_count by logit
//   weighted by a softmax over those alone, experts with biases on gate, up and down and the
//   clamped SwiGLU (x = min(gate, 7), y = clamp(up, -7, 7), x * sigmoid(1.702 x) * (y + 1)).
#include "model/weights.h"

namespace ferrox {

namespace {

Status read_gpt_oss_hparams(const GgufFile& f, ModelHParams* hp) {
    FERROX_RETURN_IF_ERROR(read_swa_hparams(f, hp, 0, 2, /*base_is_global=*/true));
    if (hp->n_swa == 0) return f.error("missing metadata '" + hp->arch + ".attention.sliding_window'");
    hp->rope_scaled_swa = true;
    if (!f.find(hp->arch + ".expert_feed_forward_length")) {
        return f.error("missing metadata '" + hp->arch + ".expert_feed_forward_length'");
    }
    return Status::ok();
}

}  // namespace

extern const ArchTraits kArchGptOss = {
    .name = "gpt-oss",
    .rope_ordering = RopeOrdering::kNeox,
    .qkv_bias = true,
    .qk_norm = false,
    .ffn_act = FfnActivation::kSwigluOai,
    .ffn = FfnKind::kMoe,
    .moe_norm_weights = false,
    .moe_gating = MoeGating::kSoftmaxWeight,
    .attn_out_bias = true,
    .attn_sinks = true,
    .moe_biases = true,
    .ffn_norm_name = "post_attention_norm",
    .read_hparams = read_gpt_oss_hparams,
};

}  // namespace ferrox
