#include "engine/block_manager.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/check.h"

namespace ferrox {

BlockManager::BlockManager(int n_blocks, int block_size) : n_blocks_(n_blocks), block_size_(block_size) {
    CHECK(n_blocks > 0 && block_size > 0);
    free_.reserve(n_blocks);
    for (int i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
    meta_.assign(n_blocks, Meta{});
    tokens_.assign(static_cast<size_t>(n_blocks) * block_size, 0);
}

int32_t BlockManager::allocate() {
    int32_t b;
    if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
    } else if ((b = take_evictable()) >= 0) {
        if (evict_hook_) evict_hook_(b);
        unpublish(b);
    } else {
        return -1;
    }
    Meta& m = meta_[b];
    m.refs = 1;
    ++m.epoch;
    return b;
}

void BlockManager::retain(int32_t block) {
    CHECK(block >= 0 && block < n_blocks_ && meta_[block].refs > 0);
    ++meta_[block].refs;
}

void BlockManager::release(int32_t block) {
    CHECK(block >= 0 && block < n_blocks_ && meta_[block].refs > 0);
    Meta& m = meta_[block];
    if (--m.refs > 0) return;
    if (m.hash != 0) {
        lru_push_back(block, m.pin_until > now_ms_ ? kPinned : kPlain);
    } else {
        free_.push_back(block);
    }
}

uint64_t BlockManager::chain_hash(uint64_t parent_hash, const int32_t* tokens) const {
    // splitmix64 over the parent's hash and each token. Matches are verified token for token,
    // so a collision costs a lookup, never a wrong answer.
    uint64_t h = parent_hash ^ 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < block_size_; ++i) {
        h += static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x9e3779b97f4a7c15ULL;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
        h ^= h >> 31;
    }
    return h == 0 ? 1 : h;
}

// The cached block to evict: the least recently released unpinned one (a pinned block whose pin
// ran out joins their list's tail then: it ages from there); else, nothing else being left, the
// least recently released pinned one.
int32_t BlockManager::take_evictable() {
    if (lists_[kPinned].head >= 0 && now_ms_ >= next_expiry_) {
        next_expiry_ = INT64_MAX;
        for (int32_t b = lists_[kPinned].head; b >= 0;) {
            const int32_t next = meta_[b].lru_next;
            if (meta_[b].pin_until <= now_ms_) {
                lru_unlink(b);
                lru_push_back(b, kPlain);
            } else {
                next_expiry_ = std::min(next_expiry_, meta_[b].pin_until);
            }
            b = next;
        }
    }
    if (lists_[kPlain].head < 0 && lists_[kPinned].head >= 0) ++pins_broken_;
    const int32_t b = lists_[kPlain].head >= 0 ? lists_[kPlain].head : lists_[kPinned].head;
    if (b >= 0) lru_unlink(b);
    return b;
}

// The published block that holds the block_size tokens at `t` after `parent` (-1: a first
// block), found under the chain hash `h` and verified parent and token by token; -1 if none.
int32_t BlockManager::find_child(uint64_t h, int32_t parent, const int32_t* t) const {
    auto it = index_.find(h);
    if (it == index_.end()) return -1;
    const int32_t b = it->second;
    const Meta& m = meta_[b];
    const bool parent_ok = parent < 0 ? m.parent < 0 : (m.parent == parent && m.parent_epoch == meta_[parent].epoch);
    if (!parent_ok || std::memcmp(tokens_.data() + static_cast<size_t>(b) * block_size_, t,
                                  block_size_ * sizeof(int32_t)) != 0) {
        return -1;
    }
    return b;
}

