// Golden test (b, llama.cpp): the default model's vocabulary read from its GGUF must
// tokenize every corpus line as llama.cpp does (golden/llamacpp_smollm2.txt, made by
// scripts/golden/tokenizer_llamacpp.py). Skipped when the model is not downloaded.

#include <gtest/gtest.h>

#include <filesystem>

#include "engine/tokenizer_gguf.h"
#include "test_util.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ferrox {
namespace {

TEST(LlamaCppGolden, SmolLM2MatchesLlamaCpp) {
    const std::string model =
        std::string(FERROX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(model)) {
        GTEST_SKIP() << model << " is absent (run `make model`)";
    }
    const std::string golden_path =
        std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/golden/llamacpp_smollm2.txt";
    if (!std::filesystem::exists(golden_path)) {
        GTEST_SKIP() << golden_path << " is absent (scripts/golden/tokenizer_llamacpp.py)";
    }
    auto file = GgufFile::open(model);
    ASSERT_TRUE(file.has_value()) << file.status().to_string();
    auto spec = vocab_from_gguf(**file);
    ASSERT_TRUE(spec.has_value()) << spec.status().to_string();
    auto tok = Tokenizer::create(std::move(*spec));
    ASSERT_TRUE(tok.has_value()) << tok.status().to_string();

    std::string raw =
        test::read_all(std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/corpus.txt");
    std::vector<std::string> corpus;
    for (size_t pos = 0, nl; (nl = raw.find('\n', pos)) != std::string::npos; pos = nl + 1) {
        corpus.push_back(raw.substr(pos, nl - pos));
    }
    auto golden = test::split_lines(test::read_all(golden_path));
    if (!golden.empty() && !golden[0].empty() && golden[0][0] == '#') golden.erase(golden.begin());
    ASSERT_EQ(corpus.size(), golden.size())
        << "regenerate with scripts/golden/tokenizer_llamacpp.py";
    size_t n_ok = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
        const auto expected = test::parse_ids(golden[i]);
        const auto got = (*tok)->encode(corpus[i], false, false);
        if (got == expected) {
            ++n_ok;
        } else {
            ADD_FAILURE() << "line " << i + 1 << " '" << corpus[i] << "'\n  expected "
                          << test::ids_to_string(expected) << "\n  got      "
                          << test::ids_to_string(got);
        }
        // (c) byte-level BPE is lossless.
        EXPECT_EQ((*tok)->decode(got), corpus[i]);
    }
    std::printf("[ llama.cpp smollm2 ] %zu/%zu lines match\n", n_ok, corpus.size());

    // SmolLM2's end-of-generation tokens, as llama.cpp lists them.
    EXPECT_EQ((*tok)->eos(), 2);
    EXPECT_TRUE((*tok)->is_eog(0));  // <|endoftext|>
    EXPECT_TRUE((*tok)->is_eog(2));  // <|im_end|>
    EXPECT_FALSE((*tok)->is_eog(1));
    EXPECT_FALSE((*tok)->add_bos());
}

}  // namespace
}  // namespace ferrox
