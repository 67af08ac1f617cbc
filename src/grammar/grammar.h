#pragma once
// Context-free grammars over bytes, written in GBNF (llama.cpp's grammar notation), and the
// matcher that constrained decoding steps through.
//
// GBNF as accepted here:
//   rule-name ::= alternative | alternative ...      (names: letters, digits, '-' and '_')
//   items: "literal" (escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH),
//          [class] and [^class] with ranges a-z and the same escapes, . (any character),
//          rule references, ( grouping ), each optionally followed by * + ? {m} {m,} {m,n}.
//   # comments run to the end of the line; a rule continues on the next line after '|' or
//   inside parentheses.
// Characters are Unicode code points; classes are compiled into UTF-8 byte sequences, so the
// matcher works on bytes and a character split across two tokens needs no special case.
// Left recursion (including through rules that can match nothing) is refused at compile time:
// it would never terminate.
//
// Threading: a Grammar is immutable and may be shared between threads. A GrammarRuntime (and
// every Matcher on it) belongs to one thread at a time.

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ferrox::grammar {

// Limits on a grammar a client sends (its size is already bounded by the request body).
struct GrammarLimits {
    int max_rules = 100000;        // after repetitions and classes are expanded
    int max_elements = 4000000;
    int max_nesting = 64;          // parentheses inside one rule
    int max_repeat = 10000;        // m and n of {m,n}
};

class Grammar {
public:
    // Parses `gbnf` and compiles it; `root` names the start rule. Errors name the line.
    static Expected<std::shared_ptr<const Grammar>> parse(std::string_view gbnf, std::string_view root = "root",
                                                          const GrammarLimits& limits = {});

    // The source it was compiled from (for caching by text).
    const std::string& source() const { return source_; }
    int n_rules() const { return static_cast<int>(rule_alts_.size()); }

    // Compiled form (read by the runtime).
    enum Kind : uint8_t { kEnd, kTerminal, kRef };
    struct Element {
        Kind kind;
        uint32_t value;  // kTerminal: byte set index; kRef: rule index
    };
    const std::vector<Element>& elements() const { return elements_; }
    const std::vector<uint32_t>& alts(uint32_t rule) const { return rule_alts_[rule]; }
    uint32_t root() const { return root_; }
    bool byte_in(uint32_t set, uint8_t b) const { return (sets_[set][b >> 6] >> (b & 63)) & 1; }

private:
    friend class GrammarBuilder;
    std::string source_;
    std::vector<Element> elements_;             // alternatives, each ended by kEnd
    std::vector<std::vector<uint32_t>> rule_alts_;  // per rule: start positions in elements_
    std::vector<std::array<uint64_t, 4>> sets_;     // byte sets of the terminals
    uint32_t root_ = 0;
};

// The vocabulary as the matcher sees it: each token's bytes, sorted, with shared-prefix
// lengths, built once per model. Tokens with no bytes (control tokens not rendered, unused
// entries) are never allowed by a grammar; end-of-generation tokens are allowed exactly where
// the grammar is complete.
class TokenVocab {
public:
    TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids);
    int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
    const std::string& bytes(int32_t id) const { return bytes_[id]; }
    const std::vector<int32_t>& eog_ids() const { return eog_; }
    bool is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_flag_[id]; }

private:
    friend class GrammarRuntime;
    std::vector<std::string> bytes_;
    std::vector<int32_t> eog_;
    std::vector<uint8_t> eog_flag_;
    std::vector<int32_t> sorted_;  // ids with bytes, by bytes
    std::vector<uint16_t> lcp_;    // lcp_[i]: common prefix of sorted_[i-1] and sorted_[i]
    size_t max_len_ = 0;
};

