#include "model/model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <sys/mman.h>

#include "core/check.h"
#include "kernels/ops.h"
#include "kernels/prefetch_feed.h"
#include "kernels/quants.h"
#include "model/attention_f16.h"
#include "model/gelu.h"
#include "tensor/fp16.h"

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

// Buffers sized once at load for max_batch_tokens and max_ctx; forward() never allocates.
struct Model::Scratch {
    // Tokens [t0, t0 + nt) of one sequence against query heads [h0, h0 + nh), which share a KV head.
    struct AttnItem {
        int t0, nt, h0, nh;
        int e0 = 0, ne = 0;  // decode: ne > 1 tokens of one sequence, attn_entries[e0, e0 + ne)
    };
    std::vector<float> x;      // (n_tok, n_embd) residual stream
    std::vector<float> xn;     // (n_tok, n_embd) normed input of a block
    std::vector<float> q;      // (n_tok, q_dim)
    std::vector<float> k;      // (n_tok, kv_dim)
    std::vector<float> v;      // (n_tok, kv_dim)
    std::vector<float> att;    // (n_tok, q_dim) attention output
    std::vector<float> gate;   // (n_tok, n_ff)
    std::vector<float> up;     // (n_tok, n_ff)
    std::vector<float> proj;   // (n_tok, max(n_embd, ...)) output of wo / w_down
    std::vector<uint8_t> act;  // (n_tok, row bytes) activations quantized for a matmul
    std::vector<float> scores; // (n_threads, kAttnQueries, score_stride) attention scores
    // A query's scores row: max_ctx floats, padded so that rows are not a multiple of 4 KiB
    // apart. With the unpadded 4096-position rows every query's score of one cache row fell in
    // the same L1 set (the prompt dots store one score per query per row: 32 queries, 12 ways).
    int64_t score_stride = 0;
    std::vector<float> attn_acc;  // (n_threads, kAccRowsPerThread, head_dim) P·V scratch per thread
    std::vector<float> attn_q;    // (n_threads, kAttnQueries, head_dim) queries rounded to F16
    std::vector<const uint16_t*> attn_rows;  // (n_threads, max_ctx) a decode item's V rows
    std::vector<AttnItem> attn_items;  // Model::attention's work items
    std::vector<int32_t> attn_entries;  // decode items' tokens, by sequence and position
    std::vector<std::array<int64_t, 3>> attn_order;  // (block table, position, token) of decode tokens
    bool attn_decode_only = false;  // every sequence of the batch decodes one token
    // (n_tok) 1: the token's V is written into the F16 cache by its decode attention item (the
    // only one that reads it this layer), after the item's dots asked for the lines of that
    // block: the transposed V puts a position's values on one line per dimension, and written
    // with the other rows of the step those stores waited on memory (~5 % of a 4-stream step).
    std::vector<uint8_t> v_late;
    std::vector<int32_t> pos;  // (n_tok) position of each token
    std::vector<int32_t> seq;  // (n_tok) index into Batch::seqs of each token
    // (n_tok) each token's index in its sequence's run of the batch, and that run's length
    // (ModelOptions::ggml_order: llama.cpp's kernel choice for a sequence batched alone).
    std::vector<int32_t> run_at, run_len;
    std::vector<float> rope_cos, rope_sin;  // (n_tok, n_rot/2)
    std::vector<float> rope_cos_swa, rope_sin_swa;  // (n_tok, n_rot/2) local layers; empty if none
    std::unique_ptr<StealingRanges> tiles;  // the 64-row tiles of a decode product (matmuls)
    std::unique_ptr<StealingRanges> attn_ranges;  // Model::attention's items
    // Per thread: the KV runs of its share of a decode layer's attention items, asked for
    // during the products before that attention (plan_kv_prefetch).
    struct KvFeed {
        std::vector<const char*> runs;
        std::vector<int32_t> lines;
        PrefetchFeed feed;
    };
    std::vector<KvFeed> kv_feeds;

    // A decode item's tokens (in position order) and the cache positions its blocks cover,
    // [p_begin, last): from the block holding its first token's window start (n_swa > 0: a
    // sliding window of n_swa positions) to its last token.
    struct DecodeSpan {
        const int* ents;
        int ne, p_begin, last;
    };
    DecodeSpan decode_span(const AttnItem& it, int n_swa, int bs) const {
        const int ne = std::max(1, it.ne);
        const int* ents = it.ne > 0 ? attn_entries.data() + it.e0 : &it.t0;
        const int first = n_swa > 0 ? std::max(0, pos[ents[0]] + 1 - n_swa) : 0;
        return {ents, ne, first / bs * bs, pos[ents[ne - 1]] + 1};
    }
};

namespace {

// Q5_0 blocks (F16 d, 32 high bits, 16 bytes of low nibbles; value (q - 16) * d) as Q8_0 blocks
// with the same d and qs = q - 16: every weight keeps its exact value. n % 32 == 0.
void widen_q5_0_to_q8_0(const void* src, int64_t n, void* dst) {
    const auto* x = static_cast<const uint8_t*>(src);
    auto* y = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, x += 22, y += 34) {
        uint32_t qh;
        std::memcpy(&qh, x + 2, 4);
        std::memcpy(y, x, 2);
        auto* qs = reinterpret_cast<int8_t*>(y + 2);
        for (int j = 0; j < 16; ++j) {
            const int lo = (x[6 + j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int hi = (x[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
            qs[j] = static_cast<int8_t>(lo - 16);
            qs[j + 16] = static_cast<int8_t>(hi - 16);
        }
    }
}

bool can_pack_q8_0(const TensorView& t) { return t.ne[1] % 8 == 0 && t.ne[0] % 32 == 0 && t.ne[0] <= 32768; }

// Row `row` of a Q8_0 matrix repacked by repack8 (kernels/packed_avx2.cc): per group of 8 rows
// and block of 32 elements, the 8 F16 scales, then for each lane l (elements 4l..4l+3) the 4
// bytes of each row. Dequantized as Q8_0's own rows are (q * d, one rounding), so the bits are
// those of dequantize_row on the unpacked row.
void dequantize_packed_q8_0_row(const TensorView& t, int64_t row, float* y) {
    constexpr int64_t kBlockBytes = 8 * 34;
    const int64_t nb = t.ne[0] / 32;
    const int r = static_cast<int>(row % 8);
    const auto* g = static_cast<const uint8_t*>(t.data) + (row / 8) * nb * kBlockBytes;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* o = g + b * kBlockBytes;
        uint16_t dh;
        std::memcpy(&dh, o + 2 * r, 2);
        const float d = fp16_to_fp32(dh);
        for (int l = 0; l < 8; ++l) {
            const auto* q = reinterpret_cast<const int8_t*>(o + 16 + 32 * l + 4 * r);
            for (int k = 0; k < 4; ++k) y[b * 32 + 4 * l + k] = static_cast<float>(q[k]) * d;
        }
    }
}

constexpr int kMaxHeadDim = 512;
constexpr int kPrefillRows = 8;
// A prompt's attention items (Model::attention): up to kAttnQueries (token, head) queries, of
// at most kAttnHeads heads; per thread the queries' 8 partial P·V rows, then a chunk of kVChunk
// cache positions' V converted into floats.
constexpr int kAttnHeads = 8;
constexpr int kAttnQueries = 32;
constexpr int kVChunk = 64;
constexpr int kAccRowsPerThread = kAttnQueries * kPrefillRows + kVChunk;
static_assert(kAttnHeads <= kAttnQueries);

// Asks for `bytes` at the start of each of `count` rows `row_bytes` apart (a hint: no effect on
// the results).
inline void prefetch_rows(const uint8_t* p, size_t row_bytes, int count, size_t bytes) {
    for (int j = 0; j < count; ++j, p += row_bytes) {
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
    }
}

Status tensor_shape(const GgufFile& f, const TensorView* t, int64_t ne0, int64_t ne1) {
    const int64_t want_ne1 = ne1 < 0 ? 1 : ne1;
    if (t->ne[0] != ne0 || t->ne[1] != want_ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        return f.error("tensor '" + t->name + "' has shape [" + std::to_string(t->ne[0]) + ", " +
                       std::to_string(t->ne[1]) + "], expected [" + std::to_string(ne0) + ", " +
                       std::to_string(want_ne1) + "]");
    }
    return Status::ok();
}

Expected<const TensorView*> get_matrix(const GgufFile& f, const std::string& name, int64_t n_in,
                                       int64_t n_out) {
    const TensorView* t = f.find_tensor(name);
    if (!t) return f.error("missing tensor '" + name + "'");
    if (!is_weight_type(t->type)) {
        return unimplemented(f.path() + ": tensor '" + name + "' has type " +
                             std::string(dtype_name(t->type)) + ", not usable as a weight");
    }
    FERROX_RETURN_IF_ERROR(tensor_shape(f, t, n_in, n_out));
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
    FERROX_RETURN_IF_ERROR(tensor_shape(f, t, n, -1));
    std::vector<float> out(n);
    dequantize_row_ref(t->type, t->data, out.data(), n);
    return out;
}

}  // namespace

Model::~Model() = default;

Expected<std::unique_ptr<Model>> Model::load(const GgufFile& f, const ModelOptions& opts) {
    FERROX_ASSIGN_OR_RETURN(auto arch, f.get_string("general.architecture"));
    if (!arch) return f.error("missing metadata 'general.architecture'");
    const ArchTraits* traits = find_arch(*arch);
    if (!traits) return unimplemented(f.path() + ": unsupported architecture '" + *arch + "'");

    std::unique_ptr<Model> m(new Model());
    m->traits_ = *traits;
    m->opts_ = opts;
    FERROX_ASSIGN_OR_RETURN(m->hp_, read_llama_family_hparams(f, *arch));
    ModelHParams& hp = m->hp_;
    hp.rope_ordering = traits->rope_ordering;
    if (traits->read_hparams) FERROX_RETURN_IF_ERROR(traits->read_hparams(f, &hp));
    if (hp.kq_scale == 0.0f) hp.kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));

