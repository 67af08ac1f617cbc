// bert: the encoder of BERT (Devlin et al. 2019) as HF's BertModel computes it, and every
// checkpoint of the same shape (MiniLM, BGE, E5, GTE-base...). Per block, post-layer-norm:
//   x = LN(x + Wo . attn(Wq x + bq, Wk x + bk, Wv x + bv) + bo)
//   x = LN(x + Wdown . gelu(Wup x + bup) + bdown)
// after embeddings LN(word[id] + position[i] + token_type[0]); attention is bidirectional
// within each sequence (no mask beyond the sequence's own tokens, no padding, no KV cache).
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/json_depth.h"
#include "core/log.h"
#include "kernels/ops.h"
#include "kernels/quants.h"
#include "model/encoder.h"

namespace ferrox {

const char* pooling_name(Pooling p) {
    switch (p) {
        case Pooling::kMean: return "mean";
        case Pooling::kCls: return "cls";
        case Pooling::kLast: return "last";
    }
    return "?";
}

namespace {

// A weight as f32 rows: (n_rows, n_cols) row-major, from any type the loaders give.
Expected<std::vector<float>> to_f32(const TensorView& t, int64_t n_cols, int64_t n_rows, const std::string& file) {
    if (t.ne[0] != n_cols || t.n_rows() != n_rows || t.packed8) {
        return invalid_argument(file + ": tensor '" + t.name + "' has shape [" + std::to_string(t.ne[0]) + ", " +
                                std::to_string(t.n_rows()) + "], expected [" + std::to_string(n_cols) + ", " +
                                std::to_string(n_rows) + "]");
    }
    std::vector<float> out(static_cast<size_t>(n_cols * n_rows));
    std::vector<uint8_t> row(static_cast<size_t>(t.row_bytes()) + 64);
    for (int64_t r = 0; r < n_rows; ++r) {
        // Copied first: safetensors data need not be aligned for the element type.
        std::memcpy(row.data(), t.row(r), static_cast<size_t>(t.row_bytes()));
        dequantize_row_ref(t.type, row.data(), out.data() + r * n_cols, n_cols);
    }
    return out;
}

Status check_range(const std::string& file, const char* key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
        return invalid_argument(file + ": " + key + " = " + std::to_string(v) + " is out of range [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return Status::ok();
}

// sentence-transformers' modules.json, its Pooling module's config and sentence_bert_config.json.
Status read_sentence_transformers(const std::string& dir, EncoderHParams& hp) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path modules = fs::path(dir) / "modules.json";
    if (!fs::exists(modules, ec)) return Status::ok();  // mean pooling, normalized (the defaults)
    FERROX_ASSIGN_OR_RETURN(std::string text, read_file(modules.string()));
    if (json_nesting_depth(text, kMaxModelJsonDepth) > kMaxModelJsonDepth) {
        return invalid_argument(modules.string() + ": JSON nested deeper than " +
                                std::to_string(kMaxModelJsonDepth) + " levels");
    }
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_array()) return invalid_argument(modules.string() + ": not a JSON array of modules");
    hp.normalize = false;
    for (const auto& m : j) {
        if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) {
            return invalid_argument(modules.string() + ": a module without a type");
        }
        const std::string type = m["type"].get<std::string>();
        const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
        if (type.ends_with(".Normalize")) {
            hp.normalize = true;
        } else if (type.ends_with(".Pooling")) {
            if (path.find("..") != std::string::npos) return invalid_argument(modules.string() + ": bad pooling path");
            const std::string cfg_path = (fs::path(dir) / path / "config.json").string();
            FERROX_ASSIGN_OR_RETURN(HfConfig cfg, HfConfig::open(cfg_path));
            auto flag = [&](const char* key) -> Expected<bool> {
                FERROX_ASSIGN_OR_RETURN(auto v, cfg.get_bool(key));
                return v.value_or(false);
            };
            FERROX_ASSIGN_OR_RETURN(bool cls, flag("pooling_mode_cls_token"));
            FERROX_ASSIGN_OR_RETURN(bool mean, flag("pooling_mode_mean_tokens"));
            FERROX_ASSIGN_OR_RETURN(bool last, flag("pooling_mode_lasttoken"));
            FERROX_ASSIGN_OR_RETURN(bool max, flag("pooling_mode_max_tokens"));
            FERROX_ASSIGN_OR_RETURN(bool sqrt_len, flag("pooling_mode_mean_sqrt_len_tokens"));
            if (int(cls) + int(mean) + int(last) + int(max) + int(sqrt_len) != 1) {
                return unimplemented(cfg_path + ": exactly one of CLS, mean or last-token pooling is supported");
            }
            if (max || sqrt_len) return unimplemented(cfg_path + ": max and mean-sqrt-len pooling are not supported");
            hp.pooling = cls ? Pooling::kCls : last ? Pooling::kLast : Pooling::kMean;
        } else if (!type.ends_with(".Transformer")) {
            return unimplemented(modules.string() + ": module '" + type + "' is not supported");
        }
    }
    const fs::path sb = fs::path(dir) / "sentence_bert_config.json";
    if (fs::exists(sb, ec)) {
        FERROX_ASSIGN_OR_RETURN(HfConfig cfg, HfConfig::open(sb.string()));
        FERROX_ASSIGN_OR_RETURN(auto n, cfg.get_int("max_seq_length"));
        if (n && *n > 0 && *n < hp.max_tokens) hp.max_tokens = static_cast<int>(*n);
    }
    return Status::ok();
}

}  // namespace

