// Golden test (a): llama.cpp's tokenizer test vocabularies. Each .inp holds strings
// separated by "\n__ggml_vocab_test__\n" (split exactly as llama.cpp's test-tokenizer-0
// does: a chunk keeps its own inner newlines; the final separator's newline ends the file),
// and each line of the .out the ids HF `tokenizers` gives for the string (no BOS).

#include <gtest/gtest.h>

#include "engine/tokenizer_gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {
namespace {

std::vector<std::string> split_inp(const std::string& raw) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < raw.size()) {
        const size_t next = raw.find(sep, pos);
        if (next == std::string::npos) {
            out.push_back(raw.substr(pos));
            break;
        }
        out.push_back(raw.substr(pos, next - pos));
        pos = next + sep.size();
    }
    return out;
}

class VocabGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabGolden, MatchesReferenceIds) {
    const std::string base =
        std::string(FERROX_TESTDATA_DIR) + "/vocab/ggml-vocab-" + GetParam() + ".gguf";
    auto file = GgufFile::open(base);
    ASSERT_TRUE(file.has_value()) << file.status().to_string();
    auto spec = vocab_from_gguf(**file);
    ASSERT_TRUE(spec.has_value()) << spec.status().to_string();
    auto tok = Tokenizer::create(std::move(*spec));
    ASSERT_TRUE(tok.has_value()) << tok.status().to_string();

    const auto inputs = split_inp(test::read_all(base + ".inp"));
    const auto outputs = test::split_lines(test::read_all(base + ".out"));
    ASSERT_EQ(inputs.size(), outputs.size());
    ASSERT_GT(inputs.size(), 0u);
    size_t n_ok = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const auto expected = test::parse_ids(outputs[i]);
        const auto got = (*tok)->encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
        if (got == expected) {
            ++n_ok;
        } else {
            ADD_FAILURE() << GetParam() << " string " << i << " '" << inputs[i] << "'\n  expected "
                          << test::ids_to_string(expected) << "\n  got      "
                          << test::ids_to_string(got);
        }
    }
    std::printf("[ vocab %s ] %zu/%zu strings match\n", GetParam().c_str(), n_ok, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(All, VocabGolden,
                         ::testing::Values("bert-bge", "deepseek-llm", "falcon", "gpt-2",
                                           "llama-spm", "phi-3", "starcoder"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s) {
                                 if (c == '-') c = '_';
                             }
                             return s;
                         });

}  // namespace
}  // namespace ferrox