    const TensorView* embd = f.find_tensor("token_embd.weight");
    if (!embd) return f.error("missing tensor 'token_embd.weight'");
    if (embd->ne[0] != hp.n_embd || embd->n_dims != 2) {
        return f.error("token_embd.weight does not have n_embd = " + std::to_string(hp.n_embd) +
                       " columns");
    }
    if (!is_weight_type(embd->type)) return f.error("token_embd.weight has an unusable type");
    if (hp.head_dim > kMaxHeadDim) return unimplemented(f.path() + ": head size above 512");
    if (hp.n_vocab == 0) hp.n_vocab = static_cast<int>(embd->ne[1]);
    if (embd->ne[1] != hp.n_vocab) return f.error("token_embd.weight rows != vocab_size");
    m->tok_embd_ = embd;
    if (f.find_tensor("output.weight")) {
        FERROX_ASSIGN_OR_RETURN(m->output_, get_matrix(f, "output.weight", hp.n_embd, hp.n_vocab));
    } else {
        m->output_ = embd;  // tied embeddings
    }
    FERROX_ASSIGN_OR_RETURN(m->output_norm_, get_vector(f, "output_norm.weight", hp.n_embd, true));
    FERROX_ASSIGN_OR_RETURN(m->rope_freq_factors_,
                            get_vector(f, "rope_freqs.weight", hp.n_rot / 2, false));

    m->layers_.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        LayerWeights& L = m->layers_[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        FERROX_ASSIGN_OR_RETURN(L.attn_norm, get_vector(f, p + "attn_norm.weight", hp.n_embd, true));
        FERROX_ASSIGN_OR_RETURN(L.ffn_norm, get_vector(f, p + "ffn_norm.weight", hp.n_embd, true));
        FERROX_ASSIGN_OR_RETURN(L.wq, get_matrix(f, p + "attn_q.weight", hp.n_embd, hp.q_dim()));
        FERROX_ASSIGN_OR_RETURN(L.wk, get_matrix(f, p + "attn_k.weight", hp.n_embd, hp.kv_dim()));
        FERROX_ASSIGN_OR_RETURN(L.wv, get_matrix(f, p + "attn_v.weight", hp.n_embd, hp.kv_dim()));
        FERROX_ASSIGN_OR_RETURN(L.wo, get_matrix(f, p + "attn_output.weight", hp.q_dim(), hp.n_embd));
        FERROX_ASSIGN_OR_RETURN(L.w_gate, get_matrix(f, p + "ffn_gate.weight", hp.n_embd, hp.n_ff));
        FERROX_ASSIGN_OR_RETURN(L.w_up, get_matrix(f, p + "ffn_up.weight", hp.n_embd, hp.n_ff));
        FERROX_ASSIGN_OR_RETURN(L.w_down, get_matrix(f, p + "ffn_down.weight", hp.n_ff, hp.n_embd));
        if (traits->qkv_bias) {
            FERROX_ASSIGN_OR_RETURN(L.bq, get_vector(f, p + "attn_q.bias", hp.q_dim(), true));
            FERROX_ASSIGN_OR_RETURN(L.bk, get_vector(f, p + "attn_k.bias", hp.kv_dim(), true));
            FERROX_ASSIGN_OR_RETURN(L.bv, get_vector(f, p + "attn_v.bias", hp.kv_dim(), true));
        }
        if (traits->qk_norm) {
            FERROX_ASSIGN_OR_RETURN(L.q_norm, get_vector(f, p + "attn_q_norm.weight", hp.head_dim, true));
            FERROX_ASSIGN_OR_RETURN(L.k_norm, get_vector(f, p + "attn_k_norm.weight", hp.head_dim, true));
        }
        if (traits->post_norms) {
            FERROX_ASSIGN_OR_RETURN(L.post_attn_norm,
                                    get_vector(f, p + "post_attention_norm.weight", hp.n_embd, true));
            FERROX_ASSIGN_OR_RETURN(L.post_ffn_norm, get_vector(f, p + "post_ffw_norm.weight", hp.n_embd, true));
        }
    }

    m->place_weights(f, opts.repack, !opts.mmap);

    const int n_threads = opts.n_threads > 0 ? opts.n_threads : hardware_threads();
    m->pool_ = std::make_unique<ThreadPool>(n_threads);

    auto s = std::make_unique<Scratch>();
    s->tiles = std::make_unique<StealingRanges>(n_threads);
    s->attn_ranges = std::make_unique<StealingRanges>(n_threads);
    s->kv_feeds.resize(static_cast<size_t>(n_threads));
    const size_t T = static_cast<size_t>(std::max(1, opts.max_batch_tokens));
    const int64_t widest = std::max<int64_t>({hp.n_embd, hp.q_dim(), hp.n_ff});
    s->x.resize(T * hp.n_embd);
    s->xn.resize(T * hp.n_embd);
    s->q.resize(T * hp.q_dim());
    s->k.resize(T * hp.kv_dim());
    s->v.resize(T * hp.kv_dim());
    s->att.resize(T * hp.q_dim());
    s->gate.resize(T * hp.n_ff);
    s->up.resize(T * hp.n_ff);
    s->proj.resize(T * hp.n_embd);
    // Up to kMaxMatJobs quantized inputs at once; F32 (4 bytes per element) bounds every
    // activation format, plus each row's padding (act_row_stride) and alignment.
    s->act.resize(kMaxMatJobs * (T * (widest * 4 + 128) + 64));
    s->score_stride = (std::max(1, opts.max_ctx) + 15) / 16 * 16 + 16;
    s->scores.resize(static_cast<size_t>(n_threads) * kAttnQueries * s->score_stride);
    s->attn_q.resize(static_cast<size_t>(n_threads) * kAttnQueries * hp.head_dim);
    s->attn_rows.resize(static_cast<size_t>(n_threads) * std::max(1, opts.max_ctx));
    s->attn_acc.resize(static_cast<size_t>(n_threads) * kAccRowsPerThread * hp.head_dim);
    s->attn_items.reserve(T * hp.n_head);  // a decode token's heads; a prompt has fewer items
    s->pos.resize(T);
    s->seq.resize(T);
    s->run_at.resize(T);
    s->run_len.resize(T);
    s->rope_cos.resize(T * hp.n_rot / 2);
    s->rope_sin.resize(T * hp.n_rot / 2);
    if (hp.n_swa > 0) {
        s->rope_cos_swa.resize(T * hp.n_rot / 2);
        s->rope_sin_swa.resize(T * hp.n_rot / 2);
    }
    m->s_ = std::move(s);
    return m;
}

// Where the weights live after load. Matrices of a type with a packed layout
// (QuantKernels::repack8: 8 rows interleaved, one product for decode, batches and prompts with a
// fixed per-output order) are repacked into one huge-page arena this model owns. Unless the
// weights stay mapped (ModelOptions::mmap), the other matrices and the embedding table are
// copied into it too. Each tensor's file pages are given back once it is placed: the file is
// mapped, not read into a buffer first, so each weight byte is read once and written once
// (reading the whole file into huge pages and repacking from there took twice the page zeroing
// and copying).
Model::GemmPacked Model::packed_gemm(const QuantKernels& k) const {
    return !opts_.ggml_order && k.gemm_packed8_ref_order ? k.gemm_packed8_ref_order : k.gemm_packed8;
}

