// The grammar runtime: interned parse stacks, byte steps, token masks.
//
// A parse stack is a chain of frames (position of the next element, parent frame), interned so
// that equal stacks have one id; a parser state is the sorted set of stacks that are alive.
// Because stacks are interned, "the stacks after this stack reads its terminal" is a function
// of the stack id alone (it does not depend on which byte of the terminal's set was read), so
// it is computed once per stack and a byte step costs one set test and a lookup. Token masks
// walk the vocabulary sorted by bytes, reusing the states of shared prefixes, and are cached per
// parser state.

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

#include "grammar/grammar.h"

namespace ferrox::grammar {

int TokenMask::count() const {
    int n = 0;
    for (uint64_t w : bits) n += std::popcount(w);
    return n;
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eog_ids)
    : bytes_(std::move(token_bytes)), eog_(std::move(eog_ids)), eog_flag_(bytes_.size(), 0) {
    for (int32_t id : eog_) {
        if (id >= 0 && id < n_vocab()) eog_flag_[id] = 1;
    }
    for (int32_t id = 0; id < n_vocab(); ++id) {
        if (!bytes_[id].empty() && !eog_flag_[id]) sorted_.push_back(id);
    }
    std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
    lcp_.assign(sorted_.size(), 0);
    for (size_t i = 0; i < sorted_.size(); ++i) {
        const std::string& t = bytes_[sorted_[i]];
        max_len_ = std::max(max_len_, t.size());
        if (i == 0) continue;
        const std::string& p = bytes_[sorted_[i - 1]];
        size_t l = 0;
        while (l < p.size() && l < t.size() && p[l] == t[l] && l < 0xFFFF) ++l;
        lcp_[i] = static_cast<uint16_t>(l);
    }
}

size_t GrammarRuntime::StateHash::operator()(const State& s) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t v : s) h = (h ^ v) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
}

GrammarRuntime::GrammarRuntime(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
    nodes_.push_back({kNone, kNone});  // kAccept: the empty stack
    next_.emplace_back();
    next_done_.push_back(1);
}

uint32_t GrammarRuntime::intern(uint32_t pos, uint32_t parent) {
    const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
    auto [it, inserted] = node_ids_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
    if (inserted) {
        nodes_.push_back({pos, parent});
        next_.emplace_back();
        next_done_.push_back(0);
    }
    return it->second;
}

// Appends the stacks reached from frame (pos, parent) whose top is a terminal, and kAccept
// where the whole stack can pop. Terminates because the grammar has no left recursion.
void GrammarRuntime::expand(uint32_t pos, uint32_t parent, State& out) {
    const auto& els = grammar_->elements();
    work_.clear();
    work_.push_back({pos, parent});
    while (!work_.empty()) {
        const auto [p, par] = work_.back();
        work_.pop_back();
        const Grammar::Element e = els[p];
        switch (e.kind) {
            case Grammar::kEnd:
                if (par == kNone) {
                    out.push_back(kAccept);
                } else {
                    work_.push_back({nodes_[par].pos, nodes_[par].parent});
                }
                break;
            case Grammar::kTerminal:
                out.push_back(intern(p, par));
                break;
            case Grammar::kRef: {
                // A reference in tail position continues straight into the parent: loops
                // written as right recursion (x*) do not grow the stack.
                const uint32_t cont = els[p + 1].kind == Grammar::kEnd ? par : intern(p + 1, par);
                for (uint32_t alt : grammar_->alts(e.value)) work_.push_back({alt, cont});
                break;
            }
        }
    }
}

const GrammarRuntime::State& GrammarRuntime::next(uint32_t node) {
    if (!next_done_[node]) {
        State out;
        expand(nodes_[node].pos + 1, nodes_[node].parent, out);
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
        next_[node] = std::move(out);  // (a deque: references to other entries stay valid)
        next_done_[node] = 1;
    }
    return next_[node];
}

GrammarRuntime::State GrammarRuntime::initial() {
    State s;
    for (uint32_t alt : grammar_->alts(grammar_->root())) expand(alt, kNone, s);
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
}

void GrammarRuntime::step(const State& s, uint8_t b, State& out) {
    out.clear();
    const auto& els = grammar_->elements();
    int hits = 0;
    for (uint32_t node : s) {
        if (node == kAccept) continue;
        if (!grammar_->byte_in(els[nodes_[node].pos].value, b)) continue;
        const State& n = next(node);
        out.insert(out.end(), n.begin(), n.end());
        ++hits;
    }
    if (hits > 1) {
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
    }
}

