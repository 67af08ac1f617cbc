#pragma once
// Tokenizer: text <-> token ids for byte-level BPE (GPT-2 family), SentencePiece BPE (llama)
// and WordPiece (BERT), matching llama.cpp's llama_tokenize/llama_detokenize on GGUF vocabs
// and HF `tokenizers` on tokenizer.json files.
//
// Threading: immutable after creation; every const method may run on many threads at once.
// encode() allocates only its result and per-call scratch.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace ferrox {

struct DecodeOptions {
    bool special = false;         // render the text of control/unknown tokens (else "")
    bool remove_special = false;  // drop a leading BOS and trailing EOS the vocab would add
    bool clean_spaces = false;    // llama.cpp's " ," -> "," clean-up, if the vocab uses it
    // Remove one leading space from the first piece when the vocab adds a space prefix
    // (SentencePiece); llama.cpp's detokenize does this.
    bool strip_leading_space = true;
};

class Tokenizer {
  public:
    // Validates `spec` and builds the lookup tables.
    static Expected<std::unique_ptr<Tokenizer>> create(VocabSpec spec);
    // From an HF tokenizer.json (+ optional tokenizer_config.json, "" for none).
    static Expected<std::unique_ptr<Tokenizer>> from_hf_json(const std::string& tokenizer_json_path,
                                                             const std::string& config_path = "");
    // Same, from the file contents.
    static Expected<std::unique_ptr<Tokenizer>> from_hf_json_text(std::string_view tokenizer_json,
                                                                  std::string_view config_json);
    // The VocabSpec that from_hf_json_text would build.
    static Expected<VocabSpec> vocab_from_hf_json_text(std::string_view tokenizer_json,
                                                       std::string_view config_json);
    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // add_special: BOS/EOS (and CLS/SEP for WordPiece) as the vocab asks.
    // parse_special: control and unknown tokens written in the text become single tokens;
    // user-defined tokens always do (as llama.cpp's llama_tokenize).
    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
    // Appends to `out`.
    void encode_into(std::string_view text, bool add_special, bool parse_special,
                     std::vector<int32_t>& out) const;

    // Concatenated pieces (raw bytes: may be invalid UTF-8 when ids cut a character).
    std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
    // The bytes of one token. Control/unknown/unused tokens are "" unless `special`.
    // The view stays valid for the Tokenizer's lifetime. Out-of-range ids give "".
    std::string_view token_to_piece(int32_t id, bool special = false) const;
    // Streaming an HF tokenizer.json pipeline (IncrementalDecoder): the bytes `id` adds to a
    // decode() whose last kept token was `prev`, which may depend on both; prev kStreamFirst:
    // `id` comes first and gets decode()'s first-token rules; kStreamContinues: `id` continues
    // text decoded elsewhere (a prompt). nullopt when decode() skips `id` (a special token
    // without `special`). Without a pipeline a token's bytes are its token_to_piece.
    static constexpr int32_t kStreamFirst = -1, kStreamContinues = -2;
    bool has_hf_pipeline() const;
    std::optional<std::string> hf_stream_piece(int32_t prev, int32_t id, bool special = false) const;

    int32_t n_vocab() const;
    int32_t bos() const;
    int32_t eos() const;
    int32_t eot() const;
    int32_t eom() const;
    int32_t unk() const;
    int32_t pad() const;
    int32_t sep() const;
    int32_t cls() const;
    int32_t mask() const;
    bool add_bos() const;
    bool add_eos() const;
    bool add_space_prefix() const;
    // End of generation: eos, eot, eom and the tokens llama.cpp detects by text
    // (<|im_end|>, <|endoftext|>, <|eot_id|>, <end_of_turn>, ...).
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const;

    // The stored text of a token ("" when out of range), its type, and the reverse lookup.
    std::string_view token_text(int32_t id) const;
    TokenType token_type(int32_t id) const;
    int32_t token_id(std::string_view text) const;  // -1 when absent
    const VocabSpec& spec() const;

    struct Impl;

  private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace ferrox
