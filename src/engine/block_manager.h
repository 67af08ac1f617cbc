#pragma once
// The block manager: which KV blocks exist, who holds them, and which prefixes they cache. No
// bytes: the blocks' K and V live in the backend's storage (model/kv_storage.h), indexed by the
// same block ids. A sequence owns a block table (SeqBlocks); position p of a sequence lives in
// block table[p / block_size], slot p % block_size. Blocks are reference-counted so sequences
// can share a common prefix.
//
// It is also the prefix cache. A full block whose tokens are known can be published under a
// chained hash of every token from position 0 to its end; a later sequence whose tokens begin
// the same way finds the longest chain of published blocks, verified token for token and
// parent by parent, and shares them instead of computing them again. A published block whose
// last reference goes stays cached (evictable); allocation takes never-used or unpublished
// blocks first and then evicts cached blocks least recently released first. Sequences release
// their blocks tail first, so the end of a prefix is evicted before its beginning.
//
// Pins (Anthropic's cache_control breakpoints): a published block may be pinned until a time
// on the manager's clock (set_now). An unreferenced pinned block waits in a list of its own and
// is evicted only when no free or unpinned cached block is left (or its pin has run out): a pin
// protects a prefix against other traffic, never blocks an allocation. The eviction hook sees
// each cached block just before allocate() hands it out again, its K/V still intact (the RAM
// tier copies it then).
//
// Threading: engine thread only (the forward pass reads the block tables the engine handed it).

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ferrox {

class BlockManager {
public:
    BlockManager(int n_blocks, int block_size);
    BlockManager(const BlockManager&) = delete;
    BlockManager& operator=(const BlockManager&) = delete;

    int block_size() const { return block_size_; }
    int n_blocks() const { return n_blocks_; }
    // Blocks that allocate() can hand out: never used, released, or cached and unreferenced.
    int n_free() const { return static_cast<int>(free_.size()) + n_evictable_; }
    int n_used() const { return n_blocks_ - n_free(); }
    int n_cached() const { return static_cast<int>(index_.size()); }  // published blocks

    bool can_allocate(int n) const { return n <= n_free(); }
    // Takes a block with reference count 1, evicting the least recently released cached block
    // when no free one is left; -1 when every block is referenced.
    int32_t allocate();
    void retain(int32_t block);
    // Drops one reference. At zero a published block stays cached (evictable), any other block
    // returns to the free list.
    void release(int32_t block);
    int ref_count(int32_t block) const { return meta_[block].refs; }

    // Prefix cache. Looks up the longest chain of published blocks that holds exactly the first
    // tokens of `tokens`, at most `max_blocks` of them; retains each and appends it to `out`.
    // Returns the number of blocks found.
    int match_prefix(std::span<const int32_t> tokens, int max_blocks, std::vector<int32_t>* out);
    // Publishes `block` (referenced, its K/V computed) as holding the block_size tokens at
    // `tokens`, following `parent` (the published block of the previous position, or -1 for
    // the first). Returns the block that now stands for this prefix in the cache: `block`, or
    // the block that already held the same prefix (then `block` stays private, and the caller
    // chains its next block on the returned one); -1 when `parent` is not published.
    int32_t publish(int32_t block, int32_t parent, const int32_t* tokens);
    bool published(int32_t block) const { return meta_[block].hash != 0; }
    // The chain hash a published block is indexed by (0: not published), and the hash of the
    // block of `tokens` (block_size of them) after a block of hash `parent_hash` (0 for a first
    // block): a function of the tokens alone, the same in every process.
    uint64_t hash(int32_t block) const { return meta_[block].hash; }
    uint64_t prefix_hash(uint64_t parent_hash, const int32_t* tokens) const { return chain_hash(parent_hash, tokens); }
    // Changes each time the block is handed out: a holder of a block id that it does not
    // reference compares epochs to know the block is still the one it saw.
    uint32_t epoch(int32_t block) const { return meta_[block].epoch; }
    // Drops every unreferenced cached block (they return to the free list).
    void clear_cache();
    // The block_size tokens a published block holds.
    const int32_t* tokens(int32_t block) const { return tokens_.data() + static_cast<size_t>(block) * block_size_; }

    // Pins. The clock is any monotonic count of milliseconds (the engine's, or a test's).
    void set_now(int64_t now_ms) { now_ms_ = now_ms; }
    int64_t now_ms() const { return now_ms_; }
    // Keeps the published blocks that hold the first n_blocks * block_size tokens of `tokens`
    // (the chain match_prefix would find) cached until `until_ms` at least. Returns how many
    // blocks it pinned (the chain may be shorter than asked).
    int pin_prefix(std::span<const int32_t> tokens, int n_blocks, int64_t until_ms);
    bool pinned(int32_t block) const { return meta_[block].pin_until > now_ms_; }
    // Unreferenced pinned blocks (the pinned list), and pinned blocks evicted before their time
    // because nothing else was left.
    int n_pinned_cached() const { return lists_[kPinned].size; }
    uint64_t n_pins_broken() const { return pins_broken_; }
    // Called with each cached block allocate() is about to evict (still published).
    void set_evict_hook(std::function<void(int32_t block)> hook) { evict_hook_ = std::move(hook); }

private:
    uint64_t chain_hash(uint64_t parent_hash, const int32_t* tokens) const;
    // The two lists of unreferenced cached blocks, least recently released first.
    enum ListId : uint8_t { kPlain = 0, kPinned = 1 };
    struct List {
        int32_t head = -1, tail = -1;
        int size = 0;
    };
    void lru_unlink(int32_t b);
    void lru_push_back(int32_t b, ListId list);
    void unpublish(int32_t b);
    int32_t take_evictable();
    int32_t find_child(uint64_t h, int32_t parent, const int32_t* t) const;

    struct Meta {
        int32_t refs = 0;
        uint32_t epoch = 0;         // bumped each time the block is handed out
        uint64_t hash = 0;          // 0: not published
        int32_t parent = -1;        // published parent block, -1 for a first block
        uint32_t parent_epoch = 0;  // the parent's epoch when this block was published
        int32_t lru_prev = -1, lru_next = -1;
        bool evictable = false;     // published, unreferenced, in one of the lists
        ListId list = kPlain;       // which, when evictable
        int64_t pin_until = 0;      // ms on the manager's clock
    };

    int n_blocks_;
    int block_size_;
    std::vector<int32_t> free_;
    std::vector<Meta> meta_;
    std::vector<int32_t> tokens_;  // [n_blocks][block_size]: the tokens of published blocks
    std::unordered_map<uint64_t, int32_t> index_;  // chain hash -> published block
    List lists_[2];
    int n_evictable_ = 0;
    int64_t now_ms_ = 0;
    int64_t next_expiry_ = INT64_MAX;  // the earliest pin_until in the pinned list (or sooner)
    uint64_t pins_broken_ = 0;
    std::function<void(int32_t)> evict_hook_;
};

// The blocks of one sequence, in position order.
class SeqBlocks {
public:
    explicit SeqBlocks(BlockManager* pool) : pool_(pool) {}
    ~SeqBlocks() { clear(); }
    SeqBlocks(const SeqBlocks&) = delete;
    SeqBlocks& operator=(const SeqBlocks&) = delete;

    // Makes room for positions [0, n_pos). Fails (ResourceExhausted) when the pool is full;
    // what was allocated so far stays owned by the sequence.
    Status reserve(int n_pos);
    // Takes blocks already referenced for this sequence (a prefix-cache match) as its first.
    void adopt(const std::vector<int32_t>& blocks);
    // Releases every block, the last first (so a cached prefix is evicted from its end).
    void clear();
    const std::vector<int32_t>& blocks() const { return blocks_; }
    int capacity() const { return static_cast<int>(blocks_.size()) * pool_->block_size(); }

private:
    BlockManager* pool_;
    std::vector<int32_t> blocks_;
};

}  // namespace ferrox