EncoderModel::~EncoderModel() = default;

int64_t EncoderModel::weight_bytes() const {
    size_t n = tok_embd_.size() + pos_embd_.size() + type_embd_.size() + 2 * ln_emb_w_.size();
    int64_t matrices = 0;
    for (const Layer& l : layers_) {
        for (const PackedMatrix* w : {&l.w_qkv, &l.w_o, &l.w_up, &l.w_down}) matrices += w->bytes();
        n += l.b_qkv.size() + l.b_o.size() + l.b_up.size() + l.b_down.size() + 4 * l.ln1_w.size();
    }
    return static_cast<int64_t>(n * sizeof(float)) + matrices;
}

Expected<std::unique_ptr<EncoderModel>> EncoderModel::load_dir(const std::string& dir, const EncoderOptions& opts) {
    namespace fs = std::filesystem;
    FERROX_ASSIGN_OR_RETURN(HfConfig cfg, HfConfig::open((fs::path(dir) / "config.json").string()));
    FERROX_ASSIGN_OR_RETURN(auto model_type, cfg.get_string("model_type"));
    if (!model_type || *model_type != "bert") {
        return unimplemented(cfg.path() + ": model_type '" + model_type.value_or("") +
                             "' is not an encoder ferrox runs (bert)");
    }
    FERROX_ASSIGN_OR_RETURN(auto act, cfg.get_string("hidden_act"));
    if (act && *act != "gelu") return unimplemented(cfg.path() + ": hidden_act '" + *act + "' (only gelu)");
    FERROX_ASSIGN_OR_RETURN(auto pos_type, cfg.get_string("position_embedding_type"));
    if (pos_type && *pos_type != "absolute") {
        return unimplemented(cfg.path() + ": position_embedding_type '" + *pos_type + "' (only absolute)");
    }
    std::unique_ptr<EncoderModel> m(new EncoderModel());
    EncoderHParams& hp = m->hp_;
    auto get = [&](const char* key, int64_t lo, int64_t hi, int* out) -> Status {
        FERROX_ASSIGN_OR_RETURN(auto v, cfg.get_int(key));
        if (!v) return invalid_argument(cfg.path() + ": missing '" + key + "'");
        FERROX_RETURN_IF_ERROR(check_range(cfg.path(), key, *v, lo, hi));
        *out = static_cast<int>(*v);
        return Status::ok();
    };
    FERROX_RETURN_IF_ERROR(get("vocab_size", 1, 1 << 22, &hp.n_vocab));
    FERROX_RETURN_IF_ERROR(get("hidden_size", 1, 1 << 16, &hp.n_embd));
    FERROX_RETURN_IF_ERROR(get("num_hidden_layers", 1, 1024, &hp.n_layer));
    FERROX_RETURN_IF_ERROR(get("num_attention_heads", 1, 1024, &hp.n_head));
    FERROX_RETURN_IF_ERROR(get("intermediate_size", 1, 1 << 18, &hp.n_ff));
    FERROX_RETURN_IF_ERROR(get("max_position_embeddings", 1, 1 << 16, &hp.n_pos));
    hp.n_token_types = 2;
    if (cfg.has("type_vocab_size")) FERROX_RETURN_IF_ERROR(get("type_vocab_size", 1, 1 << 10, &hp.n_token_types));
    FERROX_ASSIGN_OR_RETURN(auto eps, cfg.get_float("layer_norm_eps"));
    if (eps) {
        if (!(*eps > 0 && *eps < 1)) return invalid_argument(cfg.path() + ": layer_norm_eps out of range");
        hp.ln_eps = static_cast<float>(*eps);
    }
    hp.max_tokens = hp.n_pos;
    FERROX_ASSIGN_OR_RETURN(auto matryoshka, cfg.get_bool("is_matryoshka"));
    hp.matryoshka = matryoshka.value_or(false);
    FERROX_RETURN_IF_ERROR(read_sentence_transformers(dir, hp));

    FERROX_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::open(dir));
    // BertModel's names, or BertFor*'s with the "bert." prefix.
    const std::string prefix = ckpt->find("embeddings.word_embeddings.weight") ? "" : "bert.";
    static const std::pair<const char*, const char*> kNames[] = {
        {"tok", "embeddings.word_embeddings.weight"},  {"pos", "embeddings.position_embeddings.weight"},
        {"type", "embeddings.token_type_embeddings.weight"}, {"ln_emb.w", "embeddings.LayerNorm.weight"},
        {"ln_emb.b", "embeddings.LayerNorm.bias"},   {"q.w", "attention.self.query.weight"},
        {"q.b", "attention.self.query.bias"},        {"k.w", "attention.self.key.weight"},
        {"k.b", "attention.self.key.bias"},          {"v.w", "attention.self.value.weight"},
        {"v.b", "attention.self.value.bias"},        {"o.w", "attention.output.dense.weight"},
        {"o.b", "attention.output.dense.bias"},      {"ln1.w", "attention.output.LayerNorm.weight"},
        {"ln1.b", "attention.output.LayerNorm.bias"}, {"up.w", "intermediate.dense.weight"},
        {"up.b", "intermediate.dense.bias"},         {"down.w", "output.dense.weight"},
        {"down.b", "output.dense.bias"},             {"ln2.w", "output.LayerNorm.weight"},
        {"ln2.b", "output.LayerNorm.bias"},
    };
    const std::string where = ckpt->path();
    auto lookup = [&](const std::string& role, int il) -> Expected<TensorView> {
        const char* suffix = nullptr;
        for (const auto& [r, n] : kNames) {
            if (role == r) suffix = n;
        }
        CHECK(suffix != nullptr);
        const std::string name =
            prefix + (il < 0 ? std::string(suffix) : "encoder.layer." + std::to_string(il) + "." + suffix);
        const SafetensorsFile* f = nullptr;
        const SafetensorsTensor* t = ckpt->find(name, &f);
        if (!t) return invalid_argument(where + ": missing tensor '" + name + "'");
        return t->view(f->path());
    };
    m->opts_ = opts;
    FERROX_RETURN_IF_ERROR(m->init(lookup, where));
    return m;
}