int BlockManager::pin_prefix(std::span<const int32_t> tokens, int n_blocks, int64_t until_ms) {
    const int n = std::min<int64_t>(n_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
    uint64_t h = 0;
    int32_t parent = -1;
    int pinned = 0;
    for (int i = 0; i < n; ++i) {
        const int32_t* t = tokens.data() + static_cast<size_t>(i) * block_size_;
        h = chain_hash(h, t);
        const int32_t b = find_child(h, parent, t);
        if (b < 0) break;
        Meta& m = meta_[b];
        m.pin_until = std::max(m.pin_until, until_ms);
        if (m.evictable && m.list == kPlain && m.pin_until > now_ms_) {
            lru_unlink(b);
            lru_push_back(b, kPinned);
        }
        parent = b;
        ++pinned;
    }
    return pinned;
}

int BlockManager::match_prefix(std::span<const int32_t> tokens, int max_blocks, std::vector<int32_t>* out) {
    const int n = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
    uint64_t h = 0;
    int32_t parent = -1;
    int found = 0;
    for (int i = 0; i < n; ++i) {
        const int32_t* t = tokens.data() + static_cast<size_t>(i) * block_size_;
        h = chain_hash(h, t);
        const int32_t b = find_child(h, parent, t);
        if (b < 0) break;
        if (meta_[b].refs == 0) {
            lru_unlink(b);
            meta_[b].refs = 1;
        } else {
            ++meta_[b].refs;
        }
        out->push_back(b);
        parent = b;
        ++found;
    }
    return found;
}

int32_t BlockManager::publish(int32_t block, int32_t parent, const int32_t* tokens) {
    CHECK(block >= 0 && block < n_blocks_ && meta_[block].refs > 0);
    Meta& m = meta_[block];
    if (m.hash != 0) return block;  // already published (a shared block)
    uint64_t parent_hash = 0;
    if (parent >= 0) {
        if (meta_[parent].hash == 0) return -1;
        parent_hash = meta_[parent].hash;
    }
    const uint64_t h = chain_hash(parent_hash, tokens);
    auto [it, inserted] = index_.emplace(h, block);
    if (!inserted) {
        const int32_t old = it->second;
        const Meta& o = meta_[old];
        const bool live =
            o.parent < 0 || (meta_[o.parent].epoch == o.parent_epoch && meta_[o.parent].hash != 0);
        if (live) return old;  // this prefix is cached already
        // A block whose parent was evicted can never match again: this one takes its place.
        meta_[old].hash = 0;
        meta_[old].parent = -1;
        meta_[old].pin_until = 0;
        if (meta_[old].evictable) {
            lru_unlink(old);
            free_.push_back(old);
        }
        it->second = block;
    }
    m.hash = h;
    m.parent = parent;
    m.parent_epoch = parent >= 0 ? meta_[parent].epoch : 0;
    std::memcpy(tokens_.data() + static_cast<size_t>(block) * block_size_, tokens,
                block_size_ * sizeof(int32_t));
    return block;
}

void BlockManager::clear_cache() {
    for (List& l : lists_) {
        while (l.head >= 0) {
            const int32_t b = l.head;
            lru_unlink(b);
            unpublish(b);
            free_.push_back(b);
        }
    }
}

void BlockManager::unpublish(int32_t b) {
    Meta& m = meta_[b];
    if (m.hash == 0) return;
    auto it = index_.find(m.hash);
    if (it != index_.end() && it->second == b) index_.erase(it);
    m.hash = 0;
    m.parent = -1;
    m.pin_until = 0;
}

void BlockManager::lru_unlink(int32_t b) {
    Meta& m = meta_[b];
    CHECK(m.evictable);
    List& l = lists_[m.list];
    if (m.lru_prev >= 0) meta_[m.lru_prev].lru_next = m.lru_next; else l.head = m.lru_next;
    if (m.lru_next >= 0) meta_[m.lru_next].lru_prev = m.lru_prev; else l.tail = m.lru_prev;
    m.lru_prev = m.lru_next = -1;
    m.evictable = false;
    --l.size;
    --n_evictable_;
}

void BlockManager::lru_push_back(int32_t b, ListId list) {
    Meta& m = meta_[b];
    CHECK(!m.evictable);
    List& l = lists_[list];
    m.list = list;
    if (list == kPinned) next_expiry_ = std::min(next_expiry_, m.pin_until);
    m.lru_prev = l.tail;
    m.lru_next = -1;
    if (l.tail >= 0) meta_[l.tail].lru_next = b; else l.head = b;
    l.tail = b;
    m.evictable = true;
    ++l.size;
    ++n_evictable_;
}

Status SeqBlocks::reserve(int n_pos) {
    while (capacity() < n_pos) {
        int32_t b = pool_->allocate();
        if (b < 0) {
            return Status(StatusCode::kResourceExhausted,
                          "KV cache full: need room for " + std::to_string(n_pos) +
                              " positions, " + std::to_string(capacity()) + " available");
        }
        blocks_.push_back(b);
    }
    return Status::ok();
}

void SeqBlocks::adopt(const std::vector<int32_t>& blocks) {
    CHECK(blocks_.empty());
    blocks_ = blocks;
}

void SeqBlocks::clear() {
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool_->release(*it);
    blocks_.clear();
}

}  // namespace ferrox