void Model::place_weights(const GgufFile& f, bool repack, bool copy) {
    struct Move {
        const TensorView** w;
        bool pack;
        bool widen = false;  // Q5_0 rewritten as Q8_0 (then packed, unless in llama.cpp's order)
    };
    std::vector<Move> todo;
    auto consider = [&](const TensorView** w) {
        const TensorView& t = **w;
        const QuantKernels& k = quant_kernels(t.type);
        const bool shape_ok = t.ne[1] % 8 == 0 && t.ne[0] % 32 == 0 && t.ne[0] <= 32768 && t.n_rows() == t.ne[1];
        // In llama.cpp's order (ggml_order) a type with its own kernels for it is not packed.
        const auto x86_order = [&](const QuantKernels& kt) { return opts_.ggml_order && kt.vec_dot_rows_x86; };
        const bool pack = repack && k.repack8 && k.gemm_packed8 && shape_ok && !x86_order(k);
        // Q5_0 has no packed layout, and its products (5-bit unpacking per weight, no prompt
        // tile kernel) were two thirds of a Gemma 3 prompt. Its weights are exactly Q8_0 ones
        // ((q - 16) * d fits an int8 with the same scale), so it is rewritten as Q8_0 and packed:
        // the same weight values, ~1.5x their bytes (Gemma 3 270M: +23 MiB).
        const QuantKernels& k8 = quant_kernels(DType::kQ8_0);
        // In llama.cpp's order it is widened and left unpacked: Q8_0's vec_dot and prompt tiles
        // give Q5_0's vec_dot bits (the same integer lanes, the same scale).
        const bool widen = repack && t.type == DType::kQ5_0 && k8.repack8 && k8.gemm_packed8 && shape_ok;
        if (pack || widen || copy) todo.push_back({w, pack || (widen && !x86_order(k8)), widen});
    };
    for (LayerWeights& L : layers_) {
        for (const TensorView** w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) consider(w);
    }
    const bool tied = output_ == tok_embd_;
    if (!tied) consider(&output_);
    // A tied Q8_0 table is packed for the output product (a large part of decode with a big
    // vocabulary: Gemma's 262,144 rows) and its embedding rows gathered from the packed layout
    // (dequantize_packed_q8_0_row); another table is read by row, never packed.
    const QuantKernels& k8 = quant_kernels(DType::kQ8_0);
    const bool pack_tied = tied && repack && tok_embd_->type == DType::kQ8_0 && can_pack_q8_0(*tok_embd_) &&
                           k8.repack8 && k8.gemm_packed8 && !(opts_.ggml_order && k8.vec_dot_rows_x86);
    if (copy || pack_tied) todo.push_back({&tok_embd_, pack_tied});
    if (todo.empty()) return;
    const auto placed_bytes = [](const Move& m) {
        TensorView v = **m.w;
        if (m.widen) v.type = DType::kQ8_0;
        return static_cast<size_t>(v.n_bytes());
    };
    size_t total = 0;
    for (const Move& m : todo) total += (placed_bytes(m) + 63) / 64 * 64;
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t arena_bytes = (total + kHuge - 1) / kHuge * kHuge;
    packed_arena_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHuge, arena_bytes)));
    CHECK(packed_arena_ != nullptr);
    madvise(packed_arena_.get(), arena_bytes, MADV_HUGEPAGE);
    uint8_t* at = packed_arena_.get();
    for (const Move& m : todo) {
        auto view = std::make_unique<TensorView>(**m.w);
        const size_t file_bytes = static_cast<size_t>(view->n_bytes());
        if (m.widen) {
            std::vector<uint8_t> q8(placed_bytes(m));
            widen_q5_0_to_q8_0((*m.w)->data, view->n_elements(), q8.data());
            view->type = DType::kQ8_0;
            if (m.pack) {
                quant_kernels(DType::kQ8_0).repack8(q8.data(), view->ne[0], view->ne[1], at);
            } else {
                std::memcpy(at, q8.data(), q8.size());
            }
        } else if (m.pack) {
            quant_kernels(view->type).repack8((*m.w)->data, view->ne[0], view->ne[1], at);
        } else {
            std::memcpy(at, (*m.w)->data, file_bytes);
        }
        f.discard((*m.w)->data, file_bytes);  // only the placed copy is read now
        view->data = at;
        view->packed8 = m.pack;
        at += (placed_bytes(m) + 63) / 64 * 64;
        *m.w = view.get();
        packed_views_.push_back(std::move(view));
    }
    if (tied) output_ = tok_embd_;
}

// Bytes between a matmul's activation rows: a row's bytes rounded up to 64, plus 64 where that
// is a multiple of 4 KiB. A prompt kernel reads several rows side by side; at a 4 KiB multiple
// (F16's F32 rows of 2048 elements are 8 KiB) they would all fall in the same L1 sets.
namespace {
int64_t act_row_stride(int64_t row_bytes) {
    const int64_t s = (row_bytes + 63) / 64 * 64;
    return s % 4096 == 0 ? s + 64 : s;
}

// The per-token work between the matrix products (norms, RoPE and the KV store, residual adds,
// SwiGLU): on the calling thread for a few tokens, split between threads by token from
// kTokensParallelFrom on (a 512-token prompt's share of it left the other core idle ~4 % of
// the time at 2 threads). Every op here is row-wise or element-wise, so the split changes no bit.
constexpr int kTokensParallelFrom = 16;
template <typename F>
void for_token_ranges(ThreadPool& pool, int n_tok, F&& f) {
    if (n_tok < kTokensParallelFrom || pool.n_threads() == 1) return f(0, n_tok);
    pool.run([&](int i_thread, int n_threads) {
        int64_t t0, t1;
        ThreadPool::split(n_tok, i_thread, n_threads, 1, &t0, &t1);
        if (t0 < t1) f(static_cast<int>(t0), static_cast<int>(t1));
    });
}
}  // namespace

// Each distinct (input, activation type) of a call to matmuls: its quantized rows' place in the
// activation scratch.
Model::ActSlots Model::act_slots(const MatJob* jobs, int n_jobs, int n_tok) const {
    CHECK(n_jobs >= 1 && n_jobs <= kMaxMatJobs);
    ActSlots a;
    uint8_t* free_space = s_->act.data();
    for (int j = 0; j < n_jobs; ++j) {
        const QuantKernels& kq = quant_kernels(jobs[j].w->type);
        const bool packed = jobs[j].w->packed8;
        const DType at = packed ? kq.packed_act_type : kq.act_type;
        int k = 0;
        const auto quantize = packed ? kq.quantize_packed_act_row : kq.quantize_act_row;
        // Keyed by the quantizer too: F16's packed rows and F32's rows are both F32, not the same numbers.
        while (k < a.n_slots &&
               !(a.slots[k].x == jobs[j].x && a.slots[k].act_type == at && a.slots[k].quantize == quantize))
            ++k;
        if (k == a.n_slots) {
            const int64_t n_in = jobs[j].w->ne[0];
            const int64_t rb = act_row_stride(dtype_row_bytes(at, n_in));
            CHECK(free_space + rb * n_tok <= s_->act.data() + s_->act.size());
            a.slots[a.n_slots++] = {jobs[j].x, at, n_in, rb, free_space, quantize};
            free_space += (rb * n_tok + 63) / 64 * 64;
        }
        a.slot_of[j] = k;
    }
    return a;
}

void Model::quantize_inputs(const MatJob* jobs, int n_jobs, int n_tok, int t0, int t1) {
    const ActSlots a = act_slots(jobs, n_jobs, n_tok);
    for (int k = 0; k < a.n_slots; ++k) {
        const ActSlot& sl = a.slots[k];
        for (int64_t t = t0; t < t1; ++t) sl.quantize(sl.x + t * sl.n_in, sl.data + t * sl.row_bytes, sl.n_in);
    }
}

