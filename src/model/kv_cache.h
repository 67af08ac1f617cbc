#pragma once
// The KV cache: a pool of fixed-size blocks allocated once, each holding `block_size`
// positions of K and V for every layer, as F16. A sequence owns a block table (indices into
// the pool); position p of a sequence lives in block table[p / block_size], slot
// p % block_size. Blocks are reference-counted so sequences can share a common prefix.
//
// Layout of one block: [n_layer][2: K, V][block_size][kv_dim] f16, so the positions of one
// layer in one block are contiguous rows (what attention streams over).
//
// Threading: allocation and reference counts are for the engine thread only; the forward pass
// writes and reads rows of blocks that the engine handed it.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"

namespace ferrox {

struct KvGeometry {
    int n_layer = 0;
    int kv_dim = 0;      // n_head_kv * head_dim
    int block_size = 0;  // positions per block
    size_t block_bytes() const {
        return static_cast<size_t>(n_layer) * 2 * block_size * kv_dim * sizeof(uint16_t);
    }
};

class KvPool {
public:
    KvPool(KvGeometry geometry, int n_blocks);
    KvPool(const KvPool&) = delete;
    KvPool& operator=(const KvPool&) = delete;

    const KvGeometry& geometry() const { return geo_; }
    int n_blocks() const { return n_blocks_; }
    int n_free() const { return static_cast<int>(free_.size()); }

    bool can_allocate(int n) const { return n <= n_free(); }
    // Takes a free block with reference count 1, or -1 when none is left.
    int32_t allocate();
    void retain(int32_t block);
    // Drops one reference; the block returns to the free list at zero.
    void release(int32_t block);
    int ref_count(int32_t block) const { return refs_[block]; }

    uint16_t* k_rows(int32_t block, int il) {
        return base_ + (static_cast<size_t>(block) * geo_.n_layer + il) * 2 * slab();
    }
    uint16_t* v_rows(int32_t block, int il) { return k_rows(block, il) + slab(); }

private:
    size_t slab() const { return static_cast<size_t>(geo_.block_size) * geo_.kv_dim; }

    KvGeometry geo_;
    int n_blocks_;
    std::unique_ptr<uint16_t[]> storage_;
    uint16_t* base_;
    std::vector<int32_t> free_;
    std::vector<int32_t> refs_;
};

// The blocks of one sequence, in position order.
class SeqKv {
public:
    explicit SeqKv(KvPool* pool) : pool_(pool) {}
    ~SeqKv() { clear(); }
    SeqKv(const SeqKv&) = delete;
    SeqKv& operator=(const SeqKv&) = delete;

    // Makes room for positions [0, n_pos). Fails (ResourceExhausted) when the pool is full;
    // what was allocated so far stays owned by the sequence.
    Status reserve(int n_pos);
    void clear();
    const std::vector<int32_t>& blocks() const { return blocks_; }
    int capacity() const { return static_cast<int>(blocks_.size()) * pool_->geometry().block_size; }

private:
    KvPool* pool_;
    std::vector<int32_t> blocks_;
};

}  // namespace ferrox
