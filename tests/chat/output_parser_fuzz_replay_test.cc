// Replays the committed output-parser corpus (tests/chat/output_parser_corpus) and mutations
// of it through the fuzz target, so every test run checks chunking independence and the
// tool-call contract on hostile model output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string_view>

#include "chat/output_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::vector<uint8_t>> load_corpus() {
    std::vector<std::vector<uint8_t>> out;
    std::filesystem::path dir =
        std::filesystem::path(FERROX_SOURCE_DIR) / "tests/chat/output_parser_corpus";
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
        std::ifstream in(p, std::ios::binary);
        out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
}

// The corpus entry parsed whole, as the fuzz target would configure it.
int count_calls(const std::vector<uint8_t>& c) {
    ferrox::OutputFormat f;
    f.tools = static_cast<ferrox::ToolCallFormat>(c[0] % 11);
    f.family = f.tools;
    if (c[1] & 4) f.tools = ferrox::ToolCallFormat::kNone;
    ferrox::OutputParser p(f);
    std::vector<ferrox::ChatDelta> out;
    p.push(std::string_view(reinterpret_cast<const char*>(c.data()) + 2, c.size() - 2), &out);
    p.finish(&out);
    return p.n_tool_calls();
}

TEST(OutputParserFuzz, CorpusReplays) {
    auto corpus = load_corpus();
    ASSERT_GE(corpus.size(), 11u);
    int n_with_calls = 0;
    for (const auto& c : corpus) {
        ASSERT_GE(c.size(), 2u);
        LLVMFuzzerTestOneInput(c.data(), c.size());
        if (count_calls(c) > 0) ++n_with_calls;
    }
    EXPECT_GE(n_with_calls, 10) << "the corpus should hold well-formed calls of every format";
}

TEST(OutputParserFuzz, RandomMutationsKeepContracts) {
    auto corpus = load_corpus();
    std::mt19937 rng(1234);
    static const char* const kTokens[] = {"<tool_call>",
                                          "</tool_call>",
                                          "<think>",
                                          "</think>",
                                          "{",
                                          "}",
                                          "[",
                                          "]",
                                          "\"",
                                          "\\",
                                          ",",
                                          ":",
                                          "\n",
                                          " ",
                                          "<|python_tag|>",
                                          "[TOOL_CALLS]",
                                          "[ARGS]",
                                          "<|channel|>",
                                          "<|message|>",
                                          "<|end|>",
                                          "<|start|>",
                                          "<|call|>",
                                          " to=functions.f",
                                          ">>>",
                                          "all\n",
                                          "<function=f>",
                                          "<parameter=a>",
                                          "</parameter>",
                                          "</function>",
                                          "<|START_ACTION|>",
                                          "<|END_ACTION|>",
                                          "<｜tool▁call▁begin｜>",
                                          "<｜tool▁sep｜>",
                                          "<｜tool▁call▁end｜>",
                                          "<｜tool▁calls▁begin｜>",
                                          "f.call(",
                                          ")",
                                          "'",
                                          ";"};
    for (const auto& seed : corpus) {
        for (int i = 0; i < 200; ++i) {
            std::vector<uint8_t> m = seed;
            int n_edits = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < n_edits && m.size() > 2; ++k) {
                size_t pos = 2 + rng() % (m.size() - 2);
                switch (rng() % 5) {
                    case 0:
                        m[pos] = static_cast<uint8_t>(rng());
                        break;
                    case 1:
                        m.erase(m.begin() + static_cast<long>(pos));
                        break;
                    case 2:
                    case 3: {
                        const char* t = kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
                        m.insert(m.begin() + static_cast<long>(pos), t, t + std::strlen(t));
                        break;
                    }
                    default:
                        m.resize(pos);
                        break;
                }
            }
            if (rng() % 4 == 0) m[1] = static_cast<uint8_t>(rng());  // other options
            LLVMFuzzerTestOneInput(m.data(), m.size());
        }
    }
}

}  // namespace
