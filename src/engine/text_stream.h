#pragma once
// Turns a sequence's generated tokens into the text a client may see: incremental UTF-8
// detokenization (never half a character; invalid bytes become U+FFFD) followed by stop-string
// holdback: text that could still be the start of a stop string is held back until it is
// resolved, so a stop string never leaks, not even its first half.
//
// Threading: one per sequence, engine thread only.

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

class TextStream {
public:
    // special: control tokens are rendered as their text (markup a stream parser reads).
    TextStream(const Tokenizer& tok, std::vector<std::string> stop, bool special = false);

    struct Delta {
        std::string text;      // safe to send now
        bool stopped = false;  // a stop string matched: `text` ends right before it
        std::string matched;   // the stop string that matched
    };

    // Feeds one generated token (the token's own text is included unless it is a special
    // end-of-generation token, which callers do not feed).
    Delta push(int32_t token);
    // End of generation: everything still held back (a partial stop-string prefix, an
    // unfinished UTF-8 sequence as U+FFFD) is released.
    std::string finish();

private:
    Delta release();

    IncrementalDecoder decoder_;
    std::vector<std::string> stop_;
    std::string pending_;  // decoded but not yet released
    bool stopped_ = false;
};

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t stop_prefix_holdback(const std::string& text, const std::vector<std::string>& stop);

}  // namespace ferrox
