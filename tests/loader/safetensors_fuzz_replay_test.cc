// Replays the committed fuzz corpus (tests/loader/safetensors_corpus) and mutations of it through
// the fuzz target, so every test run exercises the hostile-input paths.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::vector<uint8_t>> load_corpus() {
    std::vector<std::vector<uint8_t>> out;
    std::filesystem::path dir = std::filesystem::path(FERROX_SOURCE_DIR) / "tests/loader/safetensors_corpus";
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(e.path(), std::ios::binary);
        out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
}

TEST(SafetensorsFuzz, CorpusReplays) {
    auto corpus = load_corpus();
    ASSERT_GE(corpus.size(), 3u);
    int n_valid = 0;
    for (const auto& c : corpus) {
        LLVMFuzzerTestOneInput(c.data(), c.size());
        if (ferrox::SafetensorsFile::parse(c.data(), c.size(), "c").has_value()) ++n_valid;
    }
    EXPECT_GE(n_valid, 1) << "the corpus should hold at least one valid seed";
}

TEST(SafetensorsFuzz, RandomMutationsNeverCrash) {
    auto corpus = load_corpus();
    std::mt19937 rng(1234);
    for (const auto& seed : corpus) {
        for (int i = 0; i < 300; ++i) {
            std::vector<uint8_t> m = seed;
            int n_flips = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < n_flips && !m.empty(); ++k) {
                size_t pos = rng() % m.size();
                switch (rng() % 3) {
                    case 0: m[pos] = static_cast<uint8_t>(rng()); break;
                    case 1: m[pos] = 0xff; break;
                    default: m.resize(pos); break;
                }
            }
            LLVMFuzzerTestOneInput(m.data(), m.size());
        }
    }
}

}  // namespace
