#pragma once
// The tiers of the prefix cache behind the block manager's (engine/block_manager.h): blocks
// published in the KV pool are offered to them as they complete and shown to them again just
// before the pool evicts them, and a prompt's prefix that the pool no longer holds (evicted, or
// from before a restart) is looked up there block by block, under the same chained prefix
// hashes, and copied back into pool blocks. Two implementations: host memory (kv_ram_cache.h:
// takes blocks as the pool evicts them) and disk (kv_disk_cache.h: writes every published
// block, so the cache survives a restart). The scheduler asks them in that order.
//
// Threading: engine thread only; an implementation may do its slow work on threads of its own.

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace ferrox {

class PrefixStore {
public:
    virtual ~PrefixStore() = default;
    // A block just published under `hash` (block_size tokens at `tokens`; its K/V computed in
    // pool block `block`): the store may keep a copy. Must not block on I/O.
    virtual void offer(uint64_t hash, const int32_t* tokens, int32_t block) = 0;
    // The pool is about to evict the published block `block` (its K/V still intact): the store
    // may keep a copy. Must not block on I/O.
    virtual void spill(uint64_t hash, const int32_t* tokens, int32_t block) {}
    // Whether the store may hold `hash` (a cheap index check: fetch may still fail).
    virtual bool has(uint64_t hash) const = 0;
    // Fills pool block `block` with the K/V of the prefix block `hash` holding exactly `tokens`;
    // false (the block's bytes then undefined) when it does not have it or its copy is damaged.
    virtual bool fetch(uint64_t hash, const int32_t* tokens, int32_t block) = 0;
};

// The tiers as one store: offers and spills go to every tier; a block is read from the first
// tier that has it, and each tier's reads are counted.
class PrefixTiers final : public PrefixStore {
public:
    void add(PrefixStore* tier, std::atomic<uint64_t>* hits) { tiers_.push_back({tier, hits}); }
    bool empty() const { return tiers_.empty(); }

    void offer(uint64_t hash, const int32_t* tokens, int32_t block) override {
        for (auto& t : tiers_) t.store->offer(hash, tokens, block);
    }
    void spill(uint64_t hash, const int32_t* tokens, int32_t block) override {
        for (auto& t : tiers_) t.store->spill(hash, tokens, block);
    }
    bool has(uint64_t hash) const override {
        for (const auto& t : tiers_)
            if (t.store->has(hash)) return true;
        return false;
    }
    bool fetch(uint64_t hash, const int32_t* tokens, int32_t block) override {
        for (auto& t : tiers_) {
            if (t.store->has(hash) && t.store->fetch(hash, tokens, block)) {
                if (t.hits) t.hits->fetch_add(1, std::memory_order_relaxed);
                return true;
            }
        }
        return false;
    }

private:
    struct Tier {
        PrefixStore* store;
        std::atomic<uint64_t>* hits;
    };
    std::vector<Tier> tiers_;
};

}  // namespace ferrox
