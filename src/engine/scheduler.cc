#include "engine/scheduler.h"

#include <algorithm>
#include <span>

#include "core/check.h"

namespace ferrox {

void PrefixChain::start(const BlockManager& bm, const std::vector<int32_t>& matched) {
    n_published = static_cast<int>(matched.size());
    block = matched.empty() ? -1 : matched.back();
    epoch = matched.empty() ? 0 : bm.epoch(block);
}

void PrefixChain::publish(BlockManager& bm, const std::vector<int32_t>& blocks, const int32_t* tokens,
                          int n_tokens, PrefixStore* store) {
    const int bs = bm.block_size();
    while ((n_published + 1) * bs <= n_tokens) {
        const int i = n_published++;
        // When another sequence published the same prefix first (both computed it cold), the
        // chain continues from its block, so this sequence's later blocks are still found. That
        // block may have been evicted and handed out since: then the chain is broken.
        if (i > 0 && (block < 0 || bm.epoch(block) != epoch || !bm.published(block))) {
            block = -1;
            continue;  // nothing after a broken link can be found
        }
        block = bm.publish(blocks[i], i > 0 ? block : -1, tokens + static_cast<size_t>(i) * bs);
        if (block >= 0) epoch = bm.epoch(block);
        if (store && block >= 0 && block == blocks[i]) store->offer(bm.hash(block), tokens + static_cast<size_t>(i) * bs, block);
    }
}

std::vector<Scheduler::Ended> Scheduler::take_ended(std::chrono::steady_clock::time_point now) {
    std::vector<Ended> out;
    const auto ended = [&](const std::unique_ptr<Sequence>& s) -> bool {
        if (s->handle->cancelled()) {
            out.push_back({nullptr, FinishReason::kCancelled});
        } else if (s->expired(now)) {
            out.push_back({nullptr, FinishReason::kLength});  // the answer so far, cut
        } else {
            return false;
        }
        return true;
    };
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (ended(*it)) {
            out.back().seq = std::move(*it);
            it = waiting_.erase(it);
            metrics_.n_waiting.fetch_sub(1);
        } else {
            ++it;
        }
    }
    for (auto& s : running_) {
        if (ended(s)) out.back().seq = std::move(s);
    }
    running_.erase(std::remove(running_.begin(), running_.end(), nullptr), running_.end());
    return out;
}

std::vector<int32_t> Scheduler::match(Sequence& s) {
    std::vector<int32_t> matched;
    if (!caching(s) || s.wants_prompt_logits()) return matched;
    const int bs = blocks_.block_size();
    const int n_fill = s.n_fill();
    // What is left of the prompt to compute must be none or two tokens or more, so the
    // prompt's last position is computed in a chunk, as in a cold prefill (scheduler.h).
    const int max_tokens = s.n_generated > 0 ? n_fill : n_fill - 2;
    if (max_tokens >= bs) {
        blocks_.match_prefix(std::span<const int32_t>(s.tokens.data(), n_fill), max_tokens / bs, &matched);
        if (store_) fetch_stored(s, max_tokens / bs, &matched);
    }
    while (!matched.empty() && static_cast<int>(matched.size()) * bs > s.n_prompt - 2 &&
           static_cast<int>(matched.size()) * bs < s.n_prompt) {
        blocks_.release(matched.back());
        matched.pop_back();
    }
    return matched;
}

// The blocks after the pool's match that the second tier holds, read back into new pool blocks
// and published there (retained for s, as match_prefix's). Stops at the first miss, and leaves
// a block for every position the sequence still needs beyond what it takes.
void Scheduler::fetch_stored(const Sequence& s, int max_blocks, std::vector<int32_t>* matched) {
    const int bs = blocks_.block_size();
    const int need_after = (s.n_fill() + 1 + bs - 1) / bs;  // the sequence's whole reservation
    uint64_t parent = matched->empty() ? 0 : blocks_.hash(matched->back());
    for (int i = static_cast<int>(matched->size()); i < max_blocks; ++i) {
        const int32_t* t = s.tokens.data() + static_cast<size_t>(i) * bs;
        const uint64_t h = blocks_.prefix_hash(parent, t);
        if (!store_->has(h) || !blocks_.can_allocate(need_after - i + 1)) break;
        const int32_t b = blocks_.allocate();
        if (b < 0) break;
        if (!store_->fetch(h, t, b)) {
            blocks_.release(b);
            break;
        }
        const int32_t pub = blocks_.publish(b, matched->empty() ? -1 : matched->back(), t);
        if (pub != b) {  // (not expected: the pool's match stopped before this prefix)
            blocks_.release(b);
            break;
        }
        matched->push_back(b);
        parent = h;
    }
}

