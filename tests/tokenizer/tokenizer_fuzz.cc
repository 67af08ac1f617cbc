// Fuzz target: arbitrary text through encode and decode of every tokenizer family ferrox
// supports, loaded once per process from the shared test data. Besides crashes, hangs and
// sanitizer reports it aborts when a contract of fuzz_checks.h breaks.
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
#include "fuzz_checks.h"
#include "loader/gguf.h"
#include "tokenizer/tokenizer.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const auto& toks = tokenizers();
    const size_t i_family = (data[0] & 7) % kNumFamilies;
    const bool add_special = (data[0] & 8) != 0;
    const bool parse_special = (data[0] & 16) != 0;
    std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    ferrox::fuzz::check_encode_decode(kFamilies[i_family], *toks[i_family], text, add_special, parse_special);
    return 0;
}
