#include "model/weights.h"

#include <cmath>
#include <span>

#include "kernels/quants.h"

namespace ferrox {

#define FERROX_ARCH(traits) extern const ArchTraits traits;
#include "model/archs.def"
#undef FERROX_ARCH

const ArchTraits* find_arch(const std::string& name) {
    // (A table rather than self-registering objects: the linker drops an object file of a
    // static library that nothing references, initializers and all.)
#define FERROX_ARCH(traits) &traits,
    static const ArchTraits* const kArchs[] = {
#include "model/archs.def"
    };
#undef FERROX_ARCH
    for (const ArchTraits* a : kArchs) {
        if (name == a->name) return a;
    }
    return nullptr;
}

namespace {

std::string shape_text(std::span<const int64_t> ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

}  // namespace

Status check_tensor_shape(const TensorView& t, std::initializer_list<int64_t> ne) {
    bool ok = ne.size() <= t.ne.size();
    for (size_t i = 0; ok && i < t.ne.size(); ++i) ok = t.ne[i] == (i < ne.size() ? *(ne.begin() + i) : 1);
    if (ok) return Status::ok();
    const size_t shown = std::max<size_t>(ne.size(), static_cast<size_t>(std::max(1, t.n_dims)));
    return invalid_argument("tensor '" + t.name + "' has shape " +
                            shape_text(std::span<const int64_t>(t.ne.data(), std::min(shown, t.ne.size()))) +
                            ", expected " + shape_text(std::span<const int64_t>(ne.begin(), ne.size())));
}

namespace {


Expected<const TensorView*> get_matrix(const GgufFile& f, const std::string& name, int64_t n_in,
                                       int64_t n_out) {
    const TensorView* t = f.find_tensor(name);
    if (!t) return f.error("missing tensor '" + name + "'");
    if (!is_weight_type(t->type)) {
        return unimplemented(f.path() + ": tensor '" + name + "' has type " +
                             std::string(dtype_name(t->type)) + ", not usable as a weight");
    }
    if (Status st = check_tensor_shape(*t, {n_in, n_out}); !st.is_ok()) return f.error(st.message());
    return t;
}

// The experts' matrices of a layer: a 3-D (n_in, n_out, n_expert) tensor, each expert's matrix
// stored as one of ordinary rows.
Expected<const TensorView*> get_experts(const GgufFile& f, const std::string& name, int64_t n_in, int64_t n_out,
                                        int64_t n_expert) {
    const TensorView* t = f.find_tensor(name);
    if (!t) return f.error("missing tensor '" + name + "'");
    if (!is_weight_type(t->type)) {
        return unimplemented(f.path() + ": tensor '" + name + "' has type " + std::string(dtype_name(t->type)) +
                             ", not usable as a weight");
    }
    if (Status st = check_tensor_shape(*t, {n_in, n_out, n_expert}); !st.is_ok()) return f.error(st.message());
    return t;
}

// 1-D parameters (norm weights, biases) are small: converted to owned floats at load so the
// forward pass reads them without caring how the file stored them.
Expected<std::vector<float>> get_vector(const GgufFile& f, const std::string& name, int64_t n,
                                        bool required) {
    const TensorView* t = f.find_tensor(name);
    if (!t) {
        if (required) return f.error("missing tensor '" + name + "'");
        return std::vector<float>();
    }
    if (Status st = check_tensor_shape(*t, {n}); !st.is_ok()) return f.error(st.message());
    std::vector<float> out(n);
    dequantize_row_ref(t->type, t->data, out.data(), n);
    return out;
}

// A small tensor of any shape (biases of experts) as owned floats.
Expected<std::vector<float>> get_floats(const GgufFile& f, const std::string& name, std::initializer_list<int64_t> ne) {
    const TensorView* t = f.find_tensor(name);
    if (!t) return f.error("missing tensor '" + name + "'");
    if (Status st = check_tensor_shape(*t, ne); !st.is_ok()) return f.error(st.message());
    std::vector<float> out(t->n_elements());
    for (int64_t r = 0; r < t->n_rows(); ++r) dequantize_row_ref(t->type, t->row(r), out.data() + r * t->ne[0], t->ne[0]);
    return out;
}

// A mixture-of-experts layer's FFN tensors (llama.cpp's names): the router, the experts and,
// where the architecture has one, the shared expert and its gate.
Status load_moe_layer(const GgufFile& f, const ModelWeights& w, const std::string& p, LayerWeights* L) {
    const ModelHParams& hp = w.hp;
    FERROX_ASSIGN_OR_RETURN(L->gate_inp, get_matrix(f, p + "ffn_gate_inp.weight", hp.n_embd, hp.n_expert));
    FERROX_ASSIGN_OR_RETURN(L->gate_exps, get_experts(f, p + "ffn_gate_exps.weight", hp.n_embd, hp.n_ff_exp, hp.n_expert));
    FERROX_ASSIGN_OR_RETURN(L->up_exps, get_experts(f, p + "ffn_up_exps.weight", hp.n_embd, hp.n_ff_exp, hp.n_expert));
    FERROX_ASSIGN_OR_RETURN(L->down_exps, get_experts(f, p + "ffn_down_exps.weight", hp.n_ff_exp, hp.n_embd, hp.n_expert));
    if (w.traits.shared_expert) {
        FERROX_ASSIGN_OR_RETURN(L->w_gate, get_matrix(f, p + "ffn_gate_shexp.weight", hp.n_embd, hp.n_ff_shexp));
        FERROX_ASSIGN_OR_RETURN(L->w_up, get_matrix(f, p + "ffn_up_shexp.weight", hp.n_embd, hp.n_ff_shexp));
        FERROX_ASSIGN_OR_RETURN(L->w_down, get_matrix(f, p + "ffn_down_shexp.weight", hp.n_ff_shexp, hp.n_embd));
        FERROX_ASSIGN_OR_RETURN(L->gate_inp_shexp, get_vector(f, p + "ffn_gate_inp_shexp.weight", hp.n_embd, true));
    }
    if (w.traits.moe_biases) {
        FERROX_ASSIGN_OR_RETURN(L->gate_inp_b, get_floats(f, p + "ffn_gate_inp.bias", {hp.n_expert}));
        FERROX_ASSIGN_OR_RETURN(L->gate_exps_b, get_floats(f, p + "ffn_gate_exps.bias", {hp.n_ff_exp, hp.n_expert}));
        FERROX_ASSIGN_OR_RETURN(L->up_exps_b, get_floats(f, p + "ffn_up_exps.bias", {hp.n_ff_exp, hp.n_expert}));
        FERROX_ASSIGN_OR_RETURN(L->down_exps_b, get_floats(f, p + "ffn_down_exps.bias", {hp.n_embd, hp.n_expert}));
    }
    // Tensors of variants this graph does not compute: refused by name, not ignored.
    std::vector<const char*> refused = {"exp_probs_b.bias", "ffn_gate_up_exps.weight"};
    if (!w.traits.moe_biases) {
        refused.insert(refused.end(), {"ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"});
    }
    for (const char* name : refused) {
        if (f.find_tensor(p + name)) return unimplemented(f.path() + ": tensor '" + p + name + "' is not supported");
    }
    return Status::ok();
}

}  // namespace

Expected<ModelWeights> ModelWeights::load(const GgufFile& f) {
    FERROX_ASSIGN_OR_RETURN(auto arch, f.get_string("general.architecture"));
    if (!arch) return f.error("missing metadata 'general.architecture'");
    const ArchTraits* traits = find_arch(*arch);
    if (!traits) return unimplemented(f.path() + ": unsupported architecture '" + *arch + "'");

    ModelWeights w;
    w.traits = *traits;
    FERROX_ASSIGN_OR_RETURN(w.hp, read_llama_family_hparams(f, *arch));
    ModelHParams& hp = w.hp;
    hp.rope_ordering = traits->rope_ordering;
    if (traits->read_hparams) FERROX_RETURN_IF_ERROR(traits->read_hparams(f, &hp));
    FERROX_RETURN_IF_ERROR(read_moe_hparams(f, &hp));
    if (hp.n_expert > 0 && traits->moe_if_experts) w.traits.ffn = FfnKind::kMoe;
    const bool moe = w.traits.ffn == FfnKind::kMoe;
    if (moe && hp.n_expert == 0) return f.error("missing metadata '" + *arch + ".expert_count'");
    if (!moe && hp.n_expert > 0) {
        return unimplemented(f.path() + ": '" + *arch + ".expert_count' > 0: experts are not supported in this architecture");
    }
    if (hp.kq_scale == 0.0f) hp.kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));