// A set of tokens, one bit each.
struct TokenMask {
    std::vector<uint64_t> bits;
    bool test(int32_t id) const { return (bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
    int count() const;
};

// The shared, growing state of one grammar on one vocabulary: the interned parse stacks, the
// step from each stack over a byte, and the token mask of every parser state seen so far.
// Requests with the same grammar share one runtime (on the engine thread), so a schema's masks
// are computed once, not once per request.
class GrammarRuntime {
public:
    GrammarRuntime(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab);

    // A parser state: sorted ids of interned stacks. kAccept is the empty stack (the grammar
    // is complete there).
    using State = std::vector<uint32_t>;
    static constexpr uint32_t kAccept = 0;

    State initial();
    // The state after `bytes`; empty when the grammar cannot read them.
    State advance(const State& s, std::string_view bytes);
    // Tokens allowed in `s` (end-of-generation ones iff `s` can end). Cached per state.
    const TokenMask& mask(const State& s);
    bool has_mask(const State& s) const { return masks_.count(s) != 0; }
    static bool can_end(const State& s) { return !s.empty() && s.front() == kAccept; }
    static bool must_end(const State& s) { return s.size() == 1 && s.front() == kAccept; }

    const Grammar& grammar() const { return *grammar_; }
    const TokenVocab& vocab() const { return *vocab_; }
    size_t n_stacks() const { return nodes_.size(); }
    size_t n_cached_masks() const { return masks_.size(); }

private:
    struct Node {
        uint32_t pos;     // element to match next (a terminal, for stacks in a state)
        uint32_t parent;  // the rest of the stack; kNone at the bottom
    };
    static constexpr uint32_t kNone = 0xFFFFFFFFu;
    uint32_t intern(uint32_t pos, uint32_t parent);
    void expand(uint32_t pos, uint32_t parent, State& out);
    const State& next(uint32_t node);  // the stacks after the node's terminal is read
    void step(const State& s, uint8_t b, State& out);
    void compute_mask(const State& s, TokenMask& m);

    struct StateHash {
        size_t operator()(const State& s) const;
    };
    std::shared_ptr<const Grammar> grammar_;
    std::shared_ptr<const TokenVocab> vocab_;
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, uint32_t> node_ids_;
    std::deque<State> next_;  // per stack: next(); a deque, so references survive growth
    std::vector<uint8_t> next_done_;
    std::unordered_map<State, TokenMask, StateHash> masks_;
    std::vector<std::pair<uint32_t, uint32_t>> work_;  // expand()'s work list
    // compute_mask() runs on interned states with a byte transition table each (a DFA built
    // lazily), so walking the vocabulary is mostly array lookups.
    static constexpr uint32_t kUnknown = 0xFFFFFFFFu, kDead = 0xFFFFFFFEu;
    uint32_t state_id(const State& s);
    uint32_t transition(uint32_t sid, uint8_t b);
    std::unordered_map<State, uint32_t, StateHash> state_ids_;
    std::deque<State> states_;
    std::vector<std::array<uint32_t, 256>> trans_;
    std::vector<uint32_t> depth_sids_;  // compute_mask()'s per-depth states
    State scratch_;
};

// One sequence's position in a grammar.
class Matcher {
public:
    explicit Matcher(std::shared_ptr<GrammarRuntime> rt);
    // Reads a token's bytes (an end-of-generation token ends the text; false where not
    // allowed, and then nothing changes).
    bool accept_token(int32_t id);
    bool accept_bytes(std::string_view bytes);
    bool can_end() const { return GrammarRuntime::can_end(state_); }
    bool must_end() const { return GrammarRuntime::must_end(state_); }
    bool failed() const { return state_.empty(); }
    // Sets every token the grammar does not allow now to -inf; false when it allows none.
    bool apply(std::span<float> logits);
    const TokenMask& mask() { return rt_->mask(state_); }
    bool mask_ready() const { return rt_->has_mask(state_); }

private:
    std::shared_ptr<GrammarRuntime> rt_;
    GrammarRuntime::State state_;
};

}  // namespace ferrox::grammar
