#pragma once
// Pre-tokenization by a sequence of PCRE2 regexes (UTF + UCP, so \p{L}, \s etc. are
// Unicode-aware). Each regex splits every piece of the previous stage into its matches and
// the gaps between them; nothing is dropped. A regex sees only its piece, so lookaheads and
// `$` stop at piece ends, as in HF's Sequence of Split(Isolated) pre-tokenizers and in
// llama.cpp's unicode_regex_split.
//
// Threading: immutable after create(); split() may run on many threads at once.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ferrox {

class RegexSplitter {
  public:
    static Expected<std::unique_ptr<RegexSplitter>> create(const std::vector<std::string>& regexes);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Appends (offset, length) pieces of `text` to `out` (cleared first). Invalid UTF-8
    // never matches, so it ends up in gaps.
    void split(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  private:
    RegexSplitter() = default;
    struct Stage;
    std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace ferrox