// Several products y_j (n_tok, n_out_j) = x_j (n_tok, n_in_j) · W_j^T in one parallel region
// (one barrier, not one per matrix: on a busy machine every barrier may wait for a
// descheduled thread). Each distinct (input, activation type) is quantized once (unless the
// caller did, see quantize_inputs), on this thread for a few tokens and in parallel for more;
// then threads split every matrix's rows, each thread walking 16-row tiles for every token so
// a tile is read from memory once per call.
void Model::matmuls(const MatJob* jobs, int n_jobs, int n_tok, bool rows_are_tokens, bool quantized, bool kv_feed) {
    const ActSlots a = act_slots(jobs, n_jobs, n_tok);
    const ActSlot* slots = a.slots;
    const int* slot_of = a.slot_of;
    if (!quantized) {
        if (n_tok <= 8) {
            quantize_inputs(jobs, n_jobs, n_tok, 0, n_tok);
        } else {
            pool_->run([&](int i_thread, int n_threads) {
                int64_t t0, t1;
                ThreadPool::split(n_tok, i_thread, n_threads, 1, &t0, &t1);
                quantize_inputs(jobs, n_jobs, n_tok, static_cast<int>(t0), static_cast<int>(t1));
            });
        }
    }
    // Decode and small batches (one token chunk, every matrix packed): memory-bound, each
    // matrix read once. The 64-row tiles of all the jobs, in order, are dealt out as contiguous
    // shares (long streams for the prefetchers); a thread that is done takes tiles from the
    // back of the others' shares, so a core the machine slowed down for a while does not hold
    // the other at the barrier. Who computes a tile changes none of its bits.
    constexpr int64_t kPackedTile = 64;
    // A batch of 3+ tokens goes through the many-column kernels: tiles twice as long measured
    // faster (`ferrox bench -np 16` +5 %, -np 8 +4 %; 4x as long lost the balance of the
    // few-tile matrices). Not for the per-call column tables: building those once per matmul
    // instead gained nothing; longer weight runs per call, it seems.
    const int64_t steal_tile = n_tok >= 3 ? 2 * kPackedTile : kPackedTile;
    // Claimed in units of 16 rows: a whole tile at a time, then shorter runs at the end of a
    // share (StealingRanges::next_span), so the threads finish closer together; for one or two
    // tokens (16 rows are ~0.1 us of work, less than what the finer claims cost: single-stream
    // decode lost 3-4 %) whole tiles only.
    const int64_t steal_unit = n_tok >= 3 ? 16 : steal_tile;
    constexpr int kPackedTokChunk = 64;
    bool steal = n_tok <= kPackedTokChunk && pool_->n_threads() > 1;
    int64_t unit_begin[kMaxMatJobs + 1] = {0};
    for (int j = 0; j < n_jobs; ++j) {
        steal = steal && jobs[j].w->packed8;
        unit_begin[j + 1] = unit_begin[j] + (jobs[j].w->ne[1] + steal_unit - 1) / steal_unit;
    }
    if (steal) {
        s_->tiles->reset(unit_begin[n_jobs]);
        pool_->run([&](int i_thread, int) {
            if (kv_feed) t_prefetch_feed = &s_->kv_feeds[i_thread].feed;
            struct Unset {
                ~Unset() { t_prefetch_feed = nullptr; }
            } unset;
            for (int64_t ub, ue; s_->tiles->next_span(i_thread, steal_tile / steal_unit, &ub, &ue);) {
                for (int j = 0; j < n_jobs; ++j) {  // the span's part in each job
                    const int64_t b = std::max(ub, unit_begin[j]), e = std::min(ue, unit_begin[j + 1]);
                    if (b >= e) continue;
                    const TensorView& w = *jobs[j].w;
                    const ActSlot& sl = slots[slot_of[j]];
                    const int64_t r = (b - unit_begin[j]) * steal_unit;
                    const int64_t nr = std::min((e - unit_begin[j]) * steal_unit, w.ne[1]) - r;
                    packed_gemm(quant_kernels(w.type))(sl.n_in, static_cast<const uint8_t*>(w.data) + r * w.row_bytes(),
                                                       nr, sl.data, sl.row_bytes, n_tok, jobs[j].y + r, w.ne[1]);
                }
            }
        });
        return;
    }
    pool_->run([&](int i_thread, int n_threads) {
        constexpr int64_t kTile = 16;
        for (int j = 0; j < n_jobs; ++j) {
            const TensorView& w = *jobs[j].w;
            const QuantKernels& kq = quant_kernels(w.type);
            const ActSlot& sl = slots[slot_of[j]];
            const int64_t n_out = w.ne[1];
            const int64_t w_row = w.row_bytes();
            const uint8_t* wdata = static_cast<const uint8_t*>(w.data);
            float* y = jobs[j].y;
            int64_t r0, r1;
            ThreadPool::split(n_out, i_thread, n_threads, kTile, &r0, &r1);
            if (w.packed8) {
                // Rows interleaved by 8 (place_weights); r0, r1 and every tile are multiples of 8.
                // One kernel for decode, batches and prompts: its per-output order does not
                // depend on the tile, so a sequence's bits do not depend on its batch. Tokens in
                // chunks so their activations stay in cache while the thread's rows stream past;
                // F16's kernel blocks the elements itself and keeps a 64-row tile's chunk in L2
                // for every token, so it takes them all (pp512 on the 1B F16 model ~+12 %, so the
                // weights are read once, not once per 64 tokens).
                CHECK(kq.gemm_packed8 != nullptr);
                // F16 prompts (compute-bound, 2 bytes a weight) split tokens between threads
                // rather than rows: each thread reads every weight (cheap against the arithmetic
                // from 64 tokens a thread on) and half the activations, with no imbalance
                // between the matrices' row ranges. pp512 on the 1B F16 model, 2 threads: ~+8 %.
                int tok_begin = 0, tok_end = n_tok;
                if (w.type == DType::kF16 && n_threads > 1 && n_tok >= 64 * n_threads) {
                    int64_t a, b;
                    ThreadPool::split(n_tok, i_thread, n_threads, 6, &a, &b);
                    tok_begin = static_cast<int>(a);
                    tok_end = static_cast<int>(b);
                    r0 = 0;
                    r1 = n_out;
                }
                const int tok_chunk = w.type == DType::kF16 ? n_tok : kPackedTokChunk;
                for (int t0 = tok_begin; t0 < tok_end; t0 += tok_chunk) {
                    const int nt = std::min(tok_chunk, tok_end - t0);
                    for (int64_t r = r0; r < r1; r += kPackedTile) {
                        const int64_t nr = std::min(kPackedTile, r1 - r);
                        packed_gemm(kq)(sl.n_in, wdata + r * w_row, nr, sl.data + t0 * sl.row_bytes, sl.row_bytes,
                                        nt, y + static_cast<int64_t>(t0) * n_out + r, n_out);
                    }
                }
                continue;
            }
            // (A type whose llama.cpp order is its vec_dot's keeps the prompt tiles, which give
            // vec_dot's bits.)
            const bool x86_tiles = kq.vec_dot_tile && !kq.vec_dot_rows_x86_batch && n_tok >= 4;
            if (opts_.ggml_order && kq.vec_dot_rows_x86 && !x86_tiles) {
                // llama.cpp's order, as it computes each sequence batched alone: its batch kernel
                // (if the type has one) for the first rows of a long enough run of a sequence's
                // tokens, its other kernel for the rest (QuantKernels::vec_dot_rows_x86).
                const auto batch_kernel = [&](int t) {
                    if (!kq.vec_dot_rows_x86_batch || !rows_are_tokens) return false;
                    const int n = s_->run_len[t];
                    return n >= kq.x86_batch_from && s_->run_at[t] < n - n % kq.x86_batch_group;
                };
                for (int64_t r = r0; r < r1; r += kTile) {
                    const int64_t nr = std::min(kTile, r1 - r);
                    for (int t = 0; t < n_tok; ++t) {
                        (batch_kernel(t) ? kq.vec_dot_rows_x86_batch : kq.vec_dot_rows_x86)(
                            sl.n_in, wdata + r * w_row, w_row, nr, sl.data + t * sl.row_bytes, y + t * n_out + r);
                    }
                }
                continue;
            }
            if (kq.vec_dot_tile && n_tok >= 4) {
                // Prompt: tiles of rows x tokens, a chunk of tokens at a time so its activations
                // stay in cache while the thread's rows stream past.
                constexpr int kTokChunk = 64;
                for (int t0 = 0; t0 < n_tok; t0 += kTokChunk) {
                    const int nt = std::min(kTokChunk, n_tok - t0);
                    for (int64_t r = r0; r < r1; r += kTile) {
                        const int64_t nr = std::min(kTile, r1 - r);
                        kq.vec_dot_tile(sl.n_in, wdata + r * w_row, w_row, nr, sl.data + t0 * sl.row_bytes,
                                        sl.row_bytes, nt, y + static_cast<int64_t>(t0) * n_out + r, n_out);
                    }
                }
                continue;
            }
            for (int64_t r = r0; r < r1; r += kTile) {
                const int64_t nr = std::min(kTile, r1 - r);
                for (int t = 0; t < n_tok; ++t) {
                    kq.vec_dot_rows(sl.n_in, wdata + r * w_row, w_row, nr, sl.data + t * sl.row_bytes,
                                    y + t * n_out + r);
                }
            }
        }
    });
}

namespace {

// The softmax of a query's scores over the positions [first, end), indexed by absolute position
// (after the soft-cap, if any). The row starts at the multiple of 8 at or below `first`, the
// positions before it masked (-inf: weight 0), because llama.cpp's rows start at position 0 with
// the window masked: its softmax sums groups of 8 positions in float, then the groups in double,
// so the groups must start where its do for the weights to round the same.
void window_softmax(float* sc, int first, int end, float cap) {
    if (cap > 0) attn_softcap(sc + first, end - first, cap);
    const int begin = first / 8 * 8;
    std::fill(sc + begin, sc + first, -std::numeric_limits<float>::infinity());
    softmax_inplace(sc + begin, end - begin);
}

// Rotates one head (n_rot leading dims) in place by the per-token cos/sin table, in llama.cpp's
// bits (ops.h's rope_rotate).
inline void rope_head(float* x, const float* cs, const float* sn, int n_rot, RopeOrdering ord) {
    rope_rotate(x, cs, sn, n_rot, ord == RopeOrdering::kNeox);  // kernels/ops.h
}

}  // namespace

Status Model::check_kv_type(KvType type) const {
    if (type == KvType::kQ8_0 && hp_.head_dim % 32 != 0) {
        return invalid_argument("a q8_0 KV cache needs a head size that is a multiple of 32; this model's is " +
                                std::to_string(hp_.head_dim));
    }
    return Status::ok();
}

// Token t's V of KV head h into the F16 cache, transposed (kv_v_offset: element d at d * tile
// from the slot's first).
void Model::write_v_f16(KvStorage& kv, const Batch& batch, int il, int t, int h) {
    const ModelHParams& hp = hp_;
    Scratch& s = *s_;
    const int bs = kv.geometry().block_size;
    const int p = s.pos[t];
    const int32_t blk = batch.seqs[s.seq[t]].block_table[p / bs];
    uint16_t vh[kMaxHeadDim];
    attn_f16_kernels().to_f16(s.v.data() + static_cast<size_t>(t) * hp.kv_dim() + h * hp.head_dim, vh, hp.head_dim);
    uint16_t* vt = reinterpret_cast<uint16_t*>(kv.head_rows(true, blk, il, h, hp.head_dim)) +
                   kv_v_offset(bs, hp.head_dim, p % bs, 0);
    const int tile = kv_v_tile(bs);
    for (int d = 0; d < hp.head_dim; ++d) vt[static_cast<size_t>(d) * tile] = vh[d];
}

