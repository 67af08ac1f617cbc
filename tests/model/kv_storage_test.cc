// The KV storage's geometry and layout: row and block sizes of each cache type, and rows of
// every block and layer disjoint and inside the storage; the F16 V tile offsets.
#include "model/kv_storage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

namespace ferrox {
namespace {

TEST(KvStorage, GeometryAndRowsAreDisjoint) {
    const KvGeometry f16{2, 64, 16, KvType::kF16};
    EXPECT_EQ(f16.row_bytes(), 128u);
    EXPECT_EQ(f16.block_bytes(), 2u * 2 * 16 * 128);
    const KvGeometry q8{2, 64, 16, KvType::kQ8_0};
    EXPECT_EQ(q8.row_bytes(), 2u * 34);  // two blocks of 32: an F16 scale and 32 int8
    EXPECT_EQ(q8.block_bytes(), 2u * 2 * 16 * 68);
    EXPECT_EQ(std::string(kv_type_name(KvType::kQ8_0)), "q8_0");
    EXPECT_EQ(std::string(kv_type_name(KvType::kF16)), "f16");
    ASSERT_TRUE(parse_kv_type("q8_0").has_value());
    EXPECT_EQ(*parse_kv_type("q8_0"), KvType::kQ8_0);
    EXPECT_EQ(*parse_kv_type("f16"), KvType::kF16);
    EXPECT_FALSE(parse_kv_type("q4_0").has_value());

    // Rows of every block and layer are disjoint and inside the pool: write each one with its
    // own byte and read them all back (ASan catches a row outside the storage).
    for (const KvGeometry& g : {f16, q8, KvGeometry{3, 32, 5, KvType::kQ8_0}}) {
        const int n_blocks = 3;
        KvStorage pool(g, n_blocks);
        const size_t slab = g.block_size * g.row_bytes();
        for (int b = 0; b < n_blocks; ++b) {
            for (int il = 0; il < g.n_layer; ++il) {
                EXPECT_EQ(pool.v_rows(b, il) - pool.k_rows(b, il), static_cast<ptrdiff_t>(slab));
                std::memset(pool.k_rows(b, il), (b * g.n_layer + il) * 2, slab);
                std::memset(pool.v_rows(b, il), (b * g.n_layer + il) * 2 + 1, slab);
            }
            if (b > 0) {
                EXPECT_EQ(pool.k_rows(b, 0) - pool.k_rows(b - 1, 0),
                          static_cast<ptrdiff_t>(g.block_bytes()));
            }
        }
        for (int b = 0; b < n_blocks; ++b) {
            for (int il = 0; il < g.n_layer; ++il) {
                const uint8_t k = static_cast<uint8_t>((b * g.n_layer + il) * 2);
                for (size_t i = 0; i < slab; ++i) {
                    ASSERT_EQ(pool.k_rows(b, il)[i], k);
                    ASSERT_EQ(pool.v_rows(b, il)[i], k + 1);
                }
            }
        }
    }
}

TEST(KvStorage, HeadRunsTileTheSlab) {
    // Each KV head's run of a block is head_bytes() * block_size bytes, one after another.
    for (KvType type : {KvType::kF16, KvType::kQ8_0}) {
        const KvGeometry g{2, 4 * 64, 16, type};
        KvStorage kv(g, 2);
        for (int h = 0; h < 4; ++h) {
            EXPECT_EQ(kv.head_rows(false, 1, 1, h, 64) - kv.k_rows(1, 1),
                      static_cast<ptrdiff_t>(h * 16 * kv.head_bytes(64)));
            EXPECT_EQ(kv.head_rows(true, 1, 1, h, 64) - kv.v_rows(1, 1),
                      static_cast<ptrdiff_t>(h * 16 * kv.head_bytes(64)));
        }
        EXPECT_EQ(kv.head_bytes(64) * 4, g.row_bytes());
    }
    // The V tiles cover every (slot, dimension) of a head's run exactly once.
    for (int bs : {32, 12, 6, 5}) {
        std::set<size_t> seen;
        for (int j = 0; j < bs; ++j) {
            for (int d = 0; d < 64; ++d) seen.insert(kv_v_offset(bs, 64, j, d));
        }
        EXPECT_EQ(seen.size(), static_cast<size_t>(bs) * 64);
        EXPECT_EQ(*seen.rbegin(), static_cast<size_t>(bs) * 64 - 1);
    }
}

}  // namespace
}  // namespace ferrox
