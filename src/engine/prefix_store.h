#pragma once
// A second tier of the prefix cache behind the block manager's (engine/block_manager.h): blocks
// published in the KV pool are offered to it as they complete, and a prompt's prefix that the
// pool no longer holds (evicted, or from before a restart) is looked up there block by block,
// under the same chained prefix hashes, and copied back into pool blocks. The disk store
// (kv_disk_cache.h) is the one implementation.
//
// Threading: engine thread only; an implementation may do its slow work on threads of its own.

#include <cstdint>

namespace ferrox {

class PrefixStore {
public:
    virtual ~PrefixStore() = default;
    // A block just published under `hash` (block_size tokens at `tokens`; its K/V computed in
    // pool block `block`): the store may keep a copy. Must not block on I/O.
    virtual void offer(uint64_t hash, const int32_t* tokens, int32_t block) = 0;
    // Whether the store may hold `hash` (a cheap index check: fetch may still fail).
    virtual bool has(uint64_t hash) const = 0;
    // Fills pool block `block` with the K/V of the prefix block `hash` holding exactly `tokens`;
    // false (the block's bytes then undefined) when it does not have it or its copy is damaged.
    virtual bool fetch(uint64_t hash, const int32_t* tokens, int32_t block) = 0;
};

}  // namespace ferrox
