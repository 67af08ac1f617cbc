// The CPU model's mixture-of-experts FFN block (FfnKind::kMoe), llama.cpp's build_moe_ffn for
// the softmax-routed architectures:
//
//   probs   = softmax(router · x)                    over the n_expert experts
//   chosen  = the n_expert_used largest probs         (weights: their probs, renormalized to
//                                                      sum 1 where the architecture says)
//   out     = sum over chosen e, in rank order, of weight_e * down_e(silu(gate_e · x) * up_e · x)
//   (+ sigmoid(shexp_gate · x) * the shared expert's dense FFN, qwen2moe)
//
// The products (llama.cpp's mul_mat_id): the batch's (token, expert) pairs are grouped by
// expert, so that each active expert's matrices are read once per step for all the tokens
// that chose it, through the same packed many-column kernels as the dense products. The
// quantized input rows are gathered into expert order once; the gate and up outputs, their
// activation and the down input stay in that order; the combine reads each token's rows back.
// Work is dealt out as 16-row units of every (expert, matrix) job and stolen as in matmuls, so
// a step with few tokens per expert (decode) and one with many (a prompt) both keep the
// threads busy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "kernels/ops.h"
#include "kernels/quants.h"
#include "model/cpu/internal.h"

namespace ferrox {


ExpertRouting Model::expert_routing() const {
    if (!expert_tokens_) return {};
    ExpertRouting r{w_.hp.n_layer, w_.hp.n_expert, {}};
    r.tokens.resize(static_cast<size_t>(r.n_layer) * r.n_expert);
    for (size_t i = 0; i < r.tokens.size(); ++i) r.tokens[i] = expert_tokens_[i].load(std::memory_order_relaxed);
    return r;
}

// The router: each token's chosen experts and their weights (moe_sel, moe_w, n_expert_used
// per token, by rank), from the router's logits in moe_router.
void Model::moe_route(int il, int t0, int t1) {
    const ModelHParams& hp = w_.hp;
    Scratch& s = *s_;
    const int E = hp.n_expert, K = hp.n_expert_used;
    thread_local std::vector<int32_t> order;  // (grows once per thread)
    order.resize(E);
    const bool after_top_k = w_.traits.moe_gating == MoeGating::kSoftmaxWeight;
    const std::vector<float>& bias = w_.layers[il].gate_inp_b;
    for (int t = t0; t < t1; ++t) {
        float* p = s.moe_router.data() + static_cast<size_t>(t) * E;
        if (!bias.empty()) vec_add(p, bias.data(), p, E);
        if (!after_top_k) softmax_inplace(p, E);
        std::iota(order.begin(), order.end(), 0);
        // The largest first; equal values by expert id (a stable descending order).
        std::partial_sort(order.begin(), order.begin() + K, order.end(),
                          [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
        int32_t* sel = s.moe_sel.data() + static_cast<size_t>(t) * K;
        float* w = s.moe_w.data() + static_cast<size_t>(t) * K;
        for (int k = 0; k < K; ++k) {
            sel[k] = order[k];
            w[k] = p[order[k]];
        }
        if (after_top_k) softmax_inplace(w, K);  // gpt-oss: weights from the chosen logits alone
        if (w_.traits.moe_norm_weights) {
            float sum = 0.0f;
            for (int k = 0; k < K; ++k) sum += w[k];
            sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp (F16's smallest normal)
            for (int k = 0; k < K; ++k) w[k] /= sum;
        }
    }
}

// Groups the batch's (token, rank) pairs by expert: moe_offset[e] is where expert e's rows
// start in expert order, moe_pair_tok[i] the token of row i, moe_row_of[t * K + k] the row of
// token t's k-th expert. Counts the routed tokens per expert for /metrics.
void Model::moe_group(int il, int n_tok) {
    const ModelHParams& hp = w_.hp;
    Scratch& s = *s_;
    const int E = hp.n_expert, K = hp.n_expert_used;
    std::fill(s.moe_offset.begin(), s.moe_offset.end(), 0);
    for (int i = 0; i < n_tok * K; ++i) ++s.moe_offset[s.moe_sel[i] + 1];
    for (int e = 0; e < E; ++e) {
        if (s.moe_offset[e + 1] > 0) {
            expert_tokens_[static_cast<size_t>(il) * E + e].fetch_add(s.moe_offset[e + 1], std::memory_order_relaxed);
        }
        s.moe_offset[e + 1] += s.moe_offset[e];
    }
    std::vector<int32_t>& next = s.moe_next;
    std::copy(s.moe_offset.begin(), s.moe_offset.end() - 1, next.begin());
    for (int t = 0; t < n_tok; ++t) {  // token order within each expert's group
        for (int k = 0; k < K; ++k) {
            const int row = next[s.moe_sel[t * K + k]]++;
            s.moe_pair_tok[row] = t;
            s.moe_row_expert[row] = s.moe_sel[t * K + k];
            s.moe_row_of[t * K + k] = row;
        }
    }
}

// gpt-oss's clamped SwiGLU into gate, as ggml's swiglu_oai (alpha 1.702, limit 7).
static void swiglu_oai(float* gate, const float* up, int64_t n) {
    constexpr float kAlpha = 1.702f, kLimit = 7.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = std::min(gate[i], kLimit);
        const float y = std::clamp(up[i], -kLimit, kLimit);
        gate[i] = x / (1.0f + std::exp(kAlpha * (-x))) * (y + 1.0f);
    }
}

// Every job's rows against its group, 16-row units dealt out and stolen between threads.
void Model::expert_products(const ExpertJob* jobs, int n_jobs) {
    constexpr int64_t kUnit = 16;
    constexpr int kColChunk = 64;
    std::vector<int64_t>& unit_begin = s_->moe_unit_begin;
    unit_begin.assign(n_jobs + 1, 0);
    for (int j = 0; j < n_jobs; ++j) unit_begin[j + 1] = unit_begin[j] + (jobs[j].w->ne[1] + kUnit - 1) / kUnit;
    if (unit_begin[n_jobs] == 0) return;
    s_->tiles->reset(unit_begin[n_jobs]);
    pool_->run([&](int i_thread, int) {
        int j = 0;
        for (int64_t ub, ue; s_->tiles->next_span(i_thread, 8, &ub, &ue);) {
            while (unit_begin[j + 1] <= ub) ++j;
            while (unit_begin[j] > ub) --j;
            for (int jj = j; jj < n_jobs && unit_begin[jj] < ue; ++jj) {
                const ExpertJob& job = jobs[jj];
                const TensorView& w = *job.w;
                const QuantKernels& kq = quant_kernels(w.type);
                const int64_t n_out = w.ne[1];
                const int64_t r = (std::max(ub, unit_begin[jj]) - unit_begin[jj]) * kUnit;
                const int64_t nr = std::min((std::min(ue, unit_begin[jj + 1]) - unit_begin[jj]) * kUnit, n_out) - r;
                const int64_t w_row = w.row_bytes();
                const uint8_t* wr = static_cast<const uint8_t*>(w.data) + (job.row0 + r) * w_row;
                for (int c0 = 0; c0 < job.n_cols; c0 += kColChunk) {
                    const int nc = std::min(kColChunk, job.n_cols - c0);
                    const uint8_t* a = job.a + c0 * job.a_row_bytes;
                    float* y = job.y + static_cast<int64_t>(c0) * n_out + r;
                    if (w.packed8) {
                        packed_gemm(kq)(w.ne[0], wr, nr, a, job.a_row_bytes, nc, y, n_out);
                    } else if (kq.vec_dot_tile && nc >= 4) {
                        kq.vec_dot_tile(w.ne[0], wr, w_row, nr, a, job.a_row_bytes, nc, y, n_out);
                    } else {
                        for (int c = 0; c < nc; ++c) {
                            kq.vec_dot_rows(w.ne[0], wr, w_row, nr, a + c * job.a_row_bytes, y + c * n_out);
                        }
                    }
                }
            }
        }
    });
}

// The activation rows a matrix's products take, and how to make them.
static void act_format(const TensorView& w, DType* type, void (**quantize)(const float*, void*, int64_t)) {
    const QuantKernels& kq = quant_kernels(w.type);
    *type = w.packed8 ? kq.packed_act_type : kq.act_type;
    *quantize = w.packed8 ? kq.quantize_packed_act_row : kq.quantize_act_row;
}

// The routed experts of a layer (xn in, proj out), the shared expert beside them.
void Model::moe_ffn(const LayerWeights& L, const LayerJobs& J, int il, int n_tok) {
    const ModelHParams& hp = w_.hp;
    Scratch& s = *s_;
    const int K = hp.n_expert_used;
    const int E = hp.n_embd;
    const int F = hp.n_ff_exp;
    const int n_rows = n_tok * K;
    // Router (and the shared expert's gate and up), inputs quantized by ffn_input.
    matmuls(J.ffn_in, J.n_ffn_in, n_tok, true, /*quantized=*/true);
    for_token_ranges(*pool_, n_tok, [&](int t0, int t1) { moe_route(il, t0, t1); });
    moe_group(il, n_tok);

    // Gate and up inputs: each token's row quantized once, gathered into expert order.
    DType gate_at, up_at, down_at;
    void (*gate_q)(const float*, void*, int64_t);
    void (*up_q)(const float*, void*, int64_t);
    void (*down_q)(const float*, void*, int64_t);
    act_format(*L.gate_exps, &gate_at, &gate_q);
    act_format(*L.up_exps, &up_at, &up_q);
    act_format(*L.down_exps, &down_at, &down_q);
    const bool same_in = gate_at == up_at && gate_q == up_q;
    const int64_t in_rb = act_row_stride(dtype_row_bytes(gate_at, E));
    const int64_t in_rb_up = act_row_stride(dtype_row_bytes(up_at, E));
    uint8_t* tok_rows = s.act.data();                                   // (n_tok) gate's format
    uint8_t* tok_rows_up = tok_rows + (in_rb * n_tok + 63) / 64 * 64;   // (n_tok) up's, if another
    uint8_t* in_gate = s.moe_act.data();                                // (n_rows) expert order
    uint8_t* in_up = same_in ? in_gate : in_gate + (in_rb * n_rows + 63) / 64 * 64;
    CHECK(static_cast<size_t>((in_rb + in_rb_up) * n_tok + 128) <= s.act.size());
    for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
        for (int t = t0; t < t1; ++t) {
            const float* x = s.xn.data() + static_cast<size_t>(t) * E;
            gate_q(x, tok_rows + t * in_rb, E);
            if (!same_in) up_q(x, tok_rows_up + t * in_rb_up, E);
        }
    });
    for_token_ranges(*pool_, n_rows, [&](int r0, int r1) {
        for (int r = r0; r < r1; ++r) {
            const int t = s.moe_pair_tok[r];
            std::memcpy(in_gate + r * in_rb, tok_rows + t * in_rb, in_rb);
            if (!same_in) std::memcpy(in_up + r * in_rb_up, tok_rows_up + t * in_rb_up, in_rb_up);
        }
    });

    std::vector<ExpertJob>& jobs = s.moe_jobs;
    jobs.clear();
    for (int e = 0; e < hp.n_expert; ++e) {
        const int r0 = s.moe_offset[e], n = s.moe_offset[e + 1] - r0;
        if (n == 0) continue;
        jobs.push_back({L.gate_exps, static_cast<int64_t>(e) * F, in_gate + r0 * in_rb, in_rb, n,
                        s.moe_gate.data() + static_cast<size_t>(r0) * F});
        jobs.push_back({L.up_exps, static_cast<int64_t>(e) * F, in_up + r0 * in_rb_up, in_rb_up, n,
                        s.moe_up.data() + static_cast<size_t>(r0) * F});
    }
    expert_products(jobs.data(), static_cast<int>(jobs.size()));

    // The activation of gate and up (their experts' biases first, where the layer has them),
    // quantized for down, still in expert order.
    const int64_t mid_rb = act_row_stride(dtype_row_bytes(down_at, F));
    uint8_t* in_down = s.moe_act.data();
    const bool biased = !L.gate_exps_b.empty();
    const bool oai = w_.traits.ffn_act == FfnActivation::kSwigluOai;
    for_token_ranges(*pool_, n_rows, [&](int r0, int r1) {
        for (int r = r0; r < r1; ++r) {
            float* g = s.moe_gate.data() + static_cast<size_t>(r) * F;
            float* u = s.moe_up.data() + static_cast<size_t>(r) * F;
            if (biased) {
                const size_t e = static_cast<size_t>(s.moe_row_expert[r]) * F;
                vec_add(u, L.up_exps_b.data() + e, u, F);
                vec_add(g, L.gate_exps_b.data() + e, g, F);
            }
            if (oai) {
                swiglu_oai(g, u, F);
            } else {
                silu_mul(g, u, g, F);
            }
            down_q(g, in_down + r * mid_rb, F);
        }
    });
    jobs.clear();
    for (int e = 0; e < hp.n_expert; ++e) {
        const int r0 = s.moe_offset[e], n = s.moe_offset[e + 1] - r0;
        if (n == 0) continue;
        jobs.push_back({L.down_exps, static_cast<int64_t>(e) * E, in_down + r0 * mid_rb, mid_rb, n,
                        s.moe_down.data() + static_cast<size_t>(r0) * E});
    }
    expert_products(jobs.data(), static_cast<int>(jobs.size()));
    if (!L.down_exps_b.empty()) {
        for_token_ranges(*pool_, n_rows, [&](int r0, int r1) {
            for (int r = r0; r < r1; ++r) {
                float* d = s.moe_down.data() + static_cast<size_t>(r) * E;
                vec_add(d, L.down_exps_b.data() + static_cast<size_t>(s.moe_row_expert[r]) * E, d, E);
            }
        });
    }

    // The shared expert (its gate and up came with the router).
    if (L.w_down) {
        for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
            const size_t a = static_cast<size_t>(t0) * hp.n_ff_shexp;
            const int64_t n = static_cast<int64_t>(t1 - t0) * hp.n_ff_shexp;
            silu_mul(s.gate.data() + a, s.up.data() + a, s.gate.data() + a, n);
            quantize_inputs(J.down, 1, n_tok, t0, t1);
        });
        matmuls(J.down, 1, n_tok, true, /*quantized=*/true);
    }

    // Each token's experts weighted and summed in rank order (ggml: mul, then adds), plus the
    // shared expert scaled by its gate.
    for_token_ranges(*pool_, n_tok, [&](int t0, int t1) {
        for (int t = t0; t < t1; ++t) {
            float* out = s.proj.data() + static_cast<size_t>(t) * E;
            for (int k = 0; k < K; ++k) {
                const float w = s.moe_w[t * K + k];
                const float* d = s.moe_down.data() + static_cast<size_t>(s.moe_row_of[t * K + k]) * E;
                if (k == 0) {
                    for (int i = 0; i < E; ++i) out[i] = d[i] * w;
                } else {
                    for (int i = 0; i < E; ++i) out[i] += d[i] * w;
                }
            }
            if (L.w_down) {
                const float* x = s.xn.data() + static_cast<size_t>(t) * E;
                const float gl = dot_f32(L.gate_inp_shexp.data(), x, E);
                // sigmoid as llama.cpp writes it, silu(g) / g
                const float gate = gl != 0.0f ? gl / (1.0f + std::exp(-gl)) / gl : 0.5f;
                const float* sh = s.shexp_out.data() + static_cast<size_t>(t) * E;
                for (int i = 0; i < E; ++i) out[i] += sh[i] * gate;
            }
        }
    });
}

}  // namespace ferrox
