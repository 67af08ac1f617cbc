#include "model/model.h"

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
#include "model/cpu/internal.h"
#include "model/gelu.h"
#include "tensor/fp16.h"

namespace ferrox {

Model::~Model() = default;

Expected<std::unique_ptr<Model>> Model::load(const GgufFile& f, const ModelOptions& opts) {
    std::unique_ptr<Model> m(new Model());
    m->opts_ = opts;
    FERROX_ASSIGN_OR_RETURN(m->w_, ModelWeights::load(f));
    const ModelHParams& hp = m->w_.hp;
    if (hp.head_dim > kMaxHeadDim) return unimplemented(f.path() + ": head size above 512");
    m->place_weights(f, opts.repack, !opts.mmap);

    const int n_threads = opts.n_threads > 0 ? opts.n_threads : hardware_threads();
    m->pool_ = std::make_unique<ThreadPool>(n_threads);

    auto s = std::make_unique<Scratch>();
    s->tiles = std::make_unique<StealingRanges>(n_threads);
    s->attn_ranges = std::make_unique<StealingRanges>(n_threads);
    s->kv_feeds.resize(static_cast<size_t>(n_threads));
    const size_t T = static_cast<size_t>(std::max(1, opts.max_batch_tokens));
    // gate and up: the dense FFN's, or a MoE's shared expert's.
    const bool moe = m->w_.traits.ffn == FfnKind::kMoe;
    const int64_t n_ff = !moe ? hp.n_ff : m->w_.traits.shared_expert ? hp.n_ff_shexp : 0;
    const int64_t widest = std::max<int64_t>({hp.n_embd, hp.q_dim(), n_ff});
    s->x.resize(T * hp.n_embd);
    s->xn.resize(T * hp.n_embd);
    s->q.resize(T * hp.q_dim());
    s->k.resize(T * hp.kv_dim());
    s->v.resize(T * hp.kv_dim());
    s->att.resize(T * hp.q_dim());
    s->gate.resize(T * n_ff);
    s->up.resize(T * n_ff);
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
    if (moe) {
        const size_t R = T * hp.n_expert_used;
        const int64_t widest_in = std::max<int64_t>(hp.n_embd, hp.n_ff_exp);
        s->moe_router.resize(T * hp.n_expert);
        s->moe_sel.resize(R);
        s->moe_w.resize(R);
        s->moe_offset.resize(hp.n_expert + 1);
        s->moe_next.resize(hp.n_expert);
        s->moe_pair_tok.resize(R);
        s->moe_row_of.resize(R);
        s->moe_row_expert.resize(R);
        s->moe_act.resize(2 * (R * (widest_in * 4 + 128) + 64));  // gate's and up's formats
        s->moe_gate.resize(R * hp.n_ff_exp);
        s->moe_up.resize(R * hp.n_ff_exp);
        s->moe_down.resize(R * hp.n_embd);
        s->moe_jobs.reserve(3 * hp.n_expert);
        s->moe_unit_begin.reserve(3 * hp.n_expert + 1);
        if (m->w_.traits.shared_expert) s->shexp_out.resize(T * hp.n_embd);
        m->expert_tokens_ = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(hp.n_layer) * hp.n_expert);
    }
    m->s_ = std::move(s);
    return m;
}

}  // namespace ferrox
