// The CPU model's forward pass: embeddings, each layer's blocks in order (attention, then the
// feed-forward), the final norm and the logits of the rows that want them.
//
// A block is an input step (its norm of the residual stream x into xn, and the quantized
// inputs of its first product), a body (its products and the work between them) and an output
// step (its output in proj, post-normed where the layer has one, added to x). The steps work
// on token ranges, so the forward runs one block's output step and the next block's input step
// in one parallel region: two barriers a layer fewer, the same operations per token.
// An architecture chooses its blocks' options through ArchTraits (weights.h); the FFN body is
// where a layer's FfnKind chooses its products (dense_ffn here, moe_ffn in cpu/moe.cc).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "kernels/ops.h"
#include "kernels/prefetch_feed.h"
#include "kernels/quants.h"
#include "kernels/attention_f16.h"
#include "model/cpu/internal.h"
#include "model/gelu.h"
#include "tensor/fp16.h"

namespace ferrox {

Model::LayerJobs Model::layer_jobs(const LayerWeights& L) const {
    Scratch& s = *s_;
    LayerJobs J{{{L.wq, s.xn.data(), s.q.data()}, {L.wk, s.xn.data(), s.k.data()}, {L.wv, s.xn.data(), s.v.data()}},
                {{L.wo, s.att.data(), s.proj.data()}},
                {{L.w_gate, s.xn.data(), s.gate.data()}, {L.w_up, s.xn.data(), s.up.data()}, {}},
                2,
                {{L.w_down, s.gate.data(), s.proj.data()}}};
    if (w_.traits.ffn == FfnKind::kMoe) {
        J.ffn_in[0] = {L.gate_inp, s.xn.data(), s.moe_router.data()};
        J.n_ffn_in = 1;
        if (L.w_gate) {  // the shared expert
            J.ffn_in[1] = {L.w_gate, s.xn.data(), s.gate.data()};
            J.ffn_in[2] = {L.w_up, s.xn.data(), s.up.data()};
            J.n_ffn_in = 3;
            J.down[0].y = s.shexp_out.data();
        }
    }
    return J;
}

// ---- Attention block ----

void Model::attn_input(const LayerWeights& L, const LayerJobs& J, int n_tok, int t0, int t1) {
    Scratch& s = *s_;
    const int E = w_.hp.n_embd;
    rms_norm_rows(s.x.data() + static_cast<size_t>(t0) * E, E, L.attn_norm.data(),
                  s.xn.data() + static_cast<size_t>(t0) * E, E, t1 - t0, E, w_.hp.rms_eps);
    quantize_inputs(J.qkv, 3, n_tok, t0, t1);
}

// Tokens [t0, t1): Q, K and V biased, QK-normed, rotated and scaled as the layer says, K and V
// stored into the cache (an F16 V waits for its decode item where plan_attention said so).
void Model::qkv_finish(const Batch& batch, KvStorage& kv, int il, int t0, int t1) {
    const ModelHParams& hp = w_.hp;
    const LayerWeights& L = w_.layers[il];
    Scratch& s = *s_;
    const AttnF16Kernels& fk = attn_f16_kernels();
    const QuantKernels& kq8 = quant_kernels(DType::kQ8_0);
    const int bs = kv.geometry().block_size;
    const int half = hp.n_rot / 2;
    const bool local = hp.is_swa(il);
    const float* rope_cos = local ? s.rope_cos_swa.data() : s.rope_cos.data();
    const float* rope_sin = local ? s.rope_sin_swa.data() : s.rope_sin.data();
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
        if (w_.traits.qk_norm_full) {  // olmoe: over the whole rows
            rms_norm(q, L.q_norm.data(), q, hp.q_dim(), hp.rms_eps);
            rms_norm(k, L.k_norm.data(), k, hp.kv_dim(), hp.rms_eps);
        } else if (!L.q_norm.empty()) {
            rms_norm_rows(q, hp.head_dim, L.q_norm.data(), q, hp.head_dim, hp.n_head, hp.head_dim, hp.rms_eps);
        }
        for (int h = 0; h < hp.n_head; ++h) rope_head(q + h * hp.head_dim, cs, sn, hp.n_rot, hp.rope_ordering);
        if (hp.q_scale != 1.0f) vec_scale(q, hp.q_scale, q, hp.q_dim());
        if (!L.k_norm.empty() && !w_.traits.qk_norm_full) {
            rms_norm_rows(k, hp.head_dim, L.k_norm.data(), k, hp.head_dim, hp.n_head_kv, hp.head_dim, hp.rms_eps);
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
                          reinterpret_cast<uint16_t*>(kv.head_rows(false, blk, il, h, hp.head_dim)) + at, hp.head_dim);
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
}

// QKV products, their finish and the cache writes, attention, the output product. `kv_feed`:
// the threads' KV feeds hold this layer's KV; returns whether they hold the next layer's for
// the products after it (asked for during this block's output product, the FFN's and the
// next QKV: feeding says whether the step feeds at all).
bool Model::attn_body(const Batch& batch, KvStorage& kv, int il, const LayerJobs& J, int n_tok, bool kv_feed,
                      bool feeding) {
    matmuls(J.qkv, 3, n_tok, true, /*quantized=*/true, kv_feed);
    for_token_ranges(*pool_, n_tok, [&](int t0, int t1) { qkv_finish(batch, kv, il, t0, t1); });
    attention(batch, kv, il);
    kv_feed = false;
    if (feeding && il + 1 < w_.hp.n_layer) {
        const LayerJobs N = layer_jobs(w_.layers[il + 1]);
        kv_feed = plan_kv_prefetch(batch, kv, il + 1,
                                   feed_steps(J.o, 1, n_tok) + ffn_feed_steps(J, n_tok) + feed_steps(N.qkv, 3, n_tok));
    }
    matmuls(J.o, 1, n_tok, true, false, kv_feed);
    return kv_feed;
}

// x += the attention output of tokens [t0, t1) (post_attention_norm first where the layer has one).
void Model::attn_output(const LayerWeights& L, int t0, int t1) {
    Scratch& s = *s_;
    const int E = w_.hp.n_embd;
    const size_t a = static_cast<size_t>(t0) * E;
    float* o = s.proj.data() + a;
    if (!L.bo.empty()) {
        for (int t = t0; t < t1; ++t) vec_add(o + static_cast<size_t>(t - t0) * E, L.bo.data(), o + static_cast<size_t>(t - t0) * E, E);
    }
    if (!L.post_attn_norm.empty()) rms_norm_rows(o, E, L.post_attn_norm.data(), o, E, t1 - t0, E, w_.hp.rms_eps);
    vec_add(s.x.data() + a, o, s.x.data() + a, static_cast<int64_t>(t1 - t0) * E);
}

// ---- Feed-forward block ----

void Model::ffn_input(const LayerWeights& L, const LayerJobs& J, int n_tok, int t0, int t1) {
    Scratch& s = *s_;
    const int E = w_.hp.n_embd;
    const size_t a = static_cast<size_t>(t0) * E;
    rms_norm_rows(s.x.data() + a, E, L.ffn_norm.data(), s.xn.data() + a, E, t1 - t0, E, w_.hp.rms_eps);
    quantize_inputs(J.ffn_in, J.n_ffn_in, n_tok, t0, t1);
}

// The feed-forward block's products by the layer's kind (ArchTraits::ffn); its output in proj.
void Model::ffn_body(const LayerWeights& L, const LayerJobs& J, int il, int n_tok, bool kv_feed) {
    switch (w_.traits.ffn) {
        case FfnKind::kDense: return dense_ffn(J, n_tok, kv_feed);
        case FfnKind::kMoe: return moe_ffn(L, J, il, n_tok);  // cpu/moe.cc
    }
}

// The steps of the KV feed that the FFN block's products take (plan_kv_prefetch spreads the
// next layer's KV over them).
int64_t Model::ffn_feed_steps(const LayerJobs& J, int n_tok) const {
    switch (w_.traits.ffn) {
        case FfnKind::kDense: return feed_steps(J.ffn_in, 2, n_tok) + feed_steps(J.down, 1, n_tok);
        case FfnKind::kMoe: return 0;  // the expert products do not feed the KV prefetch
    }
    return 0;
}

// gate and up, the activation (SwiGLU or GeGLU), down.
void Model::dense_ffn(const LayerJobs& J, int n_tok, bool kv_feed) {
    Scratch& s = *s_;
    const int n_ff = w_.hp.n_ff;
    matmuls(J.ffn_in, 2, n_tok, true, /*quantized=*/true, kv_feed);
    for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
        const size_t a = static_cast<size_t>(t0) * n_ff;
        const int64_t n = static_cast<int64_t>(t1 - t0) * n_ff;
        if (w_.traits.ffn_act == FfnActivation::kGeluTanh) {
            gelu_tanh_mul(s.gate.data() + a, s.up.data() + a, s.gate.data() + a, n);
        } else {
            silu_mul(s.gate.data() + a, s.up.data() + a, s.gate.data() + a, n);
        }
        quantize_inputs(J.down, 1, n_tok, t0, t1);
    });
    matmuls(J.down, 1, n_tok, true, /*quantized=*/true, kv_feed);
}