// The attention work items of a batch (the same for every layer); see Model::attention. Also
// decides which tokens' V the attention items write (Scratch::v_late).
void Model::plan_attention(const Batch& batch) {
    const ModelHParams& hp = hp_;
    const int group = hp.n_head / hp.n_head_kv;
    Scratch& s = *s_;
    const int heads_at_once = std::min(group, kAttnHeads);
    const int tokens_at_once = kAttnQueries / heads_at_once;

    std::vector<Scratch::AttnItem>& items = s.attn_items;
    items.clear();
    s.v_late.assign(batch.tokens.size(), 0);
    // Decode items are a token's heads that share a KV head (each cache row converted once for
    // them) when that leaves an item per thread, else one head each; the heads get the same
    // bits either way. (One stream of the default model: 3 items on 2 threads beat 9 one-head
    // items by 3-6 %, the 2:1 split costing less than converting K and V per head; two streams
    // +1-4 %, +12-17 % at 512 positions.) The one-token entries of one sequence (a token and the draft
    // tokens a speculative step verifies, at its next positions over the same blocks) are one
    // item per KV head, up to kAttnQueries queries: every cache row is read and converted once
    // for all of them. Each query still gets the dots, softmax and P·V of a decode step at its
    // own position (positions past it get weight 0, which adds +0 to its partial rows).
    int n_decode = 0;
    for (const BatchSeq& sq : batch.seqs) n_decode += sq.n_tokens < 2 ? 1 : 0;
    const int decode_heads = n_decode * hp.n_head_kv >= pool_->n_threads() ? heads_at_once : 1;
    std::vector<std::array<int64_t, 3>>& order = s.attn_order;
    order.clear();
    s.attn_entries.clear();
    for (const BatchSeq& sq : batch.seqs) {
        if (sq.n_tokens >= 2) {
            for (int t = sq.i_begin; t < sq.i_begin + sq.n_tokens; t += tokens_at_once) {
                const int nt = std::min(tokens_at_once, sq.i_begin + sq.n_tokens - t);
                for (int h = 0; h < hp.n_head; h += group) {
                    for (int g0 = 0; g0 < group; g0 += heads_at_once) {
                        items.push_back({t, nt, h + g0, std::min(heads_at_once, group - g0)});
                    }
                }
            }
        } else {
            order.push_back({reinterpret_cast<int64_t>(sq.block_table), s.pos[sq.i_begin], sq.i_begin});
        }
    }
    std::sort(order.begin(), order.end());
    int n_runs = 0;
    for (size_t i = 0; i < order.size(); ++i) n_runs += i == 0 || order[i][0] != order[i - 1][0] ? 1 : 0;
    const int max_entries = kAttnQueries / heads_at_once;
    const int items_per_entry = hp.n_head / heads_at_once;
    for (size_t i = 0; i < order.size();) {
        size_t end = i + 1;
        while (end < order.size() && order[end][0] == order[i][0]) ++end;
        const int len = static_cast<int>(end - i);
        if (len == 1) {
            const int t = static_cast<int>(order[i][2]);
            s.v_late[t] = decode_heads == group ? 1 : 0;  // one item per KV head reads this V
            for (int h = 0; h < hp.n_head; h += decode_heads) {
                items.push_back({t, 1, h, std::min(decode_heads, hp.n_head - h)});
            }
        } else {
            // Enough items for the threads: a lone sequence's entries in a few chunks.
            const int want = (2 * pool_->n_threads() + n_runs * items_per_entry - 1) / (n_runs * items_per_entry);
            const int n_chunks = std::max((len + max_entries - 1) / max_entries, std::min(len, want));
            for (int c = 0; c < n_chunks; ++c) {
                const int e0 = static_cast<int>(s.attn_entries.size());
                const int b = len * c / n_chunks, e = len * (c + 1) / n_chunks;
                for (int k = b; k < e; ++k) {
                    s.attn_entries.push_back(static_cast<int32_t>(order[i + k][2]));
                    // One item per KV head reads all of the sequence's entries' V.
                    s.v_late[order[i + k][2]] = n_chunks == 1 && heads_at_once == group ? 1 : 0;
                }
                for (int h = 0; h < hp.n_head; h += group) {
                    for (int g0 = 0; g0 < group; g0 += heads_at_once) {
                        items.push_back({static_cast<int>(order[i + b][2]), 1, h + g0, std::min(heads_at_once, group - g0),
                                         e0, e - b});
                    }
                }
            }
        }
        i = end;
    }

    s.attn_decode_only = n_decode == static_cast<int>(batch.seqs.size());
}

// The KV runs each thread's share of layer il's decode attention items will read (the share
// StealingRanges::reset deals it), in the order it reads them, into its feed, spread over the
// `steps` block steps of the products it runs before that attention: K rows up to the item's
// last position, the V tiles of each block whole. Without it every block came from memory
// during the attention itself (the whole model's weights have passed since the step before),
// its misses in flight the limit: in a 16-sequence step made to read one sequence's cache for
// all 16, which stays in L1, the step was ~15 % faster at 64-128 positions.
// At most kMaxFeedLines (1 MiB) a thread; the lines that L2 cannot keep until the attention go
// to L3, still nearer than memory (a cap of 8192 gained less at 256 positions, 32768 no more);
// later items are asked for by attention() itself, as before. False when there is nothing.
//
// `ferrox bench -p 0 -n 64 -np 16 -d 0 / 64 / 256`, each step alternately with and without the
// feed in one process (medians of three runs' ratios): +5.2 / +6.5 / +6.5 %; 12 sequences at
// 256 positions +7 %, 24 at 128 +6.5 %; prefetcht1 instead of t0 +3.3 / +3.7 / +4.5 %. Fed
// during the QKV product alone (~30 us a layer) the lines did arrive (attention 4.3 -> 3.1 ms a
// step at 128 positions) but the product slowed as much (1.0 -> 2.1 ms).
// On the AVX2 kernels (FERROX_KERNELS_ISA=avx2) it is neutral (+0.5 %).
bool Model::plan_kv_prefetch(const Batch& batch, KvStorage& kv, int il, int64_t steps) {
    constexpr int64_t kMaxFeedLines = 16384;
    const ModelHParams& hp = hp_;
    const int hd = hp.head_dim;
    const int group = hp.n_head / hp.n_head_kv;
    const int bs = kv.geometry().block_size;
    const int n_swa = hp.is_swa(il) ? hp.n_swa : 0;
    Scratch& s = *s_;
    const std::vector<Scratch::AttnItem>& items = s.attn_items;
    const int nt = pool_->n_threads();
    const auto row_lines = [](int64_t bytes) { return static_cast<int32_t>((bytes + 63) / 64); };
    bool any = false;
    for (int i = 0; i < nt; ++i) {
        Scratch::KvFeed& f = s.kv_feeds[static_cast<size_t>(i)];
        f.runs.clear();
        f.lines.clear();
        int64_t b, e, lines = 0;
        ThreadPool::split(static_cast<int64_t>(items.size()), i, nt, 1, &b, &e);
        for (int64_t w = b; w < e && lines < kMaxFeedLines; ++w) {
            const Scratch::AttnItem& it = items[static_cast<size_t>(w)];
            const int kvh = it.h0 / group;
            const BatchSeq& sq = batch.seqs[s.seq[it.t0]];
            const Scratch::DecodeSpan span = s.decode_span(it, n_swa, bs);
            const int last_all = span.last;
            for (int p = span.p_begin; p < last_all; p += bs) {
                const int32_t blk = sq.block_table[p / bs];
                f.runs.push_back(reinterpret_cast<const char*>(kv.head_rows(false, blk, il, kvh, hd)));
                f.lines.push_back(row_lines(static_cast<int64_t>(std::min(bs, last_all - p)) * hd * 2));
                f.runs.push_back(reinterpret_cast<const char*>(kv.head_rows(true, blk, il, kvh, hd)));
                f.lines.push_back(row_lines(static_cast<int64_t>(bs) * hd * 2));
                lines += f.lines[f.lines.size() - 2] + f.lines.back();
            }
        }
        f.feed = PrefetchFeed{f.runs.data(), f.lines.data(), static_cast<int>(f.runs.size())};
        f.feed.per_step = static_cast<int>(std::min<int64_t>(64, (lines + steps - 1) / std::max<int64_t>(1, steps)));
        any = any || !f.runs.empty();
    }
    return any;
}

// The block steps of one thread's share of matmuls(jobs, n_jobs, n_tok) in the many-column
// kernels (each a weight block of 16 rows against up to 16 tokens).
int64_t Model::feed_steps(const MatJob* jobs, int n_jobs, int n_tok) const {
    int64_t steps = 0;
    for (int j = 0; j < n_jobs; ++j) steps += (jobs[j].w->ne[1] + 15) / 16 * (jobs[j].w->ne[0] / 32);
    return steps * ((n_tok + 15) / 16) / pool_->n_threads();
}

