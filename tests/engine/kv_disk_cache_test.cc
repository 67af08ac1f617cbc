// The prompt cache on disk: blocks written by one cache are read back, byte for byte, by another
// over the same directory (a restart); damaged, truncated and foreign files are skipped and
// removed, never read into the pool; the directory stays within its budget, least recently
// used first. The host-memory tier likewise: spilled blocks read back byte for byte, a
// collision's tokens refused, its budget spent least recently used first.
#include "engine/kv_disk_cache.h"
#include "engine/kv_ram_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace ferrox {
namespace {

constexpr KvGeometry kGeo{.n_layer = 2, .kv_dim = 64, .block_size = 8, .type = KvType::kF16};

struct TempDir {
    TempDir() {
        char tmpl[] = "/tmp/ferrox_kvdisk_XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string path;
};

void fill(KvStorage& kv, int32_t block, uint32_t seed) {
    std::mt19937 rng(seed);
    uint8_t* p = kv.k_rows(block, 0);
    for (size_t i = 0; i < kv.geometry().block_bytes(); ++i) p[i] = static_cast<uint8_t>(rng());
}

std::vector<uint8_t> bytes_of(KvStorage& kv, int32_t block) {
    const uint8_t* p = kv.k_rows(block, 0);
    return std::vector<uint8_t>(p, p + kv.geometry().block_bytes());
}

std::vector<int32_t> tokens(int first) {
    std::vector<int32_t> t(kGeo.block_size);
    for (int i = 0; i < kGeo.block_size; ++i) t[i] = first + i;
    return t;
}

std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        if (e.is_regular_file()) out.push_back(e.path().string());
    }
    return out;
}

TEST(KvDiskCache, BlocksSurviveARestartByteForByte) {
    TempDir dir;
    KvStorage kv(kGeo, 4);
    const auto t0 = tokens(100), t1 = tokens(200);
    fill(kv, 0, 1);
    fill(kv, 1, 2);
    const auto b0 = bytes_of(kv, 0), b1 = bytes_of(kv, 1);
    {
        auto c = KvDiskCache::open(dir.path, 42, kv, 1 << 20);
        ASSERT_TRUE(c.has_value()) << c.status().message();
        (*c)->offer(0x1111, t0.data(), 0);
        (*c)->offer(0x2222, t1.data(), 1);
        (*c)->flush();
        EXPECT_EQ((*c)->files(), 2);
    }
    KvStorage fresh(kGeo, 4);
    auto c = KvDiskCache::open(dir.path, 42, fresh, 1 << 20);
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE((*c)->has(0x1111));
    ASSERT_TRUE((*c)->fetch(0x2222, t1.data(), 3));
    EXPECT_EQ(bytes_of(fresh, 3), b1);
    ASSERT_TRUE((*c)->fetch(0x1111, t0.data(), 2));
    EXPECT_EQ(bytes_of(fresh, 2), b0);
    // The same hash with other tokens (a collision) is a miss, and the file stays.
    EXPECT_FALSE((*c)->fetch(0x1111, t1.data(), 2));
    EXPECT_TRUE((*c)->has(0x1111));
    EXPECT_FALSE((*c)->fetch(0x3333, t0.data(), 2));  // never written
}

TEST(KvDiskCache, DamagedTruncatedAndForeignFilesAreSkipped) {
    TempDir dir;
    KvStorage kv(kGeo, 4);
    const auto t0 = tokens(1), t1 = tokens(2), t2 = tokens(3);
    fill(kv, 0, 7);
    {
        auto c = KvDiskCache::open(dir.path, 42, kv, 1 << 20);
        ASSERT_TRUE(c.has_value());
        (*c)->offer(0xA, t0.data(), 0);
        (*c)->offer(0xB, t1.data(), 0);
        (*c)->offer(0xC, t2.data(), 0);
        (*c)->flush();
    }
    auto files = files_in(dir.path);
    ASSERT_EQ(files.size(), 3u);
    std::sort(files.begin(), files.end());  // 000..0a.kv, 000..0b.kv, 000..0c.kv
    {  // A: one payload byte flipped
        std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(200);
        char ch;
        f.read(&ch, 1);
        ch ^= 0x40;
        f.seekp(200);
        f.write(&ch, 1);
    }
    std::filesystem::resize_file(files[1], 100);  // B: truncated
    KvStorage fresh(kGeo, 4);
    fill(fresh, 1, 99);
    auto c = KvDiskCache::open(dir.path, 42, fresh, 1 << 20);
    ASSERT_TRUE(c.has_value());
    EXPECT_FALSE((*c)->has(0xB));  // the wrong size is seen at start
    EXPECT_FALSE((*c)->fetch(0xA, t0.data(), 1));
    EXPECT_FALSE((*c)->has(0xA));  // and the damaged file is gone
    EXPECT_FALSE(std::filesystem::exists(files[0]));
    EXPECT_TRUE((*c)->fetch(0xC, t2.data(), 1));
    // Another model (key) does not see them.
    auto other = KvDiskCache::open(dir.path, 43, fresh, 1 << 20);
    ASSERT_TRUE(other.has_value());
    EXPECT_FALSE((*other)->has(0xC));
}