void Scheduler::start(Sequence& s, const std::vector<int32_t>& matched) {
    const int n_matched = static_cast<int>(matched.size());
    if (!s.admitted) {
        s.admitted = true;
        s.n_cached = n_matched * blocks_.block_size();
        EngineMetrics::add<uint64_t>(metrics_.n_prompt_tokens, s.n_prompt);
        EngineMetrics::add<uint64_t>(metrics_.n_requests, 1);
        if (caching(s)) {
            EngineMetrics::add<uint64_t>(metrics_.prefix_lookups, 1);
            EngineMetrics::add<uint64_t>(metrics_.prefix_lookup_tokens, s.n_prompt);
            EngineMetrics::add<uint64_t>(metrics_.prefix_hit_tokens, s.n_cached);
        }
    }
    s.kv = std::make_unique<SeqBlocks>(&blocks_);
    s.kv->adopt(matched);
    CHECK(s.kv->reserve(s.n_fill() + 1).is_ok());
    s.n_in_kv = n_matched * blocks_.block_size();
    s.chain.start(blocks_, matched);
    s.preempted = false;
    s.order = next_order_++;
}

void Scheduler::admit() {
    const int bs = blocks_.block_size();
    while (!waiting_.empty() && static_cast<int>(running_.size()) < cfg_.n_parallel) {
        Sequence& s = *waiting_.front();
        std::vector<int32_t> matched = match(s);
        const int need = (s.n_fill() + 1 + bs - 1) / bs - static_cast<int>(matched.size());
        const int headroom = static_cast<int>(running_.size());
        if (!blocks_.can_allocate(need + headroom)) {
            for (auto it = matched.rbegin(); it != matched.rend(); ++it) blocks_.release(*it);
            break;
        }
        start(s, matched);
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
        metrics_.n_waiting.fetch_sub(1);
    }
    update_gauges();
}

// Frees the sequence's blocks (the full ones stay in the prefix cache) and marks it to go back
// to the head of the queue; it recomputes its tokens when readmitted and continues.
void Scheduler::preempt(Sequence& s) {
    s.kv->clear();
    s.kv.reset();
    s.spec.drop_draft_kv();
    s.n_in_kv = 0;
    s.chain.reset();
    s.preempted = true;
    EngineMetrics::add<uint64_t>(metrics_.n_preemptions, 1);
}

// Makes room for a decoding sequence's next position, preempting the newest sequences while
// the pool has no block to give. Returns false when `s` itself was preempted.
bool Scheduler::grow(Sequence& s) {
    while (s.kv->capacity() < s.n_in_kv + 1) {
        if (s.kv->reserve(s.n_in_kv + 1).is_ok()) break;
        Sequence* victim = nullptr;
        for (auto& r : running_) {
            if (!r->done && !r->preempted && (!victim || r->order > victim->order)) victim = r.get();
        }
        CHECK(victim != nullptr);
        preempt(*victim);
        if (victim == &s) return false;
    }
    return true;
}

int Scheduler::chunk_size(const Sequence& s, int budget) {
    const int rest = s.n_prompt - s.n_in_kv;
    int n = std::min(budget, rest);
    // A prompt is computed in chunks of two or more tokens, so every position sums attention in
    // the prefill order, however the budget splits it (scheduler.h). (Only a step budget of 2
    // cannot split an odd remainder into such chunks: then the last token goes alone rather
    // than never.)
    if (n < rest && rest - n == 1 && n > 2) --n;
    if (n < 2 && rest > 1) return 0;
    return n;
}

