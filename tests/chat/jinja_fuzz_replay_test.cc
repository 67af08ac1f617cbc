// Replays the committed fuzz corpus (tests/chat/fuzz_corpus) and mutations of it through the
// fuzz target, so every test run exercises the hostile-template paths.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "chat/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::vector<uint8_t>> load_corpus() {
    std::vector<std::vector<uint8_t>> out;
    std::filesystem::path dir = std::filesystem::path(FERROX_SOURCE_DIR) / "tests/chat/fuzz_corpus";
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
        std::ifstream in(p, std::ios::binary);
        out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
}

TEST(JinjaFuzz, CorpusReplays) {
    auto corpus = load_corpus();
    ASSERT_GE(corpus.size(), 3u);
    int n_valid = 0;
    for (const auto& c : corpus) {
        LLVMFuzzerTestOneInput(c.data(), c.size());
        std::string_view src(reinterpret_cast<const char*>(c.data()), c.size());
        if (ferrox::JinjaTemplate::parse(src).has_value()) ++n_valid;
    }
    EXPECT_GE(n_valid, 2) << "the corpus should hold valid templates";
}

TEST(JinjaFuzz, RandomMutationsNeverCrash) {
    auto corpus = load_corpus();
    std::mt19937 rng(1234);
    static const char kTokens[][6] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")",  "[",
                                      "]",  "|",  ".",  "'",  "\"", ",",  "*", "~", "if", "for"};
    for (const auto& seed : corpus) {
        for (int i = 0; i < 200; ++i) {
            std::vector<uint8_t> m = seed;
            int n_edits = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < n_edits && !m.empty(); ++k) {
                size_t pos = rng() % m.size();
                switch (rng() % 4) {
                    case 0:
                        m[pos] = static_cast<uint8_t>(rng());
                        break;
                    case 1:
                        m.erase(m.begin() + static_cast<long>(pos));
                        break;
                    case 2: {
                        const char* t = kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
                        m.insert(m.begin() + static_cast<long>(pos), t, t + std::strlen(t));
                        break;
                    }
                    default:
                        m.resize(pos);
                        break;
                }
            }
            LLVMFuzzerTestOneInput(m.data(), m.size());
        }
    }
}

}  // namespace
