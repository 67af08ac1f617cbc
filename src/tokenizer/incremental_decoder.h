#pragma once
// IncrementalDecoder: turns a stream of token ids into text that is always valid UTF-8.
// Bytes of a character split across tokens are held back until the character completes;
// a byte sequence that can never complete is replaced by U+FFFD as soon as that is certain
// (one U+FFFD per maximal invalid subpart, as Unicode recommends), and flush() replaces an
// unfinished tail with U+FFFD. Concatenating every push() and flush() equals
// Tokenizer::decode() of the same ids whenever that decode is valid UTF-8. (An HF tokenizer.json
// pipeline's decode() repairs on its own: its ByteFallback step turns a run of byte tokens that
// is not UTF-8 into one U+FFFD per byte; then the two differ in the number of U+FFFD.)
//
// Threading: one decoder per stream; not thread-safe. The Tokenizer must outlive it.

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ferrox {

class IncrementalDecoder {
  public:
    struct Options {
        bool special = false;  // render control tokens' text (as DecodeOptions::special)
        // Decode the first token as decode() does (the vocab's space prefix dropped, as
        // llama.cpp's detokenize; an HF decoder's first-token rules). Turn off when decoding a
        // continuation of a prompt.
        bool strip_leading_space = true;
    };

    explicit IncrementalDecoder(const Tokenizer& tokenizer)
        : IncrementalDecoder(tokenizer, Options{}) {}
    IncrementalDecoder(const Tokenizer& tokenizer, Options options);

    // Appends the text completed by `id` to `out` (possibly nothing).
    void push(int32_t id, std::string& out);
    std::string push(int32_t id) {
        std::string s;
        push(id, s);
        return s;
    }
    // Ends the stream: an unfinished character becomes U+FFFD. The decoder is then reset.
    void flush(std::string& out);
    std::string flush() {
        std::string s;
        flush(s);
        return s;
    }
    void reset();
    // Bytes held back, waiting for the rest of a character.
    size_t n_pending() const { return n_pending_; }

  private:
    void push_byte(uint8_t b, std::string& out);

    const Tokenizer& tokenizer_;
    Options options_;
    const bool pipeline_;  // an HF pipeline: pieces from Tokenizer::hf_stream_piece
    bool first_ = true;
    static constexpr int32_t kNone = Tokenizer::kStreamFirst;
    int32_t prev_ = kNone;  // the last token a pipeline's decode() keeps
    uint8_t pending_[4] = {};
    size_t n_pending_ = 0;
    size_t n_needed_ = 0;  // total length of the pending sequence
};

}  // namespace ferrox