Expected<std::unique_ptr<EncoderModel>> EncoderModel::load_gguf(const GgufFile& f, const EncoderOptions& opts) {
    FERROX_ASSIGN_OR_RETURN(auto arch, f.get_string("general.architecture"));
    if (!arch || *arch != "bert") return f.error("general.architecture is not bert");
    std::unique_ptr<EncoderModel> m(new EncoderModel());
    EncoderHParams& hp = m->hp_;
    auto get = [&](const std::string& key, int64_t lo, int64_t hi, bool required, int* out) -> Status {
        FERROX_ASSIGN_OR_RETURN(auto v, f.get_int(key));
        if (!v) return required ? f.error("missing metadata '" + key + "'") : Status::ok();
        FERROX_RETURN_IF_ERROR(check_range(f.path(), key.c_str(), *v, lo, hi));
        *out = static_cast<int>(*v);
        return Status::ok();
    };
    FERROX_RETURN_IF_ERROR(get("bert.embedding_length", 1, 1 << 16, true, &hp.n_embd));
    FERROX_RETURN_IF_ERROR(get("bert.block_count", 1, 1024, true, &hp.n_layer));
    FERROX_RETURN_IF_ERROR(get("bert.attention.head_count", 1, 1024, true, &hp.n_head));
    FERROX_RETURN_IF_ERROR(get("bert.feed_forward_length", 1, 1 << 18, true, &hp.n_ff));
    FERROX_RETURN_IF_ERROR(get("bert.context_length", 1, 1 << 16, true, &hp.n_pos));
    FERROX_ASSIGN_OR_RETURN(auto eps, f.get_float("bert.attention.layer_norm_epsilon"));
    if (eps) {
        if (!(*eps > 0 && *eps < 1)) return f.error("bert.attention.layer_norm_epsilon out of range");
        hp.ln_eps = static_cast<float>(*eps);
    }
    FERROX_ASSIGN_OR_RETURN(auto causal, f.get_bool("bert.attention.causal"));
    if (causal && *causal) return unimplemented(f.path() + ": causal bert attention is not supported");
    int pooling = 1;
    FERROX_RETURN_IF_ERROR(get("bert.pooling_type", 0, 16, false, &pooling));
    if (pooling == 1) hp.pooling = Pooling::kMean;
    else if (pooling == 2) hp.pooling = Pooling::kCls;
    else if (pooling == 3) hp.pooling = Pooling::kLast;
    else return unimplemented(f.path() + ": bert.pooling_type " + std::to_string(pooling) + " (mean, cls or last)");
    hp.normalize = true;  // llama.cpp's embeddings are L2-normalized
    hp.max_tokens = hp.n_pos;
    const TensorView* tok = f.find_tensor("token_embd.weight");
    const TensorView* types = f.find_tensor("token_types.weight");
    if (!tok) return f.error("missing tensor 'token_embd.weight'");
    hp.n_vocab = static_cast<int>(tok->ne[1]);
    hp.n_token_types = types ? static_cast<int>(types->ne[1]) : 0;
    if (!types) return f.error("missing tensor 'token_types.weight'");

    static const std::pair<const char*, const char*> kNames[] = {
        {"tok", "token_embd.weight"},       {"pos", "position_embd.weight"},   {"type", "token_types.weight"},
        {"ln_emb.w", "token_embd_norm.weight"}, {"ln_emb.b", "token_embd_norm.bias"},
        {"q.w", "attn_q.weight"},           {"q.b", "attn_q.bias"},            {"k.w", "attn_k.weight"},
        {"k.b", "attn_k.bias"},             {"v.w", "attn_v.weight"},          {"v.b", "attn_v.bias"},
        {"o.w", "attn_output.weight"},      {"o.b", "attn_output.bias"},       {"ln1.w", "attn_output_norm.weight"},
        {"ln1.b", "attn_output_norm.bias"}, {"up.w", "ffn_up.weight"},         {"up.b", "ffn_up.bias"},
        {"down.w", "ffn_down.weight"},      {"down.b", "ffn_down.bias"},       {"ln2.w", "layer_output_norm.weight"},
        {"ln2.b", "layer_output_norm.bias"},
    };
    auto lookup = [&](const std::string& role, int il) -> Expected<TensorView> {
        const char* suffix = nullptr;
        for (const auto& [r, n] : kNames) {
            if (role == r) suffix = n;
        }
        CHECK(suffix != nullptr);
        const std::string name = il < 0 ? std::string(suffix) : "blk." + std::to_string(il) + "." + suffix;
        const TensorView* t = f.find_tensor(name);
        if (!t) return f.error("missing tensor '" + name + "'");
        return *t;
    };
    m->opts_ = opts;
    FERROX_RETURN_IF_ERROR(m->init(lookup, f.path()));
    return m;
}