TEST(KvDiskCache, StaysWithinItsBudgetLeastRecentlyUsedFirst) {
    TempDir dir;
    KvStorage kv(kGeo, 2);
    fill(kv, 0, 5);
    const int64_t file_bytes = 48 + kGeo.block_size * 4 + static_cast<int64_t>(kGeo.block_bytes());
    auto c = KvDiskCache::open(dir.path, 1, kv, 3 * file_bytes);
    ASSERT_TRUE(c.has_value());
    std::vector<std::vector<int32_t>> t;
    for (int i = 0; i < 5; ++i) t.push_back(tokens(10 * i));
    for (int i = 0; i < 3; ++i) (*c)->offer(100 + i, t[i].data(), 0);
    (*c)->flush();
    ASSERT_TRUE((*c)->fetch(100, t[0].data(), 1));  // 100 is now the most recently used
    (*c)->offer(103, t[3].data(), 0);
    (*c)->flush();
    EXPECT_LE((*c)->bytes_on_disk(), 3 * file_bytes);
    EXPECT_TRUE((*c)->has(100));
    EXPECT_FALSE((*c)->has(101));  // the least recently used went
    EXPECT_TRUE((*c)->has(103));
    EXPECT_EQ(files_in(dir.path).size(), 3u);
}

TEST(KvDiskCache, ADirectoryThatCannotBeMadeIsAnErrorAtStart) {
    TempDir dir;
    const std::string file = dir.path + "/a-file";
    std::ofstream(file) << "x";
    KvStorage kv(kGeo, 1);
    auto c = KvDiskCache::open(file + "/sub", 1, kv, 1 << 20);  // a file where a directory must go
    ASSERT_FALSE(c.has_value());
    EXPECT_NE(c.status().message().find("--cache-dir"), std::string::npos) << c.status().message();
}

TEST(KvRamCache, SpilledBlocksComeBackByteForByteWithinTheBudget) {
    KvStorage kv(kGeo, 4);
    const size_t entry = kGeo.block_bytes() + kGeo.block_size * sizeof(int32_t);
    KvRamCache ram(kv, static_cast<int64_t>(2 * entry));  // room for two blocks
    const auto t0 = tokens(100), t1 = tokens(200), t2 = tokens(300);
    fill(kv, 0, 1);
    fill(kv, 1, 2);
    fill(kv, 2, 3);
    const auto b1 = bytes_of(kv, 1), b2 = bytes_of(kv, 2);
    ram.spill(0xa, t0.data(), 0);
    ram.spill(0xb, t1.data(), 1);
    EXPECT_TRUE(ram.has(0xa) && ram.has(0xb));
    EXPECT_FALSE(ram.fetch(0xb, t0.data(), 3));  // the right hash with other tokens: refused
    ram.spill(0xc, t2.data(), 2);                // over budget: 0xa (least recently used) goes
    EXPECT_FALSE(ram.has(0xa));
    EXPECT_EQ(ram.blocks(), 2);
    EXPECT_EQ(ram.bytes(), static_cast<int64_t>(2 * entry));
    fill(kv, 3, 9);
    ASSERT_TRUE(ram.fetch(0xb, t1.data(), 3));
    EXPECT_EQ(bytes_of(kv, 3), b1);
    EXPECT_FALSE(ram.has(0xb));  // it moved into the pool
    ASSERT_TRUE(ram.fetch(0xc, t2.data(), 0));
    EXPECT_EQ(bytes_of(kv, 0), b2);
    EXPECT_EQ(ram.blocks(), 0);
    EXPECT_FALSE(ram.fetch(0xa, t0.data(), 0));
    KvRamCache off(kv, 0);
    off.spill(0xa, t0.data(), 0);
    EXPECT_FALSE(off.has(0xa));
}

}  // namespace
}  // namespace ferrox
