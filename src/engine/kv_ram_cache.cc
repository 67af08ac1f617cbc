#include "engine/kv_ram_cache.h"

#include <algorithm>
#include <cstring>

namespace ferrox {

KvRamCache::KvRamCache(KvStorage& kv, int64_t max_bytes)
    : kv_(kv), block_bytes_(kv.geometry().block_bytes()), block_size_(kv.geometry().block_size) {
    max_entries_ = std::max<int64_t>(0, max_bytes / entry_bytes());
}

void KvRamCache::spill(uint64_t hash, const int32_t* tokens, int32_t block) {
    if (max_entries_ == 0) return;
    if (auto it = index_.find(hash); it != index_.end()) {  // (a copy read back earlier and kept)
        lru_.splice(lru_.end(), lru_, it->second);
        return;
    }
    Entry e;
    if (static_cast<int64_t>(index_.size()) >= max_entries_) {
        // The least recently used entry makes room, and its buffers hold the new one.
        e = std::move(lru_.front());
        index_.erase(e.hash);
        lru_.pop_front();
    } else if (!spare_.empty()) {
        e = std::move(spare_.back());
        spare_.pop_back();
    }
    e.hash = hash;
    e.tokens.assign(tokens, tokens + block_size_);
    const uint8_t* src = kv_.k_rows(block, 0);
    e.bytes.assign(src, src + block_bytes_);
    lru_.push_back(std::move(e));
    index_[hash] = std::prev(lru_.end());
}

bool KvRamCache::fetch(uint64_t hash, const int32_t* tokens, int32_t block) {
    auto it = index_.find(hash);
    if (it == index_.end()) return false;
    Entry& e = *it->second;
    if (std::memcmp(e.tokens.data(), tokens, static_cast<size_t>(block_size_) * sizeof(int32_t)) != 0) {
        return false;  // a hash collision: another prefix's block
    }
    std::memcpy(kv_.k_rows(block, 0), e.bytes.data(), block_bytes_);
    // The pool holds it now; when it evicts it again, spill() brings it back.
    if (spare_.empty()) spare_.push_back(std::move(e));
    lru_.erase(it->second);
    index_.erase(it);
    return true;
}

}  // namespace ferrox
