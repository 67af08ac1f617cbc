// Fuzz target: arbitrary text through encode and decode of every tokenizer family ferrox
// supports, loaded once per process from the shared test data. Besides crashes, hangs and
// sanitizer reports it aborts when a contract breaks:
//  - every id encode() returns is inside the vocabulary;
//  - the IncrementalDecoder's output is valid UTF-8, and equals decode() whenever decode() is;
//  - for valid UTF-8 input, decode(encode(x)) is valid UTF-8;
//  - for byte-level BPE and valid UTF-8 input, decode(encode(x)) == x (NFC-normalized when the
//    tokenizer normalizes: qwen3), control tokens rendered and added BOS/EOS removed.
//
// Input: byte 0 picks the tokenizer (low 3 bits, % kNumFamilies) and the flags (bit 3:
// add_special, bit 4: parse_special); the rest is the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer_gguf.h"
#include "loader/gguf.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#ifndef FERROX_TESTDATA_DIR
#error "FERROX_TESTDATA_DIR must name the shared test data (tests/CMakeLists.txt sets it)"
#endif

namespace {

using ferrox::Tokenizer;

// The order is the corpus's: byte 0 of a seed names one of these.
constexpr const char* kFamilies[] = {
    "hf:qwen3",        // byte-level BPE, NFC normalizer, ChatML control tokens
    "hf:llama3",       // byte-level BPE, ignore_merges
    "hf:llama2",       // SentencePiece-style BPE from tokenizer.json, <0xNN> byte fallback
    "gguf:gpt-2",      // byte-level BPE from GGUF metadata
    "gguf:llama-spm",  // SentencePiece (scores) from GGUF metadata
    "gguf:bert-bge",   // WordPiece
    "gguf:phi-3",      // SentencePiece with rstrip special tokens
};
constexpr size_t kNumFamilies = sizeof(kFamilies) / sizeof(kFamilies[0]);

[[noreturn]] void fail(const char* family, const char* what, std::string_view text) {
    std::fprintf(stderr, "tokenizer_fuzz: %s: %s (input of %zu bytes)\n", family, what,
                 text.size());
    std::abort();
}

std::unique_ptr<Tokenizer> load(std::string_view family) {
    const std::string data = FERROX_TESTDATA_DIR;
    if (family.substr(0, 3) == "hf:") {
        const std::string dir = data + "/hf_tokenizers/" + std::string(family.substr(3));
        auto tok = Tokenizer::from_hf_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
        if (tok.has_value()) return std::move(*tok);
        std::fprintf(stderr, "tokenizer_fuzz: %s\n", tok.status().to_string().c_str());
        std::abort();
    }
    const std::string path = data + "/vocab/ggml-vocab-" + std::string(family.substr(5)) + ".gguf";
    auto file = ferrox::GgufFile::open(path);
    if (!file.has_value()) {
        std::fprintf(stderr, "tokenizer_fuzz: %s\n", file.status().to_string().c_str());
        std::abort();
    }
    auto spec = ferrox::vocab_from_gguf(**file);
    auto tok = spec.has_value() ? Tokenizer::create(std::move(*spec))
                                : ferrox::Expected<std::unique_ptr<Tokenizer>>(spec.status());
    if (tok.has_value()) return std::move(*tok);
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", tok.status().to_string().c_str());
    std::abort();
}

// Built on first use, all at once: a fuzzing process pays the loads once.
const std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
    static const auto* all = [] {
        auto* v = new std::vector<std::unique_ptr<Tokenizer>>();
        for (const char* f : kFamilies) v->push_back(load(f));
        return v;
    }();
    return *all;
}

bool all_normal(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
        if (tok.token_type(id) != ferrox::TokenType::kNormal) return false;
    }
    return true;
}

void check(const char* family, const Tokenizer& tok, std::string_view text, bool add_special,
           bool parse_special) {
    const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
    for (int32_t id : ids) {
        if (id < 0 || id >= tok.n_vocab()) fail(family, "encode returned an id out of range", text);
        (void)tok.token_to_piece(id, true);
    }
    const std::string decoded = tok.decode(ids);
    const bool decoded_valid = ferrox::utf8_is_valid(decoded);

    ferrox::IncrementalDecoder inc(tok);
    std::string streamed;
    for (int32_t id : ids) inc.push(id, streamed);
    inc.flush(streamed);
    if (!ferrox::utf8_is_valid(streamed)) fail(family, "IncrementalDecoder gave invalid UTF-8", text);
    if (decoded_valid && streamed != decoded) {
        fail(family, "IncrementalDecoder differs from decode()", text);
    }

    if (!ferrox::utf8_is_valid(text)) return;
    if (!decoded_valid) fail(family, "decode(encode(x)) of valid UTF-8 is invalid UTF-8", text);

    const ferrox::VocabSpec& spec = tok.spec();
    if (spec.kind != ferrox::VocabKind::kBpe || !spec.byte_level) return;
    ferrox::DecodeOptions opt;
    opt.special = true;
    opt.remove_special = add_special;
    const std::string round = tok.decode(ids, opt);
    std::string expected(text);
    if (spec.normalizer == ferrox::Normalizer::kNfc) {
        // Added tokens are split off before normalizing (as HF does), so NFC of the whole
        // text is only the oracle when no added token matched, or when x is NFC already.
        const std::string nfc = ferrox::utf8_nfc(text);
        if (nfc != expected) {
            std::vector<int32_t> plain = tok.encode(text, false, parse_special);
            if (!all_normal(tok, plain)) return;
            expected = nfc;
        }
    }
    if (round != expected) fail(family, "byte-level BPE: decode(encode(x)) != x", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const auto& toks = tokenizers();
    const size_t i_family = (data[0] & 7) % kNumFamilies;
    const bool add_special = (data[0] & 8) != 0;
    const bool parse_special = (data[0] & 16) != 0;
    std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    check(kFamilies[i_family], *toks[i_family], text, add_special, parse_special);
    return 0;
}
