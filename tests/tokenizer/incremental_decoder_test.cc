// Test (d): IncrementalDecoder never emits invalid UTF-8, reassembles the full decode, and
// turns impossible byte sequences into U+FFFD. Plus unit checks of the Unicode helpers.

#include "tokenizer/incremental_decoder.h"

#include <gtest/gtest.h>

#include "engine/tokenizer_gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ferrox {
namespace {

std::unique_ptr<Tokenizer> load_gguf_vocab(const std::string& name) {
    auto file =
        GgufFile::open(std::string(FERROX_TESTDATA_DIR) + "/vocab/ggml-vocab-" + name + ".gguf");
    EXPECT_TRUE(file.has_value()) << file.status().to_string();
    if (!file) return nullptr;
    auto spec = vocab_from_gguf(**file);
    EXPECT_TRUE(spec.has_value()) << spec.status().to_string();
    if (!spec) return nullptr;
    auto tok = Tokenizer::create(std::move(*spec));
    EXPECT_TRUE(tok.has_value()) << tok.status().to_string();
    return tok ? std::move(*tok) : nullptr;
}

// Lines of the corpus with emoji (ZWJ sequences, flags, skin tones) and CJK.
const char* const kWideLines[] = {
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own "
    "token)",
    "👨‍👩‍👧‍👦 family emoji (ZWJ sequence)",
    "👩🏽‍💻 woman technologist, medium skin tone",
    "🏳️‍🌈 rainbow flag and 🏴‍☠️ pirate flag",
    "🇺🇸🇬🇧🇯🇵🇩🇪 flags",
    "😀😃😄😁😆😅😂🤣🥲☺️😊😇",
    "我想在apple工作1314151天～",
    "日本語のテキストも含まれています。東京は日本の首都です。",
    "한국어 텍스트도 포함되어 있습니다.",
    "𠀋𠂢𠂤 (CJK Extension B characters)",
    "Ancient: 𓀀𓀁 hieroglyphs, 𒀀 cuneiform",
    "   leading spaces 漢字",
};

class IncrementalGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(IncrementalGolden, StreamsValidUtf8ThatConcatenatesToDecode) {
    auto tok = load_gguf_vocab(GetParam());
    ASSERT_TRUE(tok);
    size_t n_held_back = 0;
    for (const char* line : kWideLines) {
        const auto ids = tok->encode(line, false, false);
        IncrementalDecoder dec(*tok);
        std::string all;
        for (int32_t id : ids) {
            const std::string piece = dec.push(id);
            EXPECT_TRUE(utf8_is_valid(piece)) << GetParam() << ": " << line;
            if (dec.n_pending() > 0) ++n_held_back;
            all += piece;
        }
        all += dec.flush();
        EXPECT_EQ(all, tok->decode(ids)) << GetParam() << ": " << line;
    }
    // The byte-level and byte-fallback vocabs do split characters across tokens here.
    if (GetParam() != "bert-bge") {
        EXPECT_GT(n_held_back, 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(All, IncrementalGolden,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "deepseek-llm",
                                           "bert-bge"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s) {
                                 if (c == '-') c = '_';
                             }
                             return s;
                         });

TEST(IncrementalDecoder, InvalidBytesBecomeReplacementCharacters) {
    auto tok = load_gguf_vocab("llama-spm");
    ASSERT_TRUE(tok);
    auto byte = [&](int b) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        const int32_t id = tok->token_id(buf);
        EXPECT_GE(id, 0) << buf;
        return id;
    };
    const int32_t a = tok->token_id("a");
    ASSERT_GE(a, 0);
    const std::string fffd = "\xEF\xBF\xBD";
    IncrementalDecoder::Options opt;
    opt.strip_leading_space = false;
    {
        IncrementalDecoder d(*tok, opt);
        EXPECT_EQ(d.push(byte(0xE4)), "");  // lead of a 3-byte character: held back
        EXPECT_EQ(d.push(byte(0xB8)), "");
        EXPECT_EQ(d.push(byte(0xAD)), "中");
        EXPECT_EQ(d.flush(), "");
    }
    {
        IncrementalDecoder d(*tok, opt);
        EXPECT_EQ(d.push(byte(0xE4)), "");
        EXPECT_EQ(d.push(a), fffd + "a");     // the lead can never complete
        EXPECT_EQ(d.push(byte(0xFF)), fffd);  // never valid in UTF-8
        EXPECT_EQ(d.push(byte(0x80)), fffd);  // stray continuation byte
        EXPECT_EQ(d.push(byte(0xC0)), fffd);  // overlong lead
        EXPECT_EQ(d.push(byte(0xED)), "");
        EXPECT_EQ(d.push(byte(0xA0)), fffd + fffd);  // surrogate: ED then A0 both invalid
        EXPECT_EQ(d.push(byte(0xF0)), "");
        EXPECT_EQ(d.push(byte(0x9F)), "");
        EXPECT_EQ(d.flush(), fffd);  // unfinished at the end: one U+FFFD
    }
}

TEST(IncrementalDecoder, StripsSentencePieceLeadingSpaceLikeDetokenize) {
    auto tok = load_gguf_vocab("llama-spm");
    ASSERT_TRUE(tok);
    const auto ids = tok->encode("Hello world", false, false);
    IncrementalDecoder d(*tok);
    std::string s;
    for (int32_t id : ids) s += d.push(id);
    s += d.flush();
    EXPECT_EQ(s, "Hello world");
    EXPECT_EQ(tok->decode(ids), "Hello world");
    IncrementalDecoder::Options keep;
    keep.strip_leading_space = false;
    IncrementalDecoder d2(*tok, keep);
    std::string s2;
    for (int32_t id : ids) s2 += d2.push(id);
    EXPECT_EQ(s2, " Hello world");
}

TEST(Unicode, Normalization) {
    EXPECT_EQ(utf8_nfc("e\xCC\x81"), "\xC3\xA9");                       // e + U+0301 -> é
    EXPECT_EQ(utf8_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "각");  // Hangul jamo
    EXPECT_EQ(utf8_nfc("A\xCC\x8A"), "\xC3\x85");                       // Å
    EXPECT_EQ(utf8_nfc("\xE2\x84\xAB"), "\xC3\x85");                    // Angstrom sign -> Å
    EXPECT_EQ(u32_to_utf8(unicode_nfd(utf8_to_u32("각"))), "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");
    // Canonical reordering: dot below (220) before acute (230).
    EXPECT_EQ(u32_to_utf8(unicode_nfd(U"a\u0301\u0323")), u32_to_utf8(U"a\u0323\u0301"));
    EXPECT_TRUE(unicode_is_letter(U'ß'));
    EXPECT_TRUE(unicode_is_number(U'½'));
    EXPECT_TRUE(unicode_is_punctuation(U'、'));
    EXPECT_TRUE(unicode_is_whitespace(0x3000));
    std::u32string low;
    unicode_append_lower(U'İ', low);
    EXPECT_EQ(low, U"i\u0307");
    EXPECT_FALSE(utf8_is_valid("\xC0\x80"));
    EXPECT_TRUE(utf8_is_valid("\xEF\xBF\xBD ok"));
}

TEST(Tokenizer, EndOfGenerationAndPieces) {
    auto gpt2 = load_gguf_vocab("gpt-2");
    ASSERT_TRUE(gpt2);
    EXPECT_TRUE(gpt2->is_eog(50256));
    EXPECT_EQ(gpt2->token_to_piece(50256), "");
    EXPECT_EQ(gpt2->token_to_piece(50256, true), "<|endoftext|>");
    EXPECT_EQ(gpt2->token_to_piece(220), " ");  // "Ġ"
    auto spm = load_gguf_vocab("llama-spm");
    ASSERT_TRUE(spm);
    EXPECT_TRUE(spm->add_bos());
    EXPECT_TRUE(spm->is_eog(2));
    EXPECT_FALSE(spm->is_eog(1));
    EXPECT_EQ(spm->token_to_piece(spm->token_id("<0x0A>")), "\n");
    EXPECT_EQ(spm->encode("Hello", true, false).front(), 1);
    auto bert = load_gguf_vocab("bert-bge");
    ASSERT_TRUE(bert);
    const auto ids = bert->encode("Hello, world!", true, false);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids.front(), 101);
    EXPECT_EQ(ids.back(), 102);
}

}  // namespace
}  // namespace ferrox
