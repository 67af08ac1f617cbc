// gemma3 (Gemma 3 text decoders, llama.cpp's GGUF conversion):
// - token embeddings multiplied by sqrt(n_embd); output tied to them unless output.weight;
// - RMSNorm weights used as stored: the converter already added Gemma's "1 +" to every
//   *norm.weight (Gemma3RMSNorm computes x * (1 + w));
// - pre- and post-norms around attention and FFN (post_attention_norm, post_ffw_norm, applied
//   to the block's output before its residual add), QK norm per head, NeoX RoPE;
// - Q scaled after RoPE by 1 / sqrt(query_pre_attn_scalar) and Q·K left unscaled: the GGUF has
//   no key for the scalar, so attention.scale if present, else llama.cpp's rule
//   (head_dim, or n_embd / n_head for the 62-layer 27B);
// - GeGLU with the tanh GELU;
// - sliding-window attention (attention.sliding_window positions, itself included) on the
//   local layers; attention.sliding_window_pattern (an int n: every n-th layer global, default
//   6; or a per-layer bool array) says which; local layers use rope.freq_base_swa (default
//   10000, scale 1), global ones rope.freq_base and the rope scaling;
// - final_logit_softcapping when present (none in Gemma 3's released checkpoints).
//
// gemma2 (Gemma 2), the same block without the QK norm, plus (as llama.cpp's gemma2 graph):
// - attn_logit_softcapping: scores = c * tanh(scores / c) before the mask and softmax;
// - final_logit_softcapping on the logits;
// - sliding window (default 4096) on every other layer (pattern default 2: even layers local),
//   one RoPE base for both kinds (rope.freq_base_swa if present, else rope.freq_base);
// - the query scale 1 / sqrt(head_dim) (or n_embd / n_head for the 46-layer 27B), Q·K unscaled;
// - the output tied to token_embd (the converter writes no output.weight).
#include <cmath>

#include "model/weights.h"

namespace ferrox {

namespace {

// What differs between the generations' readers (llama.cpp's defaults for each).
struct GemmaRules {
    int n_swa;           // attention.sliding_window when absent (0: none)
    int swa_pattern;     // attention.sliding_window_pattern when absent
    int n_layer_27b;     // the 27B's layer count, whose query scale uses n_embd / n_head
    bool swa_base_is_global;  // rope.freq_base_swa defaults to rope.freq_base (else 10000)
    bool attn_softcap;   // reads attn_logit_softcapping
};

Status read_gemma_hparams(const GgufFile& f, ModelHParams* hp, const GemmaRules& rules) {
    const std::string p = hp->arch + ".";
    hp->embd_scale = std::sqrt(static_cast<float>(hp->n_embd));
    FERROX_RETURN_IF_ERROR(read_swa_hparams(f, hp, rules.n_swa, rules.swa_pattern, rules.swa_base_is_global));
    FERROX_ASSIGN_OR_RETURN(auto scale, f.get_float(p + "attention.scale"));
    if (scale) {
        if (!(*scale > 0)) return f.error("attention.scale must be > 0");
        hp->q_scale = static_cast<float>(*scale);
    } else {
        const int d = hp->n_layer == rules.n_layer_27b ? hp->n_embd / hp->n_head : hp->head_dim;
        hp->q_scale = 1.0f / std::sqrt(static_cast<float>(d));
    }
    hp->kq_scale = 1.0f;
    FERROX_ASSIGN_OR_RETURN(auto cap, f.get_float(p + "final_logit_softcapping"));
    if (cap) {
        if (!(*cap >= 0)) return f.error("final_logit_softcapping must be >= 0");
        hp->final_logit_softcap = static_cast<float>(*cap);
    }
    if (rules.attn_softcap) {
        FERROX_ASSIGN_OR_RETURN(auto attn_cap, f.get_float(p + "attn_logit_softcapping"));
        if (attn_cap) {
            if (!(*attn_cap >= 0)) return f.error("attn_logit_softcapping must be >= 0");
            hp->attn_logit_softcap = static_cast<float>(*attn_cap);
        }
    }
    return Status::ok();
}

Status read_gemma3_hparams(const GgufFile& f, ModelHParams* hp) {
    return read_gemma_hparams(f, hp, {.n_swa = 0, .swa_pattern = 6, .n_layer_27b = 62,
                                      .swa_base_is_global = false, .attn_softcap = false});
}

Status read_gemma2_hparams(const GgufFile& f, ModelHParams* hp) {
    return read_gemma_hparams(f, hp, {.n_swa = 4096, .swa_pattern = 2, .n_layer_27b = 46,
                                      .swa_base_is_global = true, .attn_softcap = true});
}

}  // namespace

extern const ArchTraits kArchGemma3 = {.name = "gemma3",
                                       .rope_ordering = RopeOrdering::kNeox,
                                       .qkv_bias = false,
                                       .qk_norm = true,
                                       .post_norms = true,
                                       .ffn_act = FfnActivation::kGeluTanh,
                                       .read_hparams = read_gemma3_hparams};

extern const ArchTraits kArchGemma2 = {.name = "gemma2",
                                       .rope_ordering = RopeOrdering::kNeox,
                                       .qkv_bias = false,
                                       .qk_norm = false,
                                       .post_norms = true,
                                       .ffn_act = FfnActivation::kGeluTanh,
                                       .read_hparams = read_gemma2_hparams};

}  // namespace ferrox