// Causal attention of every batch token over its own sequence's cached positions.
// Gemma 2 soft-caps each query's scores (attn_softcap) between the dots and the softmax.
//
// Q and the softmax weights are rounded to F16 before they meet the F16 cache, and the sums run
// in ggml's orders (attention_f16.h): a sequence advancing by one token uses the decode order, a
// chunk of two or more the prefill order, as llama.cpp does.
//
// Work items: a decode token's query heads that share a KV head (or one head each, when that
// leaves too few items), or a sequence's one-token entries (its token and the draft tokens a
// speculative step verifies) with the heads of one KV head; a prompt chunk's query heads that
// share a KV head (at most kAttnHeads at once), with as many of its tokens as make kAttnQueries
// queries. Such an item reads each cache row once for all its tokens and heads: the K row is
// converted once for every dot; decode P·V converts each slice of the transposed V once for all
// the item's queries, prompt P·V converts the V of a chunk of positions into floats for
// every (token, head) to accumulate from. Each (token, head) still gets its own dots, softmax
// and P·V in its own order, so the bits do not depend on the items. Decode items are dealt in
// contiguous shares with stealing; prompt items in turn (a causal prompt's later tokens attend
// to more positions, and a contiguous split gave the last thread 3/4 of the work at 2 threads).
void Model::attention(const Batch& batch, KvStorage& kv, int il) {
    if (kv.geometry().type == KvType::kQ8_0) return attention_q8_0(batch, kv, il);
    const ModelHParams& hp = hp_;
    const int hd = hp.head_dim;
    const int group = hp.n_head / hp.n_head_kv;
    const int bs = kv.geometry().block_size;
    const float scale = hp.kq_scale;
    const int n_swa = hp.is_swa(il) ? hp.n_swa : 0;  // 0: the whole causal past
    const float cap = hp.attn_logit_softcap;          // 0: no soft-capping (one test per query)
    const AttnF16Kernels& fk = attn_f16_kernels();
    Scratch& s = *s_;
    // F16 cache slabs are head-major (kv_storage.h): one KV head's rows of a block are
    // consecutive, hd elements apart.
    const int stride = hd;
    const std::vector<Scratch::AttnItem>& items = s.attn_items;
    const bool decode_only = s.attn_decode_only;
    if (decode_only) s.attn_ranges->reset(static_cast<int64_t>(items.size()));
    pool_->run([&](int i_thread, int n_threads) {
        const int64_t ss = s.score_stride;
        float* scores = s.scores.data() + static_cast<size_t>(i_thread) * kAttnQueries * ss;
        float* acc = s.attn_acc.data() + static_cast<size_t>(i_thread) * kAccRowsPerThread * hd;
        float* qh = s.attn_q.data() + static_cast<size_t>(i_thread) * kAttnQueries * hd;
        const uint16_t** vblocks = s.attn_rows.data() + static_cast<size_t>(i_thread) * opts_.max_ctx;
        // Decode steps: each thread takes a contiguous share of the items, so a sequence's KV
        // heads (adjacent in the cache rows) mostly go to one core one after another, then
        // steals the rest of the others' shares for balance (+12 % at 16 streams of 512 tokens
        // against items dealt in turn). Prompt items, whose cost grows along the list, are dealt
        // in turn.
        size_t w = i_thread;
        for (int64_t wi = 0;; w += n_threads) {
            if (decode_only) {
                if ((wi = s.attn_ranges->next(i_thread)) < 0) break;
                w = static_cast<size_t>(wi);
            } else if (w >= items.size()) {
                break;
            }
            const Scratch::AttnItem& it = items[w];
            const int kvh = it.h0 / group;
            const BatchSeq& sq = batch.seqs[s.seq[it.t0]];
            const int last_kv = s.pos[it.t0 + it.nt - 1] + 1;  // causal: positions [0, pos]
            // A token at position p sees [window_begin(p), p]. Scores are indexed by absolute
            // position and the loops start at a block (prompt: kVChunk) boundary at or before
            // the item's first window, with zero weights below each token's window: a zero
            // weight adds +0 to every partial sum, so the bits are those of a full-length
            // masked pass (llama.cpp's), and blocks wholly before the window are not read.
            const auto window_begin = [&](int pos) { return n_swa > 0 ? std::max(0, pos + 1 - n_swa) : 0; };
            if (sq.n_tokens < 2) {
                // Decode: ne tokens of one sequence (in position order), it.nh heads of one KV
                // head; query (entry e, head g) is number e * nh + g, its scores at
                // scores + (e * nh + g) * score_stride.
                const Scratch::DecodeSpan span = s.decode_span(it, n_swa, bs);
                const int ne = span.ne, nh = it.nh, nq = ne * nh;
                const int* ents = span.ents;
                const int last_all = span.last;
                const int p_begin = span.p_begin;
                // The cache rows were last read a step ago and are rarely still in cache: each
                // block's K rows are asked for a block ahead, its V during its dots (P·V reads V
                // one dimension pair at a time, a line per tile: from memory that would be a
                // strided walk).
                const int v_tile = kv_v_tile(bs);
                const auto ahead = [&](bool v, int p) {  // the block at position p, if any
                    if (p >= last_all) return;
                    const uint8_t* b = kv.head_rows(v, sq.block_table[p / bs], il, kvh, hd);
                    const int n = std::min(bs, last_all - p);
                    prefetch_rows(b, hd * sizeof(uint16_t), v ? (n + v_tile - 1) / v_tile * v_tile : n, hd * sizeof(uint16_t));
                };
                ahead(false, p_begin);
                // The next item's first K block (the next in this thread's share, unless stolen).
                if (decode_only && w + 1 < items.size()) {
                    const Scratch::AttnItem& nx = items[w + 1];
                    const BatchSeq& ns = batch.seqs[s.seq[nx.t0]];
                    const Scratch::DecodeSpan n = s.decode_span(nx, n_swa, bs);
                    prefetch_rows(kv.head_rows(false, ns.block_table[n.p_begin / bs], il, nx.h0 / group, hd),
                                  hd * sizeof(uint16_t), std::min(bs, n.last - n.p_begin), hd * sizeof(uint16_t));
                }
                for (int e = 0; e < ne; ++e) {
                    const float* q = s.q.data() + static_cast<size_t>(ents[e]) * hp.q_dim() + it.h0 * hd;
                    fk.round_f16_row(q, qh + e * nh * hd, nh * hd);
                }
                for (int p = p_begin; p < last_all; p += bs) {
                    ahead(false, p + bs);
                    ahead(true, p);
                    const auto* krow =
                        reinterpret_cast<const uint16_t*>(kv.head_rows(false, sq.block_table[p / bs], il, kvh, hd));
                    fk.dots_decode_group(qh, nq, krow, stride, std::min(bs, last_all - p), hd, scale, scores + p,
                                         static_cast<int>(ss));
                }
                for (int e = 0; e < ne; ++e) {
                    const int own_last = s.pos[ents[e]] + 1;
                    const int first_kv = window_begin(own_last - 1);
                    for (int g = 0; g < nh; ++g) {
                        float* sc = scores + static_cast<size_t>(e * nh + g) * ss;
                        window_softmax(sc, first_kv, own_last, cap);
                        std::fill(sc + p_begin, sc + first_kv, 0.0f);
                        std::fill(sc + own_last, sc + last_all, 0.0f);
                    }
                }
                // P·V over the transposed V blocks, the weights rounded to F16 once (as ggml
                // converts them for its F16 product).
                for (int e = 0; e < ne; ++e) {
                    if (s.v_late[ents[e]]) write_v_f16(kv, batch, il, ents[e], kvh);
                }
                for (int p = p_begin; p < last_all; p += bs) {
                    vblocks[(p - p_begin) / bs] =
                        reinterpret_cast<const uint16_t*>(kv.head_rows(true, sq.block_table[p / bs], il, kvh, hd));
                }
                float* outs[kAttnQueries];
                for (int e = 0; e < ne; ++e) {
                    for (int g = 0; g < nh; ++g) {
                        float* sc = scores + static_cast<size_t>(e * nh + g) * ss;
                        fk.round_f16_row(sc + p_begin, sc + p_begin, last_all - p_begin);
                        outs[e * nh + g] = s.att.data() + static_cast<size_t>(ents[e]) * hp.q_dim() + (it.h0 + g) * hd;
                    }
                }
                fk.pv_decode_t(scores, static_cast<int>(ss), nq, vblocks, bs, p_begin, last_all, outs, hd);
                continue;
            }
            // Prompt: query (token i, head g) is number i * nh + g, its scores at
            // scores + (i * nh + g) * score_stride and its 8 partial P·V rows at acc + (i * nh + g) * 8 * hd.
            const int nh = it.nh, nq = it.nt * nh;
            for (int i = 0; i < it.nt; ++i) {
                const float* q = s.q.data() + static_cast<size_t>(it.t0 + i) * hp.q_dim() + it.h0 * hd;
                fk.round_f16_row(q, qh + i * nh * hd, nh * hd);
            }
            // The dots up to the last token's position; the earlier tokens ignore the few past theirs.
            const int v_begin = window_begin(s.pos[it.t0]) / kVChunk * kVChunk;
            const int p_begin = v_begin / bs * bs;
            for (int p = p_begin; p < last_kv; p += bs) {
                const auto* krow =
                    reinterpret_cast<const uint16_t*>(kv.head_rows(false, sq.block_table[p / bs], il, kvh, hd));
                fk.dots_prefill_group(qh, nq, krow, stride, std::min(bs, last_kv - p), hd, scale, scores + p,
                                      static_cast<int>(ss));
            }
            for (int i = 0; i < it.nt; ++i) {
                const int pos = s.pos[it.t0 + i];
                const int first_kv = window_begin(pos);
                for (int g = 0; g < nh; ++g) {
                    float* sc = scores + static_cast<size_t>(i * nh + g) * ss;
                    window_softmax(sc, first_kv, pos + 1, cap);
                    std::fill(sc + v_begin, sc + first_kv, 0.0f);
                }
            }
            // P·V a chunk of kVChunk positions at a time (a multiple of 8, so position p goes to
            // partial row p % 8 in every chunk): the chunk's V (transposed in the cache) is converted into floats
            // once, then every query accumulates its 8 partial rows from them.
            std::fill(acc, acc + static_cast<size_t>(nq) * kPrefillRows * hd, 0.0f);
            float* vt = acc + static_cast<size_t>(kAttnQueries) * kPrefillRows * hd;
            const uint16_t* cols[kVChunk];
            for (int p0 = v_begin; p0 < last_kv; p0 += kVChunk) {
                const int m = std::min(kVChunk, last_kv - p0);
                for (int j = 0; j < m; ++j) {
                    const int p = p0 + j;
                    cols[j] = reinterpret_cast<const uint16_t*>(kv.head_rows(true, sq.block_table[p / bs], il, kvh, hd)) +
                              kv_v_offset(bs, hd, p % bs, 0);
                }
                fk.gather_vt(cols, kv_v_tile(bs), m, hd, vt, kVChunk);
                for (int i = 0; i < it.nt; ++i) {
                    const int mi = std::min(m, s.pos[it.t0 + i] + 1 - p0);
                    if (mi <= 0) continue;
                    for (int g = 0; g < nh; ++g) {
                        const int k = i * nh + g;
                        fk.accumulate_t(scores + static_cast<size_t>(k) * ss + p0, vt, kVChunk, mi,
                                        acc + static_cast<size_t>(k) * kPrefillRows * hd, hd);
                    }
                }
            }
            for (int i = 0; i < it.nt; ++i) {
                for (int g = 0; g < nh; ++g) {
                    fk.reduce_prefill_t(acc + static_cast<size_t>(i * nh + g) * kPrefillRows * hd,
                                        s.att.data() + static_cast<size_t>(it.t0 + i) * hp.q_dim() + (it.h0 + g) * hd, hd);
                }
            }
        }
    });
}