bool Scheduler::schedule(BatchPlan* plan) {
    plan->clear();
    admit();
    if (running_.empty()) return false;
    // Every decoding sequence needs a slot for its next token: the oldest take blocks first and
    // the newest are preempted while the pool has none. Preempted sequences go back to the head
    // of the queue, oldest first.
    for (auto& s : running_) {
        if (!s->preempted && !s->prefilling()) grow(*s);
    }
    std::vector<std::unique_ptr<Sequence>> back;
    for (auto& s : running_) {
        if (s->preempted) back.push_back(std::move(s));
    }
    if (!back.empty()) {
        running_.erase(std::remove(running_.begin(), running_.end(), nullptr), running_.end());
        for (auto it = back.rbegin(); it != back.rend(); ++it) waiting_.push_front(std::move(*it));
        metrics_.n_waiting.fetch_add(static_cast<int>(back.size()));
        update_gauges();
    }
    int budget = cfg_.max_batch_tokens;
    int prompt_rows = cfg_.max_prompt_rows;
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) plan->n_decode = static_cast<int>(plan->batch.seqs.size());
        for (auto& sp : running_) {
            Sequence& s = *sp;
            if (s.prefilling() != (pass == 1) || budget <= 0) continue;
            int n = 1;
            const bool all_logits = pass == 1 && s.n_in_kv < s.n_prompt && s.wants_prompt_logits();
            if (pass == 1 && s.n_in_kv < s.n_prompt) n = chunk_size(s, all_logits ? std::min(budget, prompt_rows) : budget);
            if (n == 0) continue;
            if (all_logits) prompt_rows -= n;
            // (A preempted sequence replays its generated tokens one per step, as they were
            // first computed, so its KV and its next tokens are bit for bit what they would
            // have been without the preemption; it has its next token already.)
            CHECK(s.kv->capacity() >= s.n_in_kv + n);
            const bool want_logits = pass == 0 || (s.n_in_kv + n == s.n_fill() && s.n_generated == 0);
            plan->add(s, s.tokens.data() + s.n_in_kv, n, s.n_in_kv, want_logits, all_logits);
            budget -= n;
        }
    }
    plan->n_main = static_cast<int>(plan->batch.seqs.size());
    plan->budget = budget;
    plan->bind_block_tables();
    return !plan->empty();
}

void Scheduler::update() {
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }),
                   running_.end());
    update_gauges();
}

void Scheduler::update_gauges() {
    metrics_.n_running.store(static_cast<int>(running_.size()));
    metrics_.kv_used.store(blocks_.n_used());
    metrics_.kv_cached.store(blocks_.n_cached());
    metrics_.kv_pinned.store(blocks_.n_pinned_cached());
    metrics_.pins_broken.store(blocks_.n_pins_broken());
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_all() {
    std::vector<std::unique_ptr<Sequence>> out;
    for (auto& s : running_) out.push_back(std::move(s));
    for (auto& s : waiting_) out.push_back(std::move(s));
    running_.clear();
    waiting_.clear();
    return out;
}

void Scheduler::publish_blocks(Sequence& s) {
    if (!caching(s)) return;
    s.chain.publish(blocks_, s.kv->blocks(), s.tokens.data(), s.n_in_kv, store_);
    // cache_control breakpoints: once the whole prompt is published, its blocks up to each
    // breakpoint are pinned for the breakpoint's time (a later request using them renews it).
    if (!s.pinned && !s.params.cache_pins.empty() && s.n_in_kv >= s.n_prompt) {
        s.pinned = true;
        const std::span<const int32_t> prompt(s.tokens.data(), static_cast<size_t>(s.n_prompt));
        for (const GenerationParams::CachePin& p : s.params.cache_pins) {
            const int64_t until = blocks_.now_ms() + static_cast<int64_t>(p.ttl_s * 1000);
            blocks_.pin_prefix(prompt, std::min(p.n_tokens, s.n_prompt) / blocks_.block_size(), until);
        }
    }
}

}  // namespace ferrox