Status EncoderModel::init(const TensorLookup& lookup, const std::string& name) {
    EncoderHParams& hp = hp_;
    if (hp.n_embd % hp.n_head != 0) {
        return invalid_argument(name + ": hidden size " + std::to_string(hp.n_embd) +
                                " is not a multiple of the head count " + std::to_string(hp.n_head));
    }
    if (hp.n_token_types < 1) return invalid_argument(name + ": no token types");
    if (opts_.pooling) hp.pooling = *opts_.pooling;  // --pooling: the server's choice over the checkpoint's
    if (opts_.max_batch_tokens < hp.n_pos) opts_.max_batch_tokens = hp.n_pos;  // one longest input fits
    const int64_t H = hp.n_embd, F = hp.n_ff;
    // The precision a weight matrix is packed in: the checkpoint's own for F16 and BF16 (the
    // products see the same values at half the bytes), F32 for the rest.
    DType mat_type = DType::kF32;
    auto load = [&](const char* role, int il, int64_t cols, int64_t rows, std::vector<float>* out) -> Status {
        FERROX_ASSIGN_OR_RETURN(TensorView t, lookup(role, il));
        FERROX_ASSIGN_OR_RETURN(*out, to_f32(t, cols, rows, name));
        mat_type = t.type == DType::kF16 || t.type == DType::kBF16 ? t.type : DType::kF32;
        return Status::ok();
    };
    FERROX_RETURN_IF_ERROR(load("tok", -1, H, hp.n_vocab, &tok_embd_));
    FERROX_RETURN_IF_ERROR(load("pos", -1, H, hp.n_pos, &pos_embd_));
    FERROX_RETURN_IF_ERROR(load("type", -1, H, hp.n_token_types, &type_embd_));
    FERROX_RETURN_IF_ERROR(load("ln_emb.w", -1, H, 1, &ln_emb_w_));
    FERROX_RETURN_IF_ERROR(load("ln_emb.b", -1, H, 1, &ln_emb_b_));
    layers_.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer& l = layers_[il];
        std::vector<float> q, k, v, bq, bk, bv;
        FERROX_RETURN_IF_ERROR(load("q.w", il, H, H, &q));
        DType qkv_type = mat_type;
        FERROX_RETURN_IF_ERROR(load("k.w", il, H, H, &k));
        if (mat_type != qkv_type) qkv_type = DType::kF32;
        FERROX_RETURN_IF_ERROR(load("v.w", il, H, H, &v));
        if (mat_type != qkv_type) qkv_type = DType::kF32;
        FERROX_RETURN_IF_ERROR(load("q.b", il, H, 1, &bq));
        FERROX_RETURN_IF_ERROR(load("k.b", il, H, 1, &bk));
        FERROX_RETURN_IF_ERROR(load("v.b", il, H, 1, &bv));
        q.insert(q.end(), k.begin(), k.end());
        q.insert(q.end(), v.begin(), v.end());
        l.w_qkv = pack_matrix(q.data(), H, 3 * H, H, qkv_type);
        l.b_qkv = std::move(bq);
        l.b_qkv.insert(l.b_qkv.end(), bk.begin(), bk.end());
        l.b_qkv.insert(l.b_qkv.end(), bv.begin(), bv.end());
        std::vector<float> w;
        FERROX_RETURN_IF_ERROR(load("o.w", il, H, H, &w));
        l.w_o = pack_matrix(w.data(), H, H, H, mat_type);
        FERROX_RETURN_IF_ERROR(load("o.b", il, H, 1, &l.b_o));
        FERROX_RETURN_IF_ERROR(load("ln1.w", il, H, 1, &l.ln1_w));
        FERROX_RETURN_IF_ERROR(load("ln1.b", il, H, 1, &l.ln1_b));
        FERROX_RETURN_IF_ERROR(load("up.w", il, H, F, &w));
        l.w_up = pack_matrix(w.data(), H, F, H, mat_type);
        FERROX_RETURN_IF_ERROR(load("up.b", il, F, 1, &l.b_up));
        FERROX_RETURN_IF_ERROR(load("down.w", il, F, H, &w));
        l.w_down = pack_matrix(w.data(), F, H, F, mat_type);
        FERROX_RETURN_IF_ERROR(load("down.b", il, H, 1, &l.b_down));
        FERROX_RETURN_IF_ERROR(load("ln2.w", il, H, 1, &l.ln2_w));
        FERROX_RETURN_IF_ERROR(load("ln2.b", il, H, 1, &l.ln2_b));
    }
    const int n_threads = opts_.n_threads > 0 ? opts_.n_threads : hardware_threads();
    pool_ = std::make_unique<ThreadPool>(n_threads);
    const size_t T = static_cast<size_t>(opts_.max_batch_tokens);
    x_.resize(T * H);
    qkv_.resize(T * 3 * H);
    att_.resize(T * H);
    tmp_.resize(T * H);
    ff_.resize(T * F);
    const size_t D = static_cast<size_t>(H / hp.n_head), P = static_cast<size_t>(hp.n_pos);
    scores_.resize(static_cast<size_t>(n_threads) * (P * P + D * P));
    return Status::ok();
}

