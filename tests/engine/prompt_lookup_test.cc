// Prompt lookup (engine/spec/prompt_lookup.h): which earlier occurrence drafts, and how much.
#include "engine/spec/prompt_lookup.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferrox {
namespace {

std::vector<int32_t> draft(const std::vector<int32_t>& toks, int n_max, int k) {
    std::vector<int32_t> out;
    ngram_draft(toks, n_max, k, &out);
    return out;
}

TEST(PromptLookup, TheLongestMatchDraftsNotTheLatest) {
    // "7 1 2" occurs twice before the end: at 1 (after 5 6, as the end is) and at 8 (after 9).
    // The latest occurrence would draft 40 41; the one matching 5 6 7 1 2 drafts 30 31 32.
    const std::vector<int32_t> toks = {5, 6, 7, 1, 2, 30, 31, 32, 9, 7, 1, 2, 40, 41, 5, 6, 7, 1, 2};
    EXPECT_EQ(draft(toks, 3, 3), (std::vector<int32_t>{30, 31, 32}));
    // Only the longest n (3) counts as the key; with n_max 2 the key is "1 2", and the reach
    // back still picks the occurrence after 5 6 7.
    EXPECT_EQ(draft(toks, 2, 2), (std::vector<int32_t>{30, 31}));
}

TEST(PromptLookup, TheLatestAmongEqualMatches) {
    // "3 1 2" at 0 (then 10) and 4 (then 20), each matching 3 tokens back: the later one.
    const std::vector<int32_t> toks = {3, 1, 2, 10, 3, 1, 2, 20, 3, 1, 2};
    EXPECT_EQ(draft(toks, 3, 1), (std::vector<int32_t>{20}));
}

TEST(PromptLookup, FallsBackToShorterKeysAndStopsAtTheEnd) {
    // No earlier "8 9 4", but "9 4" occurs: what followed it, up to the end of the context.
    const std::vector<int32_t> toks = {9, 4, 11, 12, 8, 9, 4};
    EXPECT_EQ(draft(toks, 3, 8), (std::vector<int32_t>{11, 12, 8, 9, 4}));
    EXPECT_TRUE(draft({1, 2, 3, 4}, 3, 8).empty());  // no repeated pair
    EXPECT_TRUE(draft(toks, 3, 0).empty());
    EXPECT_TRUE(draft({}, 3, 4).empty());
    EXPECT_EQ(draft({5, 5}, 1, 2), (std::vector<int32_t>{5}));  // n_max 1: single tokens
}

TEST(PromptLookup, AppendsToWhatIsThere) {
    std::vector<int32_t> out = {99};
    ngram_draft(std::vector<int32_t>{1, 2, 3, 1, 2}, 2, 4, &out);
    EXPECT_EQ(out, (std::vector<int32_t>{99, 3, 1, 2}));
}

}  // namespace
}  // namespace ferrox
