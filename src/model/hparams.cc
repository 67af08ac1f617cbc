#include "model/hparams.h"

#include <cmath>

namespace ferrox {

Status read_hparam_int(const GgufFile& f, const std::string& key, bool required, int lo, int hi,
                       int* out) {
    FERROX_ASSIGN_OR_RETURN(auto v, f.get_int(key));
    if (!v) {
        if (required) return f.error("missing metadata '" + key + "'");
        return Status::ok();
    }
    if (*v < lo || *v > hi) {
        return f.error("metadata '" + key + "' = " + std::to_string(*v) + " is out of range [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = static_cast<int>(*v);
    return Status::ok();
}

namespace {
constexpr auto read_int = read_hparam_int;

// An integer key that may be one value per layer (llama.cpp's get_key_or_arr); all layers must agree.
Status read_uniform_int(const GgufFile& f, const std::string& key, int n_layer, int lo, int hi, int* out) {
    const GgufValue* v = f.find(key);
    if (!v || !v->is_array()) return read_int(f, key, false, lo, hi, out);
    const std::vector<GgufValue>& a = *v->as_array();
    if (static_cast<int>(a.size()) != n_layer) {
        return f.error("metadata '" + key + "' has " + std::to_string(a.size()) + " entries for " +
                       std::to_string(n_layer) + " layers");
    }
    for (const GgufValue& e : a) {
        const auto x = e.as_int();
        if (!x || *x != *a[0].as_int()) return f.error("metadata '" + key + "' differs between layers (not supported)");
    }
    const auto x = a.empty() ? std::nullopt : a[0].as_int();
    if (!x || *x < lo || *x > hi) return f.error("metadata '" + key + "' is out of range");
    *out = static_cast<int>(*x);
    return Status::ok();
}
// YaRN's parameters as llama.cpp sets them for a model that does not override them: extension
// factor 1, the betas 32 and 1, and an attention factor whose 1 + 0.1 ln(factor) cancels the one
// ggml's rope_yarn multiplies in.
Status read_yarn(const GgufFile& f, const std::string& p, ModelHParams* hp) {
    hp->yarn_ext_factor = 1.0f;
    hp->n_ctx_orig_yarn = hp->n_ctx_train;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "rope.scaling.original_context_length", false, 1, 1 << 26, &hp->n_ctx_orig_yarn));
    if (f.find(p + "rope.scaling.yarn_log_multiplier")) {
        return unimplemented(f.path() + ": metadata '" + p + "rope.scaling.yarn_log_multiplier' is not supported");
    }
    const float factor = 1.0f / hp->rope_freq_scale;
    const auto mscale = [](float scale) { return scale <= 1.0f ? 1.0f : 0.1f * std::log(scale) + 1.0f; };
    hp->yarn_attn_factor = mscale(factor);
    if (factor > 0) hp->yarn_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
    return Status::ok();
}

}  // namespace

Status read_swa_hparams(const GgufFile& f, ModelHParams* hp, int n_swa, int pattern_default, bool base_is_global) {
    const std::string p = hp->arch + ".";
    hp->n_swa = n_swa;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "attention.sliding_window", false, 0, 1 << 26, &hp->n_swa));
    if (hp->n_swa == 0) return Status::ok();
    hp->swa_layers.assign(hp->n_layer, 0);
    const std::string key = p + "attention.sliding_window_pattern";
    const GgufValue* pattern = f.find(key);
    if (pattern && pattern->is_array()) {  // one bool per layer: true = local
        const std::vector<GgufValue>& entries = *pattern->as_array();
        if (static_cast<int>(entries.size()) != hp->n_layer) {
            return f.error(key + " has " + std::to_string(entries.size()) + " entries for " +
                           std::to_string(hp->n_layer) + " layers");
        }
        for (int il = 0; il < hp->n_layer; ++il) {
            const auto v = entries[il].as_int();  // bools read as 0/1
            if (!v) return f.error(key + " is not an array of bools");
            hp->swa_layers[il] = *v != 0;
        }
    } else {
        int n_pattern = pattern_default;
        FERROX_RETURN_IF_ERROR(read_int(f, key, false, 0, 4096, &n_pattern));
        for (int il = 0; il < hp->n_layer; ++il) hp->swa_layers[il] = n_pattern == 0 || il % n_pattern < n_pattern - 1;
    }
    if (base_is_global) hp->rope_freq_base_swa = hp->rope_freq_base;
    FERROX_ASSIGN_OR_RETURN(auto base_swa, f.get_float(p + "rope.freq_base_swa"));
    if (base_swa) {
        if (!(*base_swa > 1)) return f.error("rope.freq_base_swa must be > 1");
        hp->rope_freq_base_swa = static_cast<float>(*base_swa);
    }
    return Status::ok();
}