// y = epi(x W^T) in units of (a block of at most 64 rows of x) x (a group of W's 32-column
// panels) dealt out to the pool: a big batch streams each panel from cache over its rows, and a
// small one (14 tokens: one row block) still gives every thread a share of the panels.
void EncoderModel::linear(const float* x, int64_t n_tok, const PackedMatrix& w, const GemmEpilogue& epi, float* y) {
    constexpr int64_t kRowBlock = 64;
    const int n_threads = pool_->n_threads();
    const int64_t n_mb = (n_tok + kRowBlock - 1) / kRowBlock;
    const int64_t mb = (n_tok + n_mb - 1) / n_mb;  // rows per block, as even as possible
    const int64_t n_panels = w.n_panels();
    const int64_t n_pg = std::max<int64_t>(1, std::min<int64_t>((n_threads * 2 + n_mb - 1) / n_mb, n_panels));
    const int64_t pg = (n_panels + n_pg - 1) / n_pg;  // panels per group
    const int64_t n_units = n_mb * n_pg;
    std::atomic<int64_t> next{0};
    pool_->run([&](int, int) {
        for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < n_units;) {
            const int64_t r0 = (u / n_pg) * mb, r1 = std::min(n_tok, r0 + mb);
            const int64_t p0 = (u % n_pg) * pg, p1 = std::min(n_panels, p0 + pg);
            if (r0 >= r1 || p0 >= p1) continue;
            GemmEpilogue e = epi;
            if (e.res) e.res += r0 * e.ld_res;
            gemm_f32_packed(x + r0 * w.k, w.k, w, p0, p1, y + r0 * w.n, w.n, r1 - r0, e);
        }
    });
}

