#include "engine/spec/prompt_lookup.h"

#include "engine/spec/speculation.h"

#include <algorithm>

namespace ferrox {

void ngram_draft(std::span<const int32_t> toks, int n_max, int k, std::vector<int32_t>* out) {
    const int len = static_cast<int>(toks.size());
    if (k <= 0) return;
    for (int n = std::min(n_max, len - 1); n >= std::min(2, n_max) && n >= 1; --n) {
        const int32_t* suffix = toks.data() + len - n;
        int best = -1, best_reach = 0;
        for (int i = len - n - 1; i >= 0; --i) {  // a match at i is followed by toks[i + n]
            if (toks[i] != suffix[0] || !std::equal(suffix + 1, suffix + n, toks.data() + i + 1)) continue;
            int m = n;  // how many tokens the match covers, back from toks[i + n - 1]
            while (m < kLookupReach && i - (m - n) - 1 >= 0 && toks[i - (m - n) - 1] == toks[len - m - 1]) ++m;
            if (m > best_reach) {
                best = i;
                best_reach = m;
                if (m == kLookupReach) break;
            }
        }
        if (best < 0) continue;
        const int end = std::min(len, best + n + k);
        out->insert(out->end(), toks.begin() + best + n, toks.begin() + end);
        return;
    }
}

double PromptLookupProposer::prior() const { return kPriorAccept; }

}  // namespace ferrox