    const TensorView* embd = f.find_tensor("token_embd.weight");
    if (!embd) return f.error("missing tensor 'token_embd.weight'");
    if (embd->ne[0] != hp.n_embd || embd->n_dims != 2) {
        return f.error("token_embd.weight does not have n_embd = " + std::to_string(hp.n_embd) +
                       " columns");
    }
    if (!is_weight_type(embd->type)) return f.error("token_embd.weight has an unusable type");
    if (hp.n_vocab == 0) hp.n_vocab = static_cast<int>(embd->ne[1]);
    if (embd->ne[1] != hp.n_vocab) return f.error("token_embd.weight rows != vocab_size");
    w.tok_embd = embd;
    if (f.find_tensor("output.weight")) {
        FERROX_ASSIGN_OR_RETURN(w.output, get_matrix(f, "output.weight", hp.n_embd, hp.n_vocab));
    } else {
        w.output = embd;  // tied embeddings
    }
    FERROX_ASSIGN_OR_RETURN(w.output_norm, get_vector(f, "output_norm.weight", hp.n_embd, true));
    FERROX_ASSIGN_OR_RETURN(w.rope_freq_factors,
                            get_vector(f, "rope_freqs.weight", hp.n_rot / 2, false));

    w.layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        LayerWeights& L = w.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        FERROX_ASSIGN_OR_RETURN(L.attn_norm, get_vector(f, p + "attn_norm.weight", hp.n_embd, true));
        FERROX_ASSIGN_OR_RETURN(L.ffn_norm,
                                get_vector(f, p + traits->ffn_norm_name + ".weight", hp.n_embd, true));
        FERROX_ASSIGN_OR_RETURN(L.wq, get_matrix(f, p + "attn_q.weight", hp.n_embd, hp.q_dim()));
        FERROX_ASSIGN_OR_RETURN(L.wk, get_matrix(f, p + "attn_k.weight", hp.n_embd, hp.kv_dim()));
        FERROX_ASSIGN_OR_RETURN(L.wv, get_matrix(f, p + "attn_v.weight", hp.n_embd, hp.kv_dim()));
        FERROX_ASSIGN_OR_RETURN(L.wo, get_matrix(f, p + "attn_output.weight", hp.q_dim(), hp.n_embd));
        if (moe) {
            FERROX_RETURN_IF_ERROR(load_moe_layer(f, w, p, &L));
        } else {
            FERROX_ASSIGN_OR_RETURN(L.w_gate, get_matrix(f, p + "ffn_gate.weight", hp.n_embd, hp.n_ff));
            FERROX_ASSIGN_OR_RETURN(L.w_up, get_matrix(f, p + "ffn_up.weight", hp.n_embd, hp.n_ff));
            FERROX_ASSIGN_OR_RETURN(L.w_down, get_matrix(f, p + "ffn_down.weight", hp.n_ff, hp.n_embd));
        }
        if (traits->qkv_bias) {
            FERROX_ASSIGN_OR_RETURN(L.bq, get_vector(f, p + "attn_q.bias", hp.q_dim(), true));
            FERROX_ASSIGN_OR_RETURN(L.bk, get_vector(f, p + "attn_k.bias", hp.kv_dim(), true));
            FERROX_ASSIGN_OR_RETURN(L.bv, get_vector(f, p + "attn_v.bias", hp.kv_dim(), true));
        }
        if (traits->qk_norm) {
            const int qn = traits->qk_norm_full ? hp.q_dim() : hp.head_dim;
            const int kn = traits->qk_norm_full ? hp.kv_dim() : hp.head_dim;
            FERROX_ASSIGN_OR_RETURN(L.q_norm, get_vector(f, p + "attn_q_norm.weight", qn, true));
            FERROX_ASSIGN_OR_RETURN(L.k_norm, get_vector(f, p + "attn_k_norm.weight", kn, true));
        }
        if (traits->attn_out_bias) {
            FERROX_ASSIGN_OR_RETURN(L.bo, get_vector(f, p + "attn_output.bias", hp.n_embd, true));
        }
        if (traits->attn_sinks) {
            FERROX_ASSIGN_OR_RETURN(L.attn_sinks, get_vector(f, p + "attn_sinks.weight", hp.n_head, true));
        }
        if (traits->post_norms) {
            FERROX_ASSIGN_OR_RETURN(L.post_attn_norm,
                                    get_vector(f, p + "post_attention_norm.weight", hp.n_embd, true));
            FERROX_ASSIGN_OR_RETURN(L.post_ffn_norm, get_vector(f, p + "post_ffw_norm.weight", hp.n_embd, true));
        }
    }

    return w;
}

}  // namespace ferrox
