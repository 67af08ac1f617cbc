#include "engine/spec/draft_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "core/log.h"
#include "kernels/ops.h"

namespace ferrox {

namespace {

// A token's text on one line: control bytes as \xNN.
std::string printable(std::string_view piece) {
    std::string out;
    for (const char ch : piece) {
        const auto c = static_cast<unsigned char>(ch);
        if (c >= 0x20 && c != 0x7f) {
            out += ch;
        } else {
            static const char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    return out;
}

// A draft model must speak the target's vocabulary: the same text for every id both have, and
// at most 128 ids more or fewer (llama.cpp's rule: sizes padded differently within a family).
Status check_vocab(const LoadedModel& target, const LoadedModel& draft) {
    const int nt = target.forward_model().n_vocab(), nd = draft.forward_model().n_vocab();
    const std::string which = "the draft model " + draft.path;
    if (std::abs(nt - nd) > 128) {
        return invalid_argument(which + " has " + std::to_string(nd) + " tokens, the model " + std::to_string(nt) +
                                ": not the same vocabulary");
    }
    for (int id = 0; id < std::min(nt, nd); ++id) {
        if (target.tokenizer->token_to_piece(id, true) != draft.tokenizer->token_to_piece(id, true)) {
            return invalid_argument(which + " has another vocabulary: token " + std::to_string(id) + " is '" +
                                    printable(draft.tokenizer->token_to_piece(id, true)) + "', not '" +
                                    printable(target.tokenizer->token_to_piece(id, true)) + "'");
        }
    }
    return Status::ok();
}

// Sequences at most this many tokens behind draft in the step's first draft step; the others
// catch up in chunks over what the step budget leaves, drafting once level.
constexpr int kNearlyLevel = 8;

}  // namespace

DraftModelProposer::DraftModelProposer(std::shared_ptr<LoadedModel> draft, const DraftModelConfig& cfg,
                                       EngineMetrics& metrics, const EngineClock& clock)
    : draft_(std::move(draft)), cfg_(cfg), metrics_(metrics), clock_(clock), blocks_(cfg.n_blocks, cfg.block_size) {}

Expected<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(std::shared_ptr<LoadedModel> draft,
                                                                         const LoadedModel& target,
                                                                         const DraftModelConfig& cfg,
                                                                         EngineMetrics& metrics,
                                                                         const EngineClock& clock) {
    if (!draft || (!draft->model && !draft->stand_in) || !draft->tokenizer) return invalid_argument("no draft model");
    FERROX_RETURN_IF_ERROR(check_vocab(target, *draft));
    const ForwardModel& d = draft->forward_model();
    if (Status st = d.check_kv_type(cfg.kv_type); !st.is_ok()) {
        return Status(st.code(), "the draft model " + draft->path + ": " + st.message());
    }
    std::unique_ptr<DraftModelProposer> p(new DraftModelProposer(draft, cfg, metrics, clock));
    // Drafts stop where the draft model's trained context does (its positions past it are
    // noise, and their rejections would price drafting out for every sequence).
    p->ctx_ = std::min(d.max_ctx(), d.n_ctx_train());
    p->storage_ = d.make_kv_storage(d.kv_geometry(cfg.block_size, cfg.kv_type), cfg.n_blocks);
    p->n_vocab_ = d.n_vocab();
    p->draft_vocab_ = std::min(target.forward_model().n_vocab(), d.n_vocab());
    p->logits_.resize(static_cast<size_t>(cfg.n_parallel) * d.n_vocab());
    p->batch_.tokens.reserve(static_cast<size_t>(std::min(cfg.max_batch_tokens, d.max_batch_tokens())));
    metrics.has_draft_model.store(true);
    metrics.draft_rate.store(p->prior());
    return p;
}

double DraftModelProposer::prior() const { return (hits_ + kPriorAccept * kPriorTrials) / (trials_ + kPriorTrials); }

bool DraftModelProposer::candidate(Sequence& s, bool allowed, int k_max, int* limit) {
    // The draft model proposes as many as the step takes (fill), within its own context.
    if (!allowed || k_max <= 0 || static_cast<int64_t>(s.tokens.size()) + k_max > ctx_ || s.spec.d_off) {
        // A sequence that will not draft soon gives its draft KV back.
        if (!allowed || s.spec.d_off || k_max <= 0) s.spec.drop_draft_kv();
        return false;
    }
    *limit = k_max;
    return true;
}

// A step whose draft candidates were all priced out: the engine-wide rate, when below the
// prior, drifts back up toward it, as a sequence's estimate does (after a bad stretch, or
// sampled or constrained requests, it would price the draft model out for every later
// request, with no trial to show it recovered). A rate above the prior stays: steps without
// candidates (requests that opt out) or priced out for their cost say nothing of it.
void DraftModelProposer::priced_out() {
    if (prior() >= kPriorAccept) return;
    hits_ *= 0.97;
    trials_ *= 0.97;
    metrics_.draft_rate.store(prior(), std::memory_order_relaxed);
}

void DraftModelProposer::observe(int accepted, bool rejected) {
    constexpr double kDecay = 0.98;
    trials_ = trials_ * kDecay + accepted + (rejected ? 1 : 0);
    hits_ = hits_ * kDecay + accepted;
    metrics_.draft_rate.store(prior(), std::memory_order_relaxed);
}

// The draft pool's prefix cache: it publishes a sequence's full blocks of its own tokens (not
// the draft tokens past them, which may be rejected), and a sequence's draft KV starts from the
// longest cached prefix of its tokens, at most `limit` of them (the draft model must still
// compute one token for its logits). So a prompt found in the target's cache is mostly found in
// the draft's too, and the draft model catches up on what the target computes, not on the whole
// prompt.
void DraftModelProposer::begin_kv(Sequence& s, int limit) {
    SeqSpec& sp = s.spec;
    if (sp.dkv) return;
    sp.dkv = std::make_unique<SeqBlocks>(&blocks_);
    const int bs = cfg_.block_size;
    if (!s.caching(cfg_.prefix_cache) || limit < bs) return;
    std::vector<int32_t> matched;
    blocks_.match_prefix(std::span<const int32_t>(s.tokens.data(), limit), limit / bs, &matched);
    if (matched.empty()) return;
    sp.dkv->adopt(matched);
    sp.d_in_kv = static_cast<int>(matched.size()) * bs;
    sp.d_chain.start(blocks_, matched);
    EngineMetrics::add<uint64_t>(metrics_.draft_hit_tokens, static_cast<uint64_t>(sp.d_in_kv));
}

void DraftModelProposer::publish(Sequence& s) {
    if (!s.caching(cfg_.prefix_cache) || !s.spec.dkv) return;
    const int n = std::min(s.spec.d_in_kv, static_cast<int>(s.tokens.size()));
    s.spec.d_chain.publish(blocks_, s.spec.dkv->blocks(), s.tokens.data(), n);
}

// Appends tokens toks[0, n) of s, from its draft KV's end on, to the draft model's batch.
void DraftModelProposer::add_entry(Sequence& s, const int32_t* toks, int n, bool logits) {
    BatchSeq b;
    b.i_begin = static_cast<int>(batch_.tokens.size());
    b.n_tokens = n;
    b.n_past = s.spec.d_in_kv;
    b.block_table = s.spec.dkv->blocks().data();
    b.n_blocks = static_cast<int>(s.spec.dkv->blocks().size());
    b.want_logits = logits;
    batch_.tokens.insert(batch_.tokens.end(), toks, toks + n);
    batch_.seqs.push_back(b);
    owner_.push_back(&s);
}

// Runs batch_ on the draft model; timed: its time prices the draft steps (cost_).
bool DraftModelProposer::run_step(bool timed) {
    const auto t0 = clock_();
    const Status st = draft_->forward_model().forward(batch_, *storage_, logits_);
    if (!st.is_ok()) {
        FERROX_LOG_WARN("draft model step failed: %s", st.message().c_str());
        return false;
    }
    if (timed) {
        cost_.observe(static_cast<int>(batch_.tokens.size()),
                      std::chrono::duration<double>(clock_() - t0).count());
    }
    return true;
}

// The first draft step's entries: each candidate catches up on the tokens its draft KV lacks
// (usually the last one or two: the step's own token, and the last accepted draft token) and,
// once level, yields its first draft token. Sequences one or two tokens behind come first
// (they draft this step), then those catching up on a prompt, in chunks over what the step
// budget leaves, drafting only once level. In a full draft pool a sequence drafts what its
// blocks allow, and one that cannot take its next tokens gives its blocks back (kept, they
// would stall every sequence at its next block boundary). Returns the entries added.
size_t DraftModelProposer::first_step(std::vector<DraftCandidate>& cands) {
    const int budget = std::min(cfg_.max_batch_tokens, draft_->forward_model().max_batch_tokens());
    int used = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (DraftCandidate& c : cands) {
            Sequence& s = *c.s;
            SeqSpec& sp = s.spec;
            if (c.taken == 0) continue;
            const int n = static_cast<int>(s.tokens.size());
            begin_kv(s, n - 1);
            if ((n - sp.d_in_kv <= kNearlyLevel) != (pass == 0)) continue;
            const int chunk = std::min(n - sp.d_in_kv, budget - used);
            // A token the draft model lacks (the target's vocabulary may be up to 128 longer: a
            // token-id prompt, a special token of a fine-tuned target): no drafts for this one.
            const int32_t* toks = s.tokens.data() + sp.d_in_kv;
            if (chunk > 0 && std::any_of(toks, toks + chunk, [&](int32_t t) { return t < 0 || t >= n_vocab_; })) {
                sp.d_off = true;
                sp.drop_draft_kv();
            }
            if (chunk <= 0 || sp.d_off) {
                c.taken = 0;
                continue;
            }
            const bool level = sp.d_in_kv + chunk == n;
            if (!sp.dkv->reserve(level ? n + c.taken - 1 : sp.d_in_kv + chunk).is_ok()) {
                const int room = sp.dkv->capacity() - sp.d_in_kv;
                if (room <= 0 || (level && room < chunk)) {
                    sp.drop_draft_kv();
                    c.taken = 0;
                    continue;
                }
                if (level) c.taken = std::min(c.taken, room - chunk + 1);  // else: catch up on what fits
            }
            const int take = std::min(chunk, sp.dkv->capacity() - sp.d_in_kv);
            if (take < chunk || !level) c.taken = 0;
            add_entry(s, toks, take, take == chunk && level);
            used += take;
        }
    }
    return owner_.size();
}

// The draft model's proposals for the candidates the pricing chose (DraftCandidate::taken
// tokens each): a first step of catch-ups and first tokens, then one step per further token,
// each feeding the sequences the token before, all greedy.
void DraftModelProposer::fill(std::vector<DraftCandidate>& cands, int /*n_running*/) {
    const auto propose = [&](Sequence& s, int row) {
        const float* l = logits_.data() + static_cast<size_t>(row) * n_vocab_;
        s.spec.draft.push_back(static_cast<int32_t>(argmax_first(l, draft_vocab_)));
    };
    batch_.tokens.clear();
    batch_.seqs.clear();
    owner_.clear();
    for (DraftCandidate& c : cands) c.s->spec.draft.clear();
    if (first_step(cands) == 0) return;
    if (!run_step(true)) {
        for (Sequence* s : owner_) s->spec.drop_draft_kv();
        for (DraftCandidate& c : cands) c.taken = 0;
        return;
    }
    int row = 0;
    for (size_t i = 0; i < owner_.size(); ++i) {
        Sequence& s = *owner_[i];
        s.spec.d_in_kv += batch_.seqs[i].n_tokens;
        publish(s);
        if (batch_.seqs[i].want_logits) propose(s, row++);
    }
    for (int j = 1;; ++j) {  // one step per further draft token, for the sequences that take it
        batch_.tokens.clear();
        batch_.seqs.clear();
        owner_.clear();
        for (DraftCandidate& c : cands) {
            Sequence& s = *c.s;
            if (c.taken <= j || static_cast<int>(s.spec.draft.size()) != j) continue;
            add_entry(s, &s.spec.draft.back(), 1, true);
        }
        if (owner_.empty() || !run_step(true)) return;  // (a failed step: the drafts so far stand)
        for (size_t i = 0; i < owner_.size(); ++i) {
            ++owner_[i]->spec.d_in_kv;
            propose(*owner_[i], static_cast<int>(i));
        }
    }
}

// The step's prompt chunks (plan entries [n_decode, n_main)) fed to the draft model as well, so
// that a sequence's draft KV keeps level with the target's while its prompt is computed: it
// drafts from its first decoding step, and no decoding step carries a long catch-up. The draft
// model computes as many tokens of a sequence as the target does, so a prompt step costs the
// two models' ratio more, and no more. Best effort: a sequence the draft model cannot take, or
// whose blocks the draft pool cannot spare (one block is kept for each running sequence), or one
// that starts behind (a prompt found in the prefix cache), catches up later in fill().
void DraftModelProposer::prefill(const BatchPlan& plan, int n_running) {
    const int bs = cfg_.block_size;
    int budget = std::min(cfg_.max_batch_tokens, draft_->forward_model().max_batch_tokens());
    batch_.tokens.clear();
    batch_.seqs.clear();
    owner_.clear();
    for (int i = plan.n_decode; i < plan.n_main && budget > 0; ++i) {
        Sequence& s = *plan.owner[static_cast<size_t>(i)];
        SeqSpec& sp = s.spec;
        const int n_step = plan.batch.seqs[static_cast<size_t>(i)].n_tokens;
        const int end = s.n_in_kv + n_step;  // the target's KV after this step
        if (s.params.draft_max == 0 || sp.d_off || end >= ctx_) continue;
        begin_kv(s, std::min(end, static_cast<int>(s.tokens.size()) - 1));
        // As many tokens as the target computes for it (a prompt found in the prefix cache
        // leaves the draft model behind: its catch-up must not delay the first token).
        const int n = std::min({end - sp.d_in_kv, n_step, budget});
        if (n <= 0) continue;
        const int32_t* toks = s.tokens.data() + sp.d_in_kv;
        if (std::any_of(toks, toks + n, [&](int32_t t) { return t < 0 || t >= n_vocab_; })) {
            sp.d_off = true;  // as in first_step: a token the draft model lacks
            sp.drop_draft_kv();
            continue;
        }
        const int need = (sp.d_in_kv + n + bs - 1) / bs - static_cast<int>(sp.dkv->blocks().size());
        if (need > 0 && !blocks_.can_allocate(need + n_running)) continue;
        if (!sp.dkv->reserve(sp.d_in_kv + n).is_ok()) continue;
        add_entry(s, toks, n, /*logits=*/false);
        budget -= n;
    }
    if (owner_.empty()) return;
    // Not timed into cost_: that prices draft steps, and a prompt chunk timed first would make
    // the small steps look dear before any was timed (and so never chosen and timed).
    if (!run_step(false)) {
        for (Sequence* s : owner_) s->spec.drop_draft_kv();
        return;
    }
    for (size_t i = 0; i < owner_.size(); ++i) {
        owner_[i]->spec.d_in_kv += batch_.seqs[i].n_tokens;
        publish(*owner_[i]);
    }
}

// Draft KV holds a sequence's tokens up to its first rejected draft token.
void DraftModelProposer::after_step(const BatchPlan& plan) {
    for (int i = 0; i < plan.n_main; ++i) {
        Sequence& s = *plan.owner[static_cast<size_t>(i)];
        if (s.spec.dkv) s.spec.d_in_kv = std::min(s.spec.d_in_kv, s.n_in_kv);
    }
}

}  // namespace ferrox