void Model::attention_q8_0(const Batch& batch, KvStorage& kv, int il) {
    const ModelHParams& hp = hp_;
    const int n_tok = static_cast<int>(batch.tokens.size());
    const int hd = hp.head_dim;
    const int group = hp.n_head / hp.n_head_kv;
    const int bs = kv.geometry().block_size;
    const size_t head_bytes = kv.head_bytes(hd);
    const float scale = hp.kq_scale;
    const int n_swa = hp.is_swa(il) ? hp.n_swa : 0;
    const float cap = hp.attn_logit_softcap;
    const QuantKernels& kq = quant_kernels(DType::kQ8_0);
    Scratch& s = *s_;
    pool_->run([&](int i_thread, int n_threads) {
        float* scores = s.scores.data() + static_cast<size_t>(i_thread) * opts_.max_ctx;
        float* acc = s.attn_acc.data() + static_cast<size_t>(i_thread) * kAccRowsPerThread * hd;
        float* vbuf = acc + hd;
        uint8_t qq[kMaxHeadDim / 32 * 34];
        const int64_t n_items = static_cast<int64_t>(n_tok) * hp.n_head;
        for (int64_t w = i_thread; w < n_items; w += n_threads) {  // in turn, as attention()
            const int t = static_cast<int>(w / hp.n_head);
            const int h = static_cast<int>(w % hp.n_head);
            const int kvh = h / group;
            const BatchSeq& sq = batch.seqs[s.seq[t]];
            const int n_kv = s.pos[t] + 1;
            const int first_kv = n_swa > 0 ? std::max(0, n_kv - n_swa) : 0;
            kq.quantize_act_row(s.q.data() + static_cast<size_t>(t) * hp.q_dim() + h * hd, qq, hd);
            for (int p = first_kv; p < n_kv; ++p) {
                const uint8_t* krow = kv.head_rows(false, sq.block_table[p / bs], il, kvh, hd) + (p % bs) * head_bytes;
                scores[p] = kq.vec_dot(hd, krow, qq) * scale;
            }
            window_softmax(scores, first_kv, n_kv, cap);
            std::fill(acc, acc + hd, 0.0f);
            for (int p = first_kv; p < n_kv; ++p) {
                const uint8_t* vrow = kv.head_rows(true, sq.block_table[p / bs], il, kvh, hd) + (p % bs) * head_bytes;
                kq.dequantize_row(vrow, vbuf, hd);
                const float sp = scores[p];
                for (int d = 0; d < hd; ++d) acc[d] += sp * vbuf[d];
            }
            std::copy(acc, acc + hd, s.att.data() + static_cast<size_t>(t) * hp.q_dim() + h * hd);
        }
    });
}

// x += the FFN output of tokens [t0, t1) (post_ffn_norm first where the layer has one).
void Model::ffn_residual(const LayerWeights& L, int t0, int t1) {
    Scratch& s = *s_;
    const int E = hp_.n_embd;
    if (!L.post_ffn_norm.empty()) {
        float* o = s.proj.data() + static_cast<size_t>(t0) * E;
        rms_norm_rows(o, E, L.post_ffn_norm.data(), o, E, t1 - t0, E, hp_.rms_eps);
    }
    const size_t a = static_cast<size_t>(t0) * E;
    vec_add(s.x.data() + a, s.proj.data() + a, s.x.data() + a, static_cast<int64_t>(t1 - t0) * E);
}

void Model::parallel_for(int n, const std::function<void(int)>& fn) {
    if (n <= 1 || pool_->n_threads() == 1) {
        for (int i = 0; i < n; ++i) fn(i);
        return;
    }
    std::atomic<int> next{0};  // items in turn: their costs differ (greedy, top-p, grammar-free...)
    pool_->run([&](int, int) {
        for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
    });
}