// y = LN(x) * w + b per token, statistics in double over float values.
void EncoderModel::layer_norm(const float* x, const std::vector<float>& w, const std::vector<float>& b, int64_t n_tok,
                              float* y) {
    const int64_t H = hp_.n_embd;
    const float eps = hp_.ln_eps;
    pool_->run([&](int i_thread, int n_threads) {
        int64_t t0, t1;
        ThreadPool::split(n_tok, i_thread, n_threads, 1, &t0, &t1);
        for (int64_t t = t0; t < t1; ++t) {
            const float* v = x + t * H;
            double sum = 0;
            for (int64_t i = 0; i < H; ++i) sum += v[i];
            const float mean = static_cast<float>(sum / static_cast<double>(H));
            double ss = 0;
            for (int64_t i = 0; i < H; ++i) {
                const float d = v[i] - mean;
                ss += static_cast<double>(d) * d;
            }
            const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(H) + eps));
            float* o = y + t * H;
            for (int64_t i = 0; i < H; ++i) o[i] = (v[i] - mean) * inv * w[i] + b[i];
        }
    });
}

// att = softmax(Q K^T / sqrt(d)) V for every (sequence, head), threaded across those pairs.
void EncoderModel::attention(std::span<const std::span<const int32_t>> seqs) {
    const int64_t H = hp_.n_embd, n_head = hp_.n_head, D = H / n_head, P = hp_.n_pos;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t n_units = static_cast<int64_t>(seqs.size()) * n_head;
    std::atomic<int64_t> next{0};
    pool_->run([&](int i_thread, int) {
        float* s = scores_.data() + static_cast<size_t>(i_thread) * (P * P + D * P);
        float* vt = s + P * P;
        for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < n_units;) {
            const int64_t i_seq = u / n_head, h = u % n_head;
            const int64_t L = static_cast<int64_t>(seqs[i_seq].size());
            const int64_t b = seq_begin_[i_seq];
            const float* q = qkv_.data() + b * 3 * H + h * D;
            const float* k = q + H;
            const float* v = q + 2 * H;
            gemm_f32(q, 3 * H, k, 3 * H, s, L, L, L, D);  // (L, L)
            for (int64_t i = 0; i < L; ++i) {
                vec_scale(s + i * L, scale, s + i * L, L);
                softmax_inplace(s + i * L, L);
            }
            for (int64_t j = 0; j < L; ++j) {
                for (int64_t d = 0; d < D; ++d) vt[d * L + j] = v[j * 3 * H + d];
            }
            gemm_f32(s, L, vt, L, att_.data() + b * H + h * D, H, L, D, L);  // (L, D)
        }
    });
}

