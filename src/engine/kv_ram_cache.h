#pragma once
// The prompt cache in host memory (`--cache-ram MIB`): KV blocks the pool evicts are copied
// here instead of being dropped, and a prompt whose prefix the pool lost reads them back (a
// copy of a block, not a recomputation). Read blocks leave this tier for the pool, so a block
// is kept once; the budget is spent least recently used first.
//
// The pool's own prefix cache already holds every block until it needs the room: this tier is
// what a larger pool would be for prefixes, without pool blocks reserved for it, at a memcpy per
// eviction and per block read back.
//
// Threading: engine thread only.

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "engine/prefix_store.h"
#include "model/kv_storage.h"

namespace ferrox {

class KvRamCache final : public PrefixStore {
public:
    KvRamCache(KvStorage& kv, int64_t max_bytes);

    void offer(uint64_t, const int32_t*, int32_t) override {}  // the pool holds it
    void spill(uint64_t hash, const int32_t* tokens, int32_t block) override;
    bool has(uint64_t hash) const override { return index_.count(hash) != 0; }
    bool fetch(uint64_t hash, const int32_t* tokens, int32_t block) override;

    int64_t bytes() const { return static_cast<int64_t>(index_.size()) * entry_bytes(); }
    int64_t blocks() const { return static_cast<int64_t>(index_.size()); }

private:
    struct Entry {
        uint64_t hash = 0;
        std::vector<int32_t> tokens;
        std::vector<uint8_t> bytes;
    };
    int64_t entry_bytes() const { return static_cast<int64_t>(block_bytes_ + block_size_ * sizeof(int32_t)); }

    KvStorage& kv_;
    size_t block_bytes_;
    int block_size_;
    int64_t max_entries_;
    std::list<Entry> lru_;  // front: least recently used
    std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
    std::vector<Entry> spare_;  // one entry's buffers kept for the next spill
};

}  // namespace ferrox
