// Golden test (b): every line of corpus.txt encoded with our loader of HF tokenizer.json
// must give the ids HF `tokenizers` gives (golden/hf_*.txt, made by
// scripts/golden/tokenizer_hf.py). Also (c): decode(encode(x)) == x.

#include <gtest/gtest.h>

#include <map>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ferrox {
namespace {

std::vector<std::string> corpus_lines() {
    std::string raw =
        test::read_all(std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/corpus.txt");
    std::vector<std::string> lines;
    size_t pos = 0;
    while (pos < raw.size()) {
        const size_t nl = raw.find('\n', pos);
        if (nl == std::string::npos) break;
        lines.push_back(raw.substr(pos, nl - pos));
        pos = nl + 1;
    }
    return lines;
}

std::vector<std::string> golden_lines(const std::string& name) {
    auto lines = test::split_lines(
        test::read_all(std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/golden/" + name));
    if (!lines.empty() && !lines[0].empty() && lines[0][0] == '#') lines.erase(lines.begin());
    return lines;
}

// Loaded once per process: parsing a 10 MB tokenizer.json dominates these tests.
const Tokenizer* load_hf(const std::string& name) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
    auto it = cache.find(name);
    if (it != cache.end()) return it->second.get();
    const std::string dir = std::string(FERROX_TESTDATA_DIR) + "/hf_tokenizers/" + name;
    auto tok = Tokenizer::from_hf_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
    EXPECT_TRUE(tok.has_value()) << tok.status().to_string();
    if (!tok.has_value()) return nullptr;
    return cache.emplace(name, std::move(*tok)).first->second.get();
}

void check_corpus(const Tokenizer* tok, const std::string& name) {
    const auto corpus = corpus_lines();
    const auto golden = golden_lines("hf_" + name + ".txt");
    ASSERT_GE(corpus.size(), 200u);
    ASSERT_EQ(corpus.size(), golden.size()) << "regenerate with scripts/golden/tokenizer_hf.py";
    size_t n_ok = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
        const auto expected = test::parse_ids(golden[i]);
        const auto got = tok->encode(corpus[i], /*add_special=*/false, /*parse_special=*/true);
        if (got == expected) {
            ++n_ok;
        } else {
            ADD_FAILURE() << name << " line " << i + 1 << " '" << corpus[i] << "'\n  expected "
                          << test::ids_to_string(expected) << "\n  got      "
                          << test::ids_to_string(got);
        }
    }
    std::printf("[ hf %s ] %zu/%zu lines match\n", name.c_str(), n_ok, corpus.size());
}

// Byte-level BPE is lossless: decode(encode(x)) == x (after the tokenizer's own NFC for
// qwen3). For llama2 (SentencePiece-style) the same holds for lines without special tokens:
// text after a special token gets a "▁" prefix that decodes to an extra space.
void check_round_trip(const Tokenizer* tok, const std::string& name) {
    DecodeOptions opt;
    opt.special = true;
    size_t n_checked = 0;
    for (const std::string& line : corpus_lines()) {
        const auto ids = tok->encode(line, false, true);
        std::string expected = line;
        if (tok->spec().normalizer == Normalizer::kNfc) expected = utf8_nfc(line);
        if (tok->spec().normalizer == Normalizer::kSpmEscape) {
            bool has_special = false;
            for (int32_t id : ids) has_special |= tok->token_type(id) == TokenType::kControl;
            if (has_special) continue;
        }
        EXPECT_EQ(tok->decode(ids, opt), expected) << name << ": " << line;
        ++n_checked;
    }
    EXPECT_GT(n_checked, 250u);
}

void check_qwen3(const Tokenizer* qwen) {
    const int32_t im_end = qwen->token_id("<|im_end|>");
    ASSERT_GE(im_end, 0);
    EXPECT_TRUE(qwen->is_eog(im_end));
    EXPECT_TRUE(qwen->is_eog(qwen->token_id("<|endoftext|>")));
    EXPECT_FALSE(qwen->is_eog(qwen->token_id("<|im_start|>")));
    EXPECT_EQ(qwen->eos(), im_end);
    EXPECT_FALSE(qwen->add_bos());
    // parse_special decides whether control tokens in the text are recognized.
    EXPECT_EQ(qwen->encode("<|im_end|>", false, true), std::vector<int32_t>{im_end});
    EXPECT_GT(qwen->encode("<|im_end|>", false, false).size(), 1u);
    EXPECT_EQ(qwen->token_to_piece(im_end), "");
    EXPECT_EQ(qwen->token_to_piece(im_end, true), "<|im_end|>");
}

void check_llama3(const Tokenizer* llama3) {
    EXPECT_TRUE(llama3->is_eog(llama3->token_id("<|eot_id|>")));
    EXPECT_TRUE(llama3->is_eog(llama3->token_id("<|end_of_text|>")));
    EXPECT_EQ(llama3->bos(), llama3->token_id("<|begin_of_text|>"));
}

void check_llama2(const Tokenizer* llama2) {
    EXPECT_TRUE(llama2->add_bos());
    EXPECT_EQ(llama2->bos(), 1);
    EXPECT_EQ(llama2->eos(), 2);
    const auto ids = llama2->encode("Hello world", true, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);
    DecodeOptions opt;
    opt.remove_special = true;
    EXPECT_EQ(llama2->decode(ids, opt), " Hello world");  // llama.cpp keeps the space after BOS
    EXPECT_EQ(llama2->decode(std::span<const int32_t>(ids).subspan(1)), "Hello world");
}

class HfGolden : public ::testing::TestWithParam<std::string> {};

// One test per tokenizer: ctest runs every test in its own process, and loading a 10 MB
// tokenizer.json costs more than all the checks together.
TEST_P(HfGolden, CorpusRoundTripAndSpecials) {
    const std::string name = GetParam();
    const Tokenizer* tok = load_hf(name);
    ASSERT_TRUE(tok);
    check_corpus(tok, name);
    check_round_trip(tok, name);
    if (name == "qwen3") check_qwen3(tok);
    if (name == "llama3") check_llama3(tok);
    if (name == "llama2") check_llama2(tok);
}

INSTANTIATE_TEST_SUITE_P(All, HfGolden, ::testing::Values("llama2", "llama3", "qwen3"));

}  // namespace
}  // namespace ferrox
