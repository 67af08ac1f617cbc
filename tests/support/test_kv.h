#pragma once
// Tests' KV for driving a model directly: the storage with a block manager over the same
// blocks (the engine keeps the two apart; a test that builds its own batches needs both).

#include "engine/block_manager.h"
#include "model/kv_storage.h"

namespace ferrox {

class TestKv : public KvStorage {
public:
    TestKv(KvGeometry g, int n_blocks) : KvStorage(g, n_blocks), blocks(n_blocks, g.block_size) {}
    BlockManager blocks;
};

// A sequence's blocks taken from a TestKv.
class TestSeq : public SeqBlocks {
public:
    explicit TestSeq(TestKv* kv) : SeqBlocks(&kv->blocks) {}
};

}  // namespace ferrox