Status EncoderModel::forward(std::span<const std::span<const int32_t>> seqs) {
    const int64_t H = hp_.n_embd;
    int64_t T = 0;
    seq_begin_.clear();
    for (const auto& s : seqs) {
        if (s.empty() || static_cast<int64_t>(s.size()) > hp_.n_pos) {
            return invalid_argument("encoder: a sequence of " + std::to_string(s.size()) + " tokens (1 to " +
                                    std::to_string(hp_.n_pos) + ")");
        }
        for (int32_t id : s) {
            if (id < 0 || id >= hp_.n_vocab) return invalid_argument("encoder: token id " + std::to_string(id) + " out of range");
        }
        seq_begin_.push_back(static_cast<int>(T));
        T += static_cast<int64_t>(s.size());
    }
    if (T > opts_.max_batch_tokens) {
        return invalid_argument("encoder: " + std::to_string(T) + " tokens in one batch (at most " +
                                std::to_string(opts_.max_batch_tokens) + ")");
    }
    // Embeddings: word + position + token type 0.
    for (size_t i = 0; i < seqs.size(); ++i) {
        for (int64_t p = 0; p < static_cast<int64_t>(seqs[i].size()); ++p) {
            float* x = x_.data() + (seq_begin_[i] + p) * H;
            vec_add(tok_embd_.data() + static_cast<int64_t>(seqs[i][p]) * H, pos_embd_.data() + p * H, x, H);
            vec_add(x, type_embd_.data(), x, H);
        }
    }
    layer_norm(x_.data(), ln_emb_w_, ln_emb_b_, T, x_.data());
    // Bias, residual and GELU ride in the GEMMs' stores: one pool dispatch per matrix product.
    GemmEpilogue bias_res;  // y = x W^T + b + x_ (the residual), then LN of y into x_
    bias_res.res = x_.data();
    bias_res.ld_res = H;
    for (const Layer& l : layers_) {
        GemmEpilogue qkv;
        qkv.bias = l.b_qkv.data();
        linear(x_.data(), T, l.w_qkv, qkv, qkv_.data());
        attention(seqs);
        bias_res.bias = l.b_o.data();
        linear(att_.data(), T, l.w_o, bias_res, tmp_.data());
        layer_norm(tmp_.data(), l.ln1_w, l.ln1_b, T, x_.data());
        GemmEpilogue up;
        up.bias = l.b_up.data();
        up.gelu = true;
        linear(x_.data(), T, l.w_up, up, ff_.data());
        bias_res.bias = l.b_down.data();
        linear(ff_.data(), T, l.w_down, bias_res, tmp_.data());
        layer_norm(tmp_.data(), l.ln2_w, l.ln2_b, T, x_.data());
    }
    return Status::ok();
}

Status EncoderModel::encode_tokens(std::span<const std::span<const int32_t>> seqs, std::span<float> out) {
    FERROX_RETURN_IF_ERROR(forward(seqs));
    size_t T = 0;
    for (const auto& s : seqs) T += s.size();
    CHECK(out.size() >= T * hp_.n_embd);
    std::memcpy(out.data(), x_.data(), T * hp_.n_embd * sizeof(float));
    return Status::ok();
}

Status EncoderModel::encode(std::span<const std::span<const int32_t>> seqs, std::span<float> out) {
    const int64_t H = hp_.n_embd;
    CHECK(out.size() >= seqs.size() * static_cast<size_t>(H));
    FERROX_RETURN_IF_ERROR(forward(seqs));
    for (size_t i = 0; i < seqs.size(); ++i) {
        const int64_t L = static_cast<int64_t>(seqs[i].size()), b = seq_begin_[i];
        float* o = out.data() + i * H;
        if (hp_.pooling == Pooling::kMean) {
            std::vector<double> acc(static_cast<size_t>(H), 0.0);
            for (int64_t t = 0; t < L; ++t) {
                const float* x = x_.data() + (b + t) * H;
                for (int64_t d = 0; d < H; ++d) acc[d] += x[d];
            }
            for (int64_t d = 0; d < H; ++d) o[d] = static_cast<float>(acc[d] / static_cast<double>(L));
        } else {
            const int64_t t = hp_.pooling == Pooling::kCls ? 0 : L - 1;
            std::memcpy(o, x_.data() + (b + t) * H, static_cast<size_t>(H) * sizeof(float));
        }
        if (hp_.normalize) {
            double ss = 0;
            for (int64_t d = 0; d < H; ++d) ss += static_cast<double>(o[d]) * o[d];
            const float inv = static_cast<float>(1.0 / std::max(std::sqrt(ss), 1e-12));
            vec_scale(o, inv, o, H);
        }
    }
    return Status::ok();
}

}  // namespace ferrox
