#pragma once
// HfPipeline: HF `tokenizers`' encode/decode pipeline, built from a parsed tokenizer.json:
// added tokens -> normalizer -> pre-tokenizer -> model (BPE, WordPiece, Unigram) ->
// post-processor, and the decoder chain for ids -> text. Used by Tokenizer for every
// tokenizer.json the GGUF-shaped fast path (VocabSpec fields alone) cannot represent exactly.
//
// Every component and option of tokenizer.json is either implemented with HF's semantics or
// rejected by from_json() with a one-line error naming it; nothing is ignored silently, except
// the batch settings `truncation` and `padding` (encode never truncates or pads) and
// TemplateProcessing's `pair` template (encode takes one sequence).
//
// Threading: immutable after from_json(); encode/decode may run on many threads at once.

#include <cstdint>
#include <memory>
#include <optional>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace ferrox {

class HfPipeline {
  public:
    // `tj`: the whole tokenizer.json. Unsupported components: kUnimplemented, one line.
    static Expected<std::shared_ptr<const HfPipeline>> from_json(const nlohmann::json& tj);
    ~HfPipeline();

    // add_special: apply the post-processor (BOS/CLS/SEP...). parse_special: special added
    // tokens written in the text are recognized (HF always does; false is HF's
    // encode_special_tokens). Non-special added tokens are always recognized.
    void encode(std::string_view text, bool add_special, bool parse_special,
                std::vector<int32_t>& out) const;
    // HF's decode: ids -> tokens -> decoder chain; skip_special drops special added tokens.
    std::string decode(std::span<const int32_t> ids, bool skip_special) const;
    // The bytes one token contributes when decoded alone, without UTF-8 repair (for
    // streaming); "" for ids out of range.
    std::string piece(int32_t id) const;
    // Streaming, as HF's DecodeStream: the bytes `id` adds to a decode() whose last kept token
    // was `prev` (-1: `id` is the first; -2: `id` continues earlier text, its piece()), with the
    // decoders seeing both tokens (a BPEDecoder's
    // suffix is a space only before another token, Strip after Fuse and Metaspace treat the
    // first token apart, CTC drops a repeat); without UTF-8 repair. nullopt when decode() drops
    // `id` (out of range, unassigned, or special with skip_special).
    std::optional<std::string> stream_piece(int32_t prev, int32_t id, bool skip_special) const;

    // id -> token text (model vocab and added tokens), token types, Unigram scores.
    const std::vector<std::string>& tokens() const;
    const std::vector<TokenType>& token_types() const;
    const std::vector<float>& scores() const;
    VocabKind kind() const;
    // The decoder maps token text to bytes through GPT-2's byte alphabet (a ByteLevel step).
    bool byte_level() const;
    int32_t unk_id() const;

    struct Impl;

  private:
    HfPipeline();
    std::unique_ptr<Impl> impl_;
};

// Ids in a tokenizer.json may leave holes (added tokens past the model's vocab), but not this
// many: an id far past every table is a corrupt file, and would size the tables.
inline constexpr int64_t kHfMaxIdHoles = 65536;

// A token id read from a tokenizer.json: an integer in [0, limit) and in int32, else a one-line
// kInvalidArgument naming `what`. Every reader of the file's ids goes through it.
Expected<int32_t> hf_token_id(const nlohmann::json& v, int64_t limit, const char* what);

// A token's text for an error message: JSON-quoted, so control characters stay on the line and
// invalid UTF-8 shows as U+FFFD.
std::string hf_quote(const std::string& text);

// The load error for a merge (`left right`) naming a token that is not in the model's vocab: HF
// refuses such a file ("Token ... out of vocabulary"), and so does ferrox, on both routes.
Status hf_merge_out_of_vocab(const std::string& left, const std::string& right, const std::string& missing);

}  // namespace ferrox