GrammarRuntime::State GrammarRuntime::advance(const State& s, std::string_view bytes) {
    State cur = s, nxt;
    for (char c : bytes) {
        step(cur, static_cast<uint8_t>(c), nxt);
        std::swap(cur, nxt);
        if (cur.empty()) break;
    }
    return cur;
}

uint32_t GrammarRuntime::state_id(const State& s) {
    auto [it, inserted] = state_ids_.try_emplace(s, static_cast<uint32_t>(states_.size()));
    if (inserted) {
        states_.push_back(s);
        trans_.emplace_back();
        trans_.back().fill(kUnknown);
    }
    return it->second;
}

uint32_t GrammarRuntime::transition(uint32_t sid, uint8_t b) {
    uint32_t t = trans_[sid][b];
    if (t != kUnknown) return t;
    step(states_[sid], b, scratch_);
    t = scratch_.empty() ? kDead : state_id(scratch_);
    trans_[sid][b] = t;
    return t;
}

void GrammarRuntime::compute_mask(const State& s, TokenMask& m) {
    const TokenVocab& v = *vocab_;
    m.bits.assign((static_cast<size_t>(v.n_vocab()) + 63) / 64, 0);
    // The transition tables stop growing past ~64 MiB; the cache then starts over (states are
    // not referenced from outside compute_mask, so this is always safe).
    if (states_.size() > 65536) {
        state_ids_.clear();
        states_.clear();
        trans_.clear();
    }
    if (depth_sids_.size() < v.max_len_ + 1) depth_sids_.resize(v.max_len_ + 1);
    depth_sids_[0] = state_id(s);
    size_t ok_depth = 0;              // depth_sids_[0..ok_depth] hold the last token's prefixes
    size_t fail_at = SIZE_MAX;        // the last token died after this many bytes
    for (size_t i = 0; i < v.sorted_.size(); ++i) {
        const int32_t id = v.sorted_[i];
        const std::string& t = v.bytes_[id];
        const size_t l = v.lcp_[i];
        if (fail_at <= l) continue;  // shares the prefix that already failed
        bool good = true;
        for (size_t k = std::min(l, ok_depth); k < t.size(); ++k) {
            const uint32_t nx = transition(depth_sids_[k], static_cast<uint8_t>(t[k]));
            if (nx == kDead) {
                fail_at = k + 1;
                ok_depth = k;
                good = false;
                break;
            }
            depth_sids_[k + 1] = nx;
        }
        if (good) {
            m.bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
            ok_depth = t.size();
            fail_at = SIZE_MAX;
        }
    }
    if (can_end(s)) {
        for (int32_t id : v.eog_) {
            if (id >= 0 && id < v.n_vocab()) m.bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
        }
    }
}

const TokenMask& GrammarRuntime::mask(const State& s) {
    auto it = masks_.find(s);
    if (it != masks_.end()) return it->second;
    // At most ~64 MiB of masks per runtime; past that the cache starts over.
    const size_t mask_bytes = (static_cast<size_t>(vocab_->n_vocab()) + 7) / 8 + 64;
    if ((masks_.size() + 1) * mask_bytes > (size_t{64} << 20)) masks_.clear();
    TokenMask m;
    compute_mask(s, m);
    return masks_.emplace(s, std::move(m)).first->second;
}

Matcher::Matcher(std::shared_ptr<GrammarRuntime> rt) : rt_(std::move(rt)), state_(rt_->initial()) {}

bool Matcher::accept_bytes(std::string_view bytes) {
    GrammarRuntime::State s = rt_->advance(state_, bytes);
    if (s.empty()) return false;
    state_ = std::move(s);
    return true;
}

bool Matcher::accept_token(int32_t id) {
    const TokenVocab& v = rt_->vocab();
    if (id < 0 || id >= v.n_vocab()) return false;
    if (v.is_eog(id)) {
        if (!can_end()) return false;
        state_ = {GrammarRuntime::kAccept};
        return true;
    }
    const std::string& b = v.bytes(id);
    if (b.empty()) return false;
    return accept_bytes(b);
}

bool Matcher::apply(std::span<float> logits) {
    const TokenMask& m = mask();
    bool any = false;
    for (uint64_t w : m.bits) any |= w != 0;
    const size_t n = std::min(logits.size(), m.bits.size() * 64);
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (size_t w = 0; w * 64 < n; ++w) {
        const uint64_t bits = m.bits[w];
        if (bits == ~uint64_t{0}) continue;
        const size_t end = std::min(n, w * 64 + 64);
        for (size_t i = w * 64; i < end; ++i) {
            if (!((bits >> (i & 63)) & 1)) logits[i] = kNegInf;
        }
    }
    for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
    return any;
}

}  // namespace ferrox::grammar