// x += the FFN output of tokens [t0, t1) (post_ffn_norm first where the layer has one).
void Model::ffn_output(const LayerWeights& L, int t0, int t1) {
    Scratch& s = *s_;
    const int E = w_.hp.n_embd;
    if (!L.post_ffn_norm.empty()) {
        float* o = s.proj.data() + static_cast<size_t>(t0) * E;
        rms_norm_rows(o, E, L.post_ffn_norm.data(), o, E, t1 - t0, E, w_.hp.rms_eps);
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

// Checks the batch against the model's limits, the KV storage and the logits buffer, and
// fills the scratch's per-token position, sequence and run tables.
Status Model::prepare_batch(const Batch& batch, const KvStorage& kv, std::span<float> logits) {
    const ModelHParams& hp = w_.hp;
    const int n_tok = static_cast<int>(batch.tokens.size());
    if (n_tok > opts_.max_batch_tokens) {
        return invalid_argument("batch of " + std::to_string(n_tok) + " tokens exceeds the limit " +
                                std::to_string(opts_.max_batch_tokens));
    }
    FERROX_RETURN_IF_ERROR(check_kv_type(kv.geometry().type));
    if (kv.geometry().n_layer != hp.n_layer || kv.geometry().kv_dim != hp.kv_dim()) {
        return internal_error("the KV pool was made for another model");
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
        n_out += sq.n_rows();
    }
    if (logits.size() < static_cast<size_t>(n_out) * hp.n_vocab) {
        return invalid_argument("logits buffer too small");
    }
    for (int32_t tok : batch.tokens) {
        if (tok < 0 || tok >= hp.n_vocab) return invalid_argument("token id " + std::to_string(tok) + " out of range");
    }
    return Status::ok();
}

// x: the batch tokens' embedding rows (scaled where the architecture says).
void Model::embed(const Batch& batch) {
    const ModelHParams& hp = w_.hp;
    Scratch& s = *s_;
    const QuantKernels& ke = quant_kernels(w_.tok_embd->type);
    for (size_t t = 0; t < batch.tokens.size(); ++t) {
        float* x = s.x.data() + t * hp.n_embd;
        if (w_.tok_embd->packed8) {
            dequantize_packed_q8_0_row(*w_.tok_embd, batch.tokens[t], x);
        } else {
            ke.dequantize_row(w_.tok_embd->row(batch.tokens[t]), x, hp.n_embd);
        }
        if (hp.embd_scale != 1.0f) vec_scale(x, hp.embd_scale, x, hp.n_embd);
    }
}

// RoPE tables of the batch's positions, computed as ggml does (theta *= theta_scale per pair, in
// float; YaRN as ggml's rope_yarn) so that positions rotate bit-for-bit like llama.cpp's. Local
// (sliding-window) layers have their own base, and scale 1 and no frequency factors unless the
// architecture scales them as the global ones (rope_scaled_swa).
void Model::rope_tables(int n_tok) {
    const ModelHParams& hp = w_.hp;
    Scratch& s = *s_;
    const int half = hp.n_rot / 2;
    const auto rope_table = [&](float base, float freq_scale, const float* factors, float* cos_out, float* sin_out) {
        const float theta_scale = std::pow(base, -2.0f / static_cast<float>(hp.n_rot));
        const float ext = hp.yarn_ext_factor;
        float mscale = hp.yarn_attn_factor;
        float corr[2] = {0, 0};
        if (ext != 0.0f) {
            // ggml_rope_yarn_corr_dims: the pairs whose wavelengths span the original context.
            const auto corr_dim = [&](float beta) {
                return static_cast<float>(hp.n_rot) *
                       std::log(static_cast<float>(hp.n_ctx_orig_yarn) / (beta * 2.0f * static_cast<float>(M_PI))) /
                       (2.0f * std::log(base));
            };
            corr[0] = std::max(0.0f, std::floor(corr_dim(hp.yarn_beta_fast)));
            corr[1] = std::min(static_cast<float>(hp.n_rot - 1), std::ceil(corr_dim(hp.yarn_beta_slow)));
            mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
        }
        for (int t = 0; t < n_tok; ++t) {
            float theta = static_cast<float>(s.pos[t]);
            float* cs = cos_out + static_cast<size_t>(t) * half;
            float* sn = sin_out + static_cast<size_t>(t) * half;
            for (int i = 0; i < half; ++i) {
                const float ff = factors ? factors[i] : 1.0f;
                const float extrap = theta / ff;
                float th = freq_scale * extrap;
                if (ext != 0.0f) {
                    const float y = (static_cast<float>(i) - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
                    const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * ext;
                    th = th * (1.0f - ramp) + extrap * ramp;
                }
                cs[i] = std::cos(th) * mscale;
                sn[i] = std::sin(th) * mscale;
                theta *= theta_scale;
            }
        }
    };
    rope_table(hp.rope_freq_base, hp.rope_freq_scale, w_.rope_freq_factors.empty() ? nullptr : w_.rope_freq_factors.data(),
               s.rope_cos.data(), s.rope_sin.data());
    if (!s.rope_cos_swa.empty()) {
        rope_table(hp.rope_freq_base_swa, hp.rope_scaled_swa ? hp.rope_freq_scale : 1.0f, nullptr,
                   s.rope_cos_swa.data(), s.rope_sin_swa.data());
    }
}

// The final norm and the logits of the rows that want them, in order.
void Model::output_logits(const Batch& batch, std::span<float> logits) {
    const ModelHParams& hp = w_.hp;
    Scratch& s = *s_;
    const int E = hp.n_embd;
    int n_rows = 0;
    for (const BatchSeq& sq : batch.seqs) {
        for (int t = sq.i_begin + sq.n_tokens - sq.n_rows(); t < sq.i_begin + sq.n_tokens; ++t) {
            rms_norm(s.x.data() + static_cast<size_t>(t) * E, w_.output_norm.data(),
                     s.xn.data() + static_cast<size_t>(n_rows) * E, E, hp.rms_eps);
            ++n_rows;
        }
    }
    if (n_rows == 0) return;
    const MatJob out[] = {{w_.output, s.xn.data(), logits.data()}};
    matmuls(out, 1, n_rows, /*rows_are_tokens=*/false);
    if (hp.final_logit_softcap > 0) {  // as ggml: scale by 1/c, tanh, scale by c
        const float c = hp.final_logit_softcap, inv_c = 1.0f / c;
        for (size_t i = 0; i < static_cast<size_t>(n_rows) * hp.n_vocab; ++i) logits[i] = c * std::tanh(logits[i] * inv_c);
    }
}

Status Model::forward(const Batch& batch, KvStorage& kv, std::span<float> logits) {
    const int n_tok = static_cast<int>(batch.tokens.size());
    if (n_tok == 0) return Status::ok();
    FERROX_RETURN_IF_ERROR(prepare_batch(batch, kv, logits));
    Scratch& s = *s_;
    embed(batch);
    rope_tables(n_tok);
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
    const int n_layer = w_.hp.n_layer;
    for (int il = 0; il < n_layer; ++il) {
        const LayerWeights& L = w_.layers[il];
        const LayerJobs J = layer_jobs(L);
        for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
            if (il > 0) ffn_output(w_.layers[il - 1], t0, t1);
            attn_input(L, J, n_tok, t0, t1);
        });
        if (il == 0) kv_feed = feeding && plan_kv_prefetch(batch, kv, 0, feed_steps(J.qkv, 3, n_tok));
        kv_feed = attn_body(batch, kv, il, J, n_tok, kv_feed, feeding);
        for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
            attn_output(L, t0, t1);
            ffn_input(L, J, n_tok, t0, t1);
        });
        ffn_body(L, J, il, n_tok, kv_feed);
    }
    // The last layer's FFN residual (the others' ran with the next layer's norm).
    for_token_ranges(*pool_, n_tok, [&](int t0, int t1) { ffn_output(w_.layers[n_layer - 1], t0, t1); });
    output_logits(batch, logits);
    return Status::ok();
}

}  // namespace ferrox
