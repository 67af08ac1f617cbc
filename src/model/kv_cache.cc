#include "model/kv_cache.h"

#include "core/check.h"

namespace ferrox {

KvPool::KvPool(KvGeometry geometry, int n_blocks) : geo_(geometry), n_blocks_(n_blocks) {
    CHECK(n_blocks > 0 && geo_.block_size > 0 && geo_.kv_dim > 0 && geo_.n_layer > 0);
    const size_t n_elems = geo_.block_bytes() / sizeof(uint16_t) * n_blocks;
    storage_.reset(new uint16_t[n_elems]);
    base_ = storage_.get();
    free_.reserve(n_blocks);
    for (int i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
    refs_.assign(n_blocks, 0);
}

int32_t KvPool::allocate() {
    if (free_.empty()) return -1;
    int32_t b = free_.back();
    free_.pop_back();
    refs_[b] = 1;
    return b;
}

void KvPool::retain(int32_t block) {
    CHECK(block >= 0 && block < n_blocks_ && refs_[block] > 0);
    ++refs_[block];
}

void KvPool::release(int32_t block) {
    CHECK(block >= 0 && block < n_blocks_ && refs_[block] > 0);
    if (--refs_[block] == 0) free_.push_back(block);
}

Status SeqKv::reserve(int n_pos) {
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

void SeqKv::clear() {
    for (int32_t b : blocks_) pool_->release(b);
    blocks_.clear();
}

}  // namespace ferrox
