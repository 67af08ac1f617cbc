#pragma once
// The contracts both tokenizer fuzz targets (tokenizer_fuzz.cc: the GGUF and model
// tokenizer.json families; hf_pipeline_fuzz.cc: the generated pipeline tokenizers) check on every
// input. They abort, so libFuzzer and the replay tests report a broken contract like a crash:
//  - every id encode() returns is inside the vocabulary, and has a piece;
//  - the IncrementalDecoder's output is valid UTF-8, and equals decode() whenever decode() is
//    (for HF pipelines, whose decode() repairs bytes its own way: whenever the text was);
//  - for valid UTF-8 input, decode(encode(x)) is valid UTF-8;
//  - for byte-level BPE outside HF pipelines and valid UTF-8 input, decode(encode(x)) == x (NFC-normalized when the
//    tokenizer normalizes: qwen3), control tokens rendered and added BOS/EOS removed.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ferrox::fuzz {

using ferrox::Tokenizer;

[[noreturn]] inline void fail(const char* family, const char* what, std::string_view text) {
    std::fprintf(stderr, "tokenizer fuzz: %s: %s (input of %zu bytes)\n", family, what,
                 text.size());
    // The replay tests feed mutations that are not on disk: FERROX_FUZZ_DUMP=path keeps the text.
    if (const char* dump = std::getenv("FERROX_FUZZ_DUMP")) {
        if (std::FILE* f = std::fopen(dump, "wb")) {
            std::fwrite(text.data(), 1, text.size(), f);
            std::fclose(f);
        }
    }
    std::abort();
}

inline bool all_normal(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
        if (tok.token_type(id) != ferrox::TokenType::kNormal) return false;
    }
    return true;
}

inline void check_encode_decode(const char* family, const Tokenizer& tok, std::string_view text, bool add_special,
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
    // An HF pipeline's decode() repairs bytes itself (ByteFallback: a group of byte tokens that is
    // not UTF-8 becomes one U+FFFD per byte), so it is always valid; the streams agree when the
    // text was valid UTF-8, whose byte tokens form whole characters.
    const bool comparable = decoded_valid && (!tok.spec().hf_pipeline || ferrox::utf8_is_valid(text));
    if (comparable && streamed != decoded) {
        fail(family, "IncrementalDecoder differs from decode()", text);
    }

    if (!ferrox::utf8_is_valid(text)) return;
    if (!decoded_valid) fail(family, "decode(encode(x)) of valid UTF-8 is invalid UTF-8", text);

    const ferrox::VocabSpec& spec = tok.spec();
    // HF pipelines are not lossless in general (a Prepend normalizer runs on each piece between
    // added tokens, a Strip decoder drops a space): their oracle is the golden test against HF.
    if (spec.kind != ferrox::VocabKind::kBpe || !spec.byte_level || spec.hf_pipeline) return;
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

}  // namespace ferrox::fuzz