Status read_moe_hparams(const GgufFile& f, ModelHParams* hp) {
    const std::string p = hp->arch + ".";
    FERROX_RETURN_IF_ERROR(read_int(f, p + "expert_count", false, 0, 4096, &hp->n_expert));
    if (hp->n_expert == 0) return Status::ok();
    FERROX_RETURN_IF_ERROR(read_uniform_int(f, p + "expert_used_count", hp->n_layer, 1, hp->n_expert, &hp->n_expert_used));
    if (hp->n_expert_used == 0) return f.error("missing metadata '" + p + "expert_used_count'");
    hp->n_ff_exp = hp->n_ff;
    FERROX_RETURN_IF_ERROR(read_uniform_int(f, p + "expert_feed_forward_length", hp->n_layer, 1, 1 << 24, &hp->n_ff_exp));
    hp->n_ff_shexp = hp->n_ff;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "expert_shared_feed_forward_length", false, 1, 1 << 24, &hp->n_ff_shexp));
    // Keys of router variants these architectures do not have (llama.cpp ignores them for
    // them too, but a file that sets them was not made for this graph).
    int groups = 0;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "expert_group_count", false, 0, 4096, &groups));
    if (groups > 1) return unimplemented(f.path() + ": metadata '" + p + "expert_group_count' (grouped routing) is not supported");
    return Status::ok();
}

Expected<ModelHParams> read_llama_family_hparams(const GgufFile& f, const std::string& arch) {
    ModelHParams hp;
    hp.arch = arch;
    const std::string p = arch + ".";
    constexpr int kBig = 1 << 24;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "embedding_length", true, 1, kBig, &hp.n_embd));
    FERROX_RETURN_IF_ERROR(read_int(f, p + "block_count", true, 1, 4096, &hp.n_layer));
    FERROX_RETURN_IF_ERROR(read_int(f, p + "feed_forward_length", true, 1, kBig, &hp.n_ff));
    FERROX_RETURN_IF_ERROR(read_int(f, p + "attention.head_count", true, 1, 4096, &hp.n_head));
    hp.n_head_kv = hp.n_head;
    FERROX_RETURN_IF_ERROR(
        read_int(f, p + "attention.head_count_kv", false, 1, 4096, &hp.n_head_kv));
    hp.n_ctx_train = 4096;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "context_length", false, 1, 1 << 26, &hp.n_ctx_train));
    if (hp.n_embd % hp.n_head != 0 && !f.find(p + "attention.key_length")) {
        return f.error("embedding_length " + std::to_string(hp.n_embd) +
                       " is not a multiple of head_count " + std::to_string(hp.n_head));
    }
    hp.head_dim = hp.n_embd / hp.n_head;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "attention.key_length", false, 1, 4096, &hp.head_dim));
    int v_len = hp.head_dim;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "attention.value_length", false, 1, 4096, &v_len));
    if (v_len != hp.head_dim) return f.error("attention.value_length != key_length is not supported");
    if (hp.n_head % hp.n_head_kv != 0) {
        return f.error("head_count " + std::to_string(hp.n_head) +
                       " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    }
    hp.n_rot = hp.head_dim;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "rope.dimension_count", false, 2, 4096, &hp.n_rot));
    if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
        return f.error("rope.dimension_count " + std::to_string(hp.n_rot) + " is invalid for head size " +
                       std::to_string(hp.head_dim));
    }
    FERROX_ASSIGN_OR_RETURN(auto eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
    if (eps) {
        if (!(*eps > 0 && *eps < 1)) return f.error("layer_norm_rms_epsilon out of range");
        hp.rms_eps = static_cast<float>(*eps);
    }
    FERROX_ASSIGN_OR_RETURN(auto base, f.get_float(p + "rope.freq_base"));
    if (base) {
        if (!(*base > 1)) return f.error("rope.freq_base must be > 1");
        hp.rope_freq_base = static_cast<float>(*base);
    }
    FERROX_ASSIGN_OR_RETURN(auto scaling, f.get_string(p + "rope.scaling.type"));
    {
        FERROX_ASSIGN_OR_RETURN(auto fs, f.get_float(p + "rope.scale_linear"));
        if (fs && *fs > 0) hp.rope_freq_scale = static_cast<float>(1.0 / *fs);
    }
    if (scaling && *scaling != "none") {
        FERROX_ASSIGN_OR_RETURN(auto factor, f.get_float(p + "rope.scaling.factor"));
        if (*scaling == "linear" || *scaling == "yarn") {
            if (factor && *factor > 0) hp.rope_freq_scale = static_cast<float>(1.0 / *factor);
        } else if (*scaling != "llama3") {  // llama3 scaling comes as the rope_freqs tensor
            return unimplemented(f.path() + ": rope scaling '" + *scaling + "' is not supported");
        }
        if (*scaling == "yarn") FERROX_RETURN_IF_ERROR(read_yarn(f, p, &hp));
    }
    {  // multiplies cos and sin, YaRN or not (llama.cpp's rope_attn_factor)
        FERROX_ASSIGN_OR_RETURN(auto attn_factor, f.get_float(p + "rope.scaling.attn_factor"));
        if (attn_factor) hp.yarn_attn_factor *= static_cast<float>(*attn_factor);
    }
    hp.n_vocab = 0;
    FERROX_RETURN_IF_ERROR(read_int(f, p + "vocab_size", false, 1, 1 << 24, &hp.n_vocab));
    return hp;
}

}  // namespace ferrox
