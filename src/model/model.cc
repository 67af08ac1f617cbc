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

}  // namespace ferrox
