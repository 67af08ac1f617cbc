#pragma once
// The KV cache's bytes: the one place that says how K and V rows are laid out. The engine's
// block manager (engine/block_manager.h) decides which block holds which positions of which
// sequence; this storage only holds the bytes of those blocks, and a backend's forward pass
// reads and writes them through the accessors below.
//
// A block holds `block_size` consecutive positions of one sequence, for every layer:
//   block b = [n_layer][2: K, V][slab of block_size * row_bytes]
// Inside a layer's K or V slab the cache type decides the order:
//  - F16: head-major, each KV head's block_size * head_dim elements one contiguous run (an
//    attention item reads one KV head, so one run per block). K is position-major within the
//    head (block_size rows of head_dim); V is transposed in tiles (kv_v_offset, defined with
//    the attention kernels that read it, kernels/attention_f16.h), so that decode P·V is a dot
//    product over positions, as over llama.cpp's transposed V, 8 positions a load.
//  - Q8_0: head-major too, each head's block_size positions one after another, a position's
//    head_dim values in blocks of 32 with an F16 scale (34 bytes per 32 values).
// Storage is allocated once, 2 MiB-aligned and advised as huge pages.
//
// Threading: the forward pass writes and reads the rows of the blocks its batch names; nothing
// else touches the bytes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/status.h"
#include "kernels/attention_f16.h"

namespace ferrox {

enum class KvType { kF16, kQ8_0 };
const char* kv_type_name(KvType t);  // "f16", "q8_0"
Expected<KvType> parse_kv_type(const std::string& name);

// Bytes of n consecutive values of one position in a cache of this type (F16: 2 a value; Q8_0:
// blocks of 32 with an F16 scale, 34 bytes; n % 32 == 0).
constexpr size_t kv_values_bytes(KvType type, int64_t n) {
    return type == KvType::kF16 ? static_cast<size_t>(n) * 2 : static_cast<size_t>(n) / 32 * 34;
}

struct KvGeometry {
    int n_layer = 0;
    int kv_dim = 0;      // n_head_kv * head_dim
    int block_size = 0;  // positions per block
    KvType type = KvType::kF16;

    // Bytes of one position's K (or V) row of one layer (all KV heads).
    size_t row_bytes() const { return kv_values_bytes(type, kv_dim); }
    size_t block_bytes() const { return static_cast<size_t>(n_layer) * 2 * block_size * row_bytes(); }
};

class KvStorage {
public:
    KvStorage(KvGeometry geometry, int n_blocks);
    KvStorage(const KvStorage&) = delete;
    KvStorage& operator=(const KvStorage&) = delete;

    const KvGeometry& geometry() const { return geo_; }
    int n_blocks() const { return n_blocks_; }
    size_t bytes() const { return geo_.block_bytes() * static_cast<size_t>(n_blocks_); }

    // The K (or V) slab of one block and layer: block_size * row_bytes bytes.
    uint8_t* k_rows(int32_t block, int il) { return base_ + (static_cast<size_t>(block) * geo_.n_layer + il) * 2 * slab(); }
    uint8_t* v_rows(int32_t block, int il) { return k_rows(block, il) + slab(); }
    // One KV head's run of a block and layer, for either cache type: F16 K rows of head_dim
    // elements by position (V: kv_v_offset's tiles), or Q8_0 rows of head_bytes() by position.
    uint8_t* head_rows(bool v, int32_t block, int il, int kvh, int head_dim) {
        return (v ? v_rows(block, il) : k_rows(block, il)) + static_cast<size_t>(kvh) * geo_.block_size * head_bytes(head_dim);
    }
    // Bytes of one position of one KV head.
    size_t head_bytes(int head_dim) const { return kv_values_bytes(geo_.type, head_dim); }

private:
    size_t slab() const { return static_cast<size_t>(geo_.block_size) * geo_.row_bytes(); }

    KvGeometry geo_;
    int n_blocks_;
    struct FreeDeleter {
        void operator()(uint8_t* p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, FreeDeleter> storage_;
    uint8_t* base_;
};

}  // namespace ferrox