Status Model::forward(const Batch& batch, KvStorage& kv, std::span<float> logits) {
    const ModelHParams& hp = hp_;
    const int n_tok = static_cast<int>(batch.tokens.size());
    if (n_tok == 0) return Status::ok();
    if (n_tok > opts_.max_batch_tokens) {
        return invalid_argument("batch of " + std::to_string(n_tok) + " tokens exceeds the limit " +
                                std::to_string(opts_.max_batch_tokens));
    }
    Scratch& s = *s_;
    const int bs = kv.geometry().block_size;
    int n_out = 0;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const BatchSeq& sq = batch.seqs[i];
        if (sq.n_tokens <= 0 || sq.i_begin < 0 || sq.i_begin + sq.n_tokens > n_tok) {
            return invalid_argument("batch sequence out of range");
        }
        const int end = sq.n_past + sq.n_tokens;
        if (end > opts_.max_ctx) {
            return invalid_argument("sequence of " + std::to_string(end) +
                                    " positions exceeds the context " + std::to_string(opts_.max_ctx));
        }
        if (static_cast<int64_t>(sq.n_blocks) * bs < end) {
            return internal_error("KV blocks do not cover the batch positions");
        }
        for (int j = 0; j < sq.n_tokens; ++j) {
            s.pos[sq.i_begin + j] = sq.n_past + j;
            s.seq[sq.i_begin + j] = static_cast<int32_t>(i);
            s.run_at[sq.i_begin + j] = j;
            s.run_len[sq.i_begin + j] = sq.n_tokens;
        }
        n_out += sq.want_logits ? 1 : 0;
    }
    if (logits.size() < static_cast<size_t>(n_out) * hp.n_vocab) {
        return invalid_argument("logits buffer too small");
    }
    for (int32_t tok : batch.tokens) {
        if (tok < 0 || tok >= hp.n_vocab) return invalid_argument("token id " + std::to_string(tok) + " out of range");
    }

    // Embeddings.
    const QuantKernels& ke = quant_kernels(tok_embd_->type);
    for (int t = 0; t < n_tok; ++t) {
        float* x = s.x.data() + static_cast<size_t>(t) * hp.n_embd;
        if (tok_embd_->packed8) {
            dequantize_packed_q8_0_row(*tok_embd_, batch.tokens[t], x);
        } else {
            ke.dequantize_row(tok_embd_->row(batch.tokens[t]), x, hp.n_embd);
        }
        if (hp.embd_scale != 1.0f) vec_scale(x, hp.embd_scale, x, hp.n_embd);
    }

    // RoPE tables, computed as ggml does (theta *= theta_scale per pair, in float) so that
    // positions rotate bit-for-bit like llama.cpp's.
    // Local (sliding-window) layers have their own base, scale 1 and no frequency factors.
    const int half = hp.n_rot / 2;
    const auto rope_table = [&](float base, float freq_scale, const float* factors, float* cos_out, float* sin_out) {
        const float theta_scale = std::pow(base, -2.0f / static_cast<float>(hp.n_rot));
        for (int t = 0; t < n_tok; ++t) {
            float theta = static_cast<float>(s.pos[t]);
            float* cs = cos_out + static_cast<size_t>(t) * half;
            float* sn = sin_out + static_cast<size_t>(t) * half;
            for (int i = 0; i < half; ++i) {
                const float ff = factors ? factors[i] : 1.0f;
                const float th = freq_scale * (theta / ff);
                cs[i] = std::cos(th);
                sn[i] = std::sin(th);
                theta *= theta_scale;
            }
        }
    };
    rope_table(hp.rope_freq_base, hp.rope_freq_scale, rope_freq_factors_.empty() ? nullptr : rope_freq_factors_.data(),
               s.rope_cos.data(), s.rope_sin.data());
    if (!s.rope_cos_swa.empty()) {
        rope_table(hp.rope_freq_base_swa, 1.0f, nullptr, s.rope_cos_swa.data(), s.rope_sin_swa.data());
    }

    const AttnF16Kernels& fk = attn_f16_kernels();
    const QuantKernels& kq8 = quant_kernels(DType::kQ8_0);
    FERROX_RETURN_IF_ERROR(check_kv_type(kv.geometry().type));
    if (kv.geometry().n_layer != hp.n_layer || kv.geometry().kv_dim != hp.kv_dim()) {
        return internal_error("the KV pool was made for another model");
    }
    const int E = hp.n_embd;
    const bool kv_f16 = kv.geometry().type == KvType::kF16;
    if (kv_f16) {
        plan_attention(batch);
    } else {
        s.v_late.assign(n_tok, 0);
    }
    // Decode steps of kFeedFromTokens tokens or more on F16 caches: each layer's KV asked for
    // during the products before its attention (plan_kv_prefetch). Below that the products
    // wait on their weights more than on arithmetic, and the KV's extra traffic cost more than
    // the attention saved (`ferrox bench -np 4, 8 -d 256`: -1 to -2 %).
    constexpr int kFeedFromTokens = 12;
    const bool feeding = kv_f16 && s.attn_decode_only && n_tok >= kFeedFromTokens && pool_->n_threads() > 1;
    bool kv_feed = false;
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights& L = layers_[il];
        const bool local = hp.is_swa(il);
        const float* rope_cos = local ? s.rope_cos_swa.data() : s.rope_cos.data();
        const float* rope_sin = local ? s.rope_sin_swa.data() : s.rope_sin.data();
        // Each elementwise step runs in the parallel region of the step before it where it
        // can (the previous layer's FFN residual with this norm, the norms with the next
        // product's input quantization): 4 barriers a layer fewer, the same operations per token.
        const MatJob qkv[] = {{L.wq, s.xn.data(), s.q.data()},
                              {L.wk, s.xn.data(), s.k.data()},
                              {L.wv, s.xn.data(), s.v.data()}};
        for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
            if (il > 0) ffn_residual(layers_[il - 1], t0, t1);
            rms_norm_rows(s.x.data() + static_cast<size_t>(t0) * E, E, L.attn_norm.data(),
                          s.xn.data() + static_cast<size_t>(t0) * E, E, t1 - t0, E, hp.rms_eps);
            quantize_inputs(qkv, 3, n_tok, t0, t1);
        });
        if (il == 0) kv_feed = feeding && plan_kv_prefetch(batch, kv, 0, feed_steps(qkv, 3, n_tok));
        matmuls(qkv, 3, n_tok, true, /*quantized=*/true, kv_feed);
        for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
            for (int t = t0; t < t1; ++t) {
                float* q = s.q.data() + static_cast<size_t>(t) * hp.q_dim();
                float* k = s.k.data() + static_cast<size_t>(t) * hp.kv_dim();
                float* v = s.v.data() + static_cast<size_t>(t) * hp.kv_dim();
                if (!L.bq.empty()) {
                    vec_add(q, L.bq.data(), q, hp.q_dim());
                    vec_add(k, L.bk.data(), k, hp.kv_dim());
                    vec_add(v, L.bv.data(), v, hp.kv_dim());
                }
                const float* cs = rope_cos + static_cast<size_t>(t) * half;
                const float* sn = rope_sin + static_cast<size_t>(t) * half;
                if (!L.q_norm.empty())
                    rms_norm_rows(q, hp.head_dim, L.q_norm.data(), q, hp.head_dim, hp.n_head, hp.head_dim, hp.rms_eps);
                for (int h = 0; h < hp.n_head; ++h) rope_head(q + h * hp.head_dim, cs, sn, hp.n_rot, hp.rope_ordering);
                if (hp.q_scale != 1.0f) vec_scale(q, hp.q_scale, q, hp.q_dim());
                if (!L.k_norm.empty()) {
                    rms_norm_rows(k, hp.head_dim, L.k_norm.data(), k, hp.head_dim, hp.n_head_kv, hp.head_dim,
                                  hp.rms_eps);
                }
                for (int h = 0; h < hp.n_head_kv; ++h) rope_head(k + h * hp.head_dim, cs, sn, hp.n_rot, hp.rope_ordering);
                // Store K and V of this position.
                const BatchSeq& sq = batch.seqs[s.seq[t]];
                const int p = s.pos[t];
                const int32_t blk = sq.block_table[p / bs];
                if (kv.geometry().type == KvType::kF16) {
                    for (int h = 0; h < hp.n_head_kv; ++h) {
                        const size_t at = static_cast<size_t>(p % bs) * hp.head_dim;
                        fk.to_f16(k + h * hp.head_dim,
                                  reinterpret_cast<uint16_t*>(kv.head_rows(false, blk, il, h, hp.head_dim)) + at,
                                  hp.head_dim);
                        if (!s.v_late[t]) write_v_f16(kv, batch, il, t, h);
                    }
                } else {  // per head: the same blocks of 32 as the whole row's (head_dim % 32 == 0)
                    const size_t at = static_cast<size_t>(p % bs) * kv.head_bytes(hp.head_dim);
                    for (int h = 0; h < hp.n_head_kv; ++h) {
                        kq8.quantize_act_row(k + h * hp.head_dim, kv.head_rows(false, blk, il, h, hp.head_dim) + at, hp.head_dim);
                        kq8.quantize_act_row(v + h * hp.head_dim, kv.head_rows(true, blk, il, h, hp.head_dim) + at, hp.head_dim);
                    }
                }
            }
        });
        attention(batch, kv, il);
        const MatJob o[] = {{L.wo, s.att.data(), s.proj.data()}};
        const MatJob gate_up[] = {{L.w_gate, s.xn.data(), s.gate.data()},
                                  {L.w_up, s.xn.data(), s.up.data()}};
        const MatJob down[] = {{L.w_down, s.gate.data(), s.proj.data()}};
        // The next layer's KV, asked for during this layer's last products and its QKV.
        if (il + 1 < hp.n_layer) {
            const LayerWeights& N = layers_[il + 1];
            const MatJob next_qkv[] = {{N.wq, nullptr, nullptr}, {N.wk, nullptr, nullptr}, {N.wv, nullptr, nullptr}};
            kv_feed = feeding && plan_kv_prefetch(batch, kv, il + 1,
                                                  feed_steps(o, 1, n_tok) + feed_steps(gate_up, 2, n_tok) +
                                                      feed_steps(down, 1, n_tok) + feed_steps(next_qkv, 3, n_tok));
        } else {
            kv_feed = false;
        }
        matmuls(o, 1, n_tok, true, false, kv_feed);
        for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
            const size_t a = static_cast<size_t>(t0) * E;
            float* o = s.proj.data() + a;
            if (!L.post_attn_norm.empty()) rms_norm_rows(o, E, L.post_attn_norm.data(), o, E, t1 - t0, E, hp.rms_eps);
            vec_add(s.x.data() + a, o, s.x.data() + a, static_cast<int64_t>(t1 - t0) * E);
            rms_norm_rows(s.x.data() + a, E, L.ffn_norm.data(), s.xn.data() + a, E, t1 - t0, E, hp.rms_eps);
            quantize_inputs(gate_up, 2, n_tok, t0, t1);
        });
        matmuls(gate_up, 2, n_tok, true, /*quantized=*/true, kv_feed);
        for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
            const size_t a = static_cast<size_t>(t0) * hp.n_ff;
            const int64_t n = static_cast<int64_t>(t1 - t0) * hp.n_ff;
            if (traits_.ffn_act == FfnActivation::kGeluTanh) {
                gelu_tanh_mul(s.gate.data() + a, s.up.data() + a, s.gate.data() + a, n);
            } else {
                silu_mul(s.gate.data() + a, s.up.data() + a, s.gate.data() + a, n);
            }
            quantize_inputs(down, 1, n_tok, t0, t1);
        });
        matmuls(down, 1, n_tok, true, /*quantized=*/true, kv_feed);
    }
    // The last layer's FFN residual (the others' ran with the next layer's norm).
    for_token_ranges(*pool_, n_tok, [&](int t0, int t1) { ffn_residual(layers_[hp.n_layer - 1], t0, t1); });

    // Final norm and logits, only for the rows that want them.
    int n_rows = 0;
    for (const BatchSeq& sq : batch.seqs) {
        if (!sq.want_logits) continue;
        const int t = sq.i_begin + sq.n_tokens - 1;
        rms_norm(s.x.data() + static_cast<size_t>(t) * E, output_norm_.data(),
                 s.xn.data() + static_cast<size_t>(n_rows) * E, E, hp.rms_eps);
        ++n_rows;
    }
    if (n_rows > 0) {
        const MatJob out[] = {{output_, s.xn.data(), logits.data()}};
        matmuls(out, 1, n_rows, /*rows_are_tokens=*/false);
        if (hp.final_logit_softcap > 0) {  // as ggml: scale by 1/c, tanh, scale by c
            const float c = hp.final_logit_softcap, inv_c = 1.0f / c;
            for (size_t i = 0; i < static_cast<size_t>(n_rows) * hp.n_vocab; ++i) {
                logits[i] = c * std::tanh(logits[i] * inv_c);
            }
        }
    }
    return Status::ok();
}

}  // namespace ferrox
