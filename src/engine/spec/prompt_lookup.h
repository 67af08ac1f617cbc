#pragma once
// Prompt lookup, the drafting of model-free speculative decoding: the tokens that followed an
// earlier occurrence of the context's last few tokens.

#include <cstdint>
#include <span>
#include <vector>

#include "engine/spec/proposer.h"

namespace ferrox {

// How far back a match is compared to choose between occurrences.
inline constexpr int kLookupReach = 64;

// Appends to `out` at most k of the tokens that followed an earlier occurrence of the last n
// tokens of `toks`, for the largest n from n_max down to 2 (1 when n_max is 1) that occurs. Of
// the occurrences, the one whose match reaches furthest back (up to kLookupReach tokens), the
// most recent among equals: text copied from the prompt repeats short n-grams (a closing
// brace, an indent) whose latest occurrence is often elsewhere, and the longer match is where
// the copy really is. Nothing is appended when no n-gram occurs (or k <= 0).
void ngram_draft(std::span<const int32_t> toks, int n_max, int k, std::vector<int32_t>* out);

// The proposer: a decoding sequence drafts what followed the last spec_ngram (down to 2) tokens
// of its context where they occurred before.
class PromptLookupProposer final : public Proposer {
public:
    explicit PromptLookupProposer(int spec_ngram) : ngram_(spec_ngram) {}
    double prior() const override;
    bool candidate(Sequence& s, bool allowed, int k_max, int* limit) override {
        if (allowed && k_max > 0) ngram_draft(s.tokens, ngram_, k_max, &s.spec.draft);
        *limit = static_cast<int>(s.spec.draft.size());
        return *limit > 0;
    }

private:
    int ngram_;
};

}  // namespace ferrox
