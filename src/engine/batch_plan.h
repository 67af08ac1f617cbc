#pragma once
// What one engine step computes, as plain data: the scheduler writes the main entries (every
// decoding sequence's next token, then prompt chunks), speculation appends draft entries, the
// forward pass runs `batch`, and the postprocessor reads the logits rows back entry by entry.

#include <cstdint>
#include <vector>

#include "engine/sequence.h"
#include "model/forward_model.h"

namespace ferrox {

struct BatchPlan {
    Batch batch;                  // entries: main ones, then draft ones
    std::vector<Sequence*> owner;  // the sequence of each entry
    int n_decode = 0;             // leading entries that decode one token
    int n_main = 0;               // entries before the drafts
    int budget = 0;               // batch tokens left after the main entries

    void clear() {
        batch.tokens.clear();
        batch.seqs.clear();
        owner.clear();
        n_decode = n_main = budget = 0;
    }
    bool empty() const { return batch.seqs.empty(); }
    int n_tokens() const { return static_cast<int>(batch.tokens.size()); }
    int n_rows() const {
        int n = 0;
        for (const BatchSeq& b : batch.seqs) n += b.n_rows();
        return n;
    }
    // Appends `n` tokens of s at positions n_past.. over its KV blocks.
    // all_logits: a logits row for each of the n tokens (a prompt's logprobs).
    void add(Sequence& s, const int32_t* toks, int n, int n_past, bool want_logits, bool all_logits = false) {
        BatchSeq b;
        b.i_begin = static_cast<int>(batch.tokens.size());
        b.n_tokens = n;
        b.n_past = n_past;
        b.want_logits = want_logits || all_logits;
        b.all_logits = all_logits;
        batch.tokens.insert(batch.tokens.end(), toks, toks + n);
        batch.seqs.push_back(b);
        owner.push_back(&s);
    }
    // Points every entry at its sequence's block table (taking blocks may move a table).
    void bind_block_tables() {
        for (size_t i = 0; i < batch.seqs.size(); ++i) {
            batch.seqs[i].block_table = owner[i]->kv->blocks().data();
            batch.seqs[i].n_blocks = static_cast<int>(owner[i]->kv->blocks().size());
        }
    }
};

}  // namespace ferrox
