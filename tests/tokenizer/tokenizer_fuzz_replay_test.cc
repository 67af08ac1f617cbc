// Replays the committed fuzz corpus (tests/tokenizer/fuzz_corpus, made by make_fuzz_corpus.py
// plus the inputs the fuzzer found) and mutations of it through the fuzz target, whose checks
// abort on a broken contract: every test run exercises every tokenizer family.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::vector<uint8_t>> load_corpus() {
    std::vector<std::vector<uint8_t>> out;
    const std::filesystem::path dir =
        std::filesystem::path(FERROX_SOURCE_DIR) / "tests/tokenizer/fuzz_corpus";
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
        std::ifstream in(p, std::ios::binary);
        out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
}

TEST(TokenizerFuzz, CorpusCoversEveryFamilyAndReplays) {
    const auto corpus = load_corpus();
    std::set<int> families;
    for (const auto& c : corpus) {
        ASSERT_FALSE(c.empty());
        families.insert((c[0] & 7) % 7);
        LLVMFuzzerTestOneInput(c.data(), c.size());
    }
    EXPECT_EQ(families.size(), 7u) << "every tokenizer family needs seeds";
}

TEST(TokenizerFuzz, RandomMutationsKeepTheContracts) {
    const auto corpus = load_corpus();
    std::mt19937 rng(1234);
    // Pieces that cut or complete multi-byte characters and special-token markup.
    static const std::vector<std::vector<uint8_t>> kPieces = {
        {0xc3}, {0xa9}, {0xe2, 0x82}, {0xf0, 0x9f, 0xa6, 0x99}, {0xcc, 0x81}, {'<', '|'},
        {'|', '>'}, {' ', ' '}, {'\n'}, {'\t'}, {0xef, 0xbf, 0xbd}, {0xe1, 0x84, 0x80}};
    for (const auto& seed : corpus) {
        for (int i = 0; i < 30; ++i) {
            std::vector<uint8_t> m = seed;
            const int n_edits = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < n_edits && m.size() > 1; ++k) {
                const size_t pos = 1 + rng() % (m.size() - 1);
                switch (rng() % 4) {
                    case 0:
                        m[pos] = static_cast<uint8_t>(rng());
                        break;
                    case 1:
                        m.erase(m.begin() + static_cast<long>(pos));
                        break;
                    case 2: {
                        const auto& p = kPieces[rng() % kPieces.size()];
                        m.insert(m.begin() + static_cast<long>(pos), p.begin(), p.end());
                        break;
                    }
                    default:
                        m[0] = static_cast<uint8_t>(rng());  // another family and flags
                        break;
                }
            }
            LLVMFuzzerTestOneInput(m.data(), m.size());
        }
    }
}

}  // namespace
