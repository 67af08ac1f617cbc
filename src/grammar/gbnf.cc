// GBNF parsing and compilation into the byte-level form of grammar.h.

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/utf8.h"
#include "grammar/grammar.h"

namespace ferrox::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct Sym {
    Grammar::Kind kind;  // kTerminal or kRef
    uint32_t value;
};
using Seq = std::vector<Sym>;

struct CodeRange {
    uint32_t lo, hi;
};

// One UTF-8 byte-range sequence: every byte string b0 b1 ... with lo[k] <= bk <= hi[k].
struct ByteSeq {
    int n = 0;
    uint8_t lo[4], hi[4];
};

// Splits [lo, hi] (code points of one encoded length n) into byte-range products.
void split_utf8(uint32_t lo, uint32_t hi, int n, std::vector<ByteSeq>& out) {
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split_utf8(lo, lo | m, n, out);
                split_utf8((lo | m) + 1, hi, n, out);
                return;
            }
            if ((hi & m) != m) {
                split_utf8(lo, (hi & ~m) - 1, n, out);
                split_utf8(hi & ~m, hi, n, out);
                return;
            }
        }
    }
    std::string a, b;
    utf8_append(a, lo);
    utf8_append(b, hi);
    ByteSeq s;
    s.n = n;
    for (int k = 0; k < n; ++k) {
        s.lo[k] = static_cast<uint8_t>(a[k]);
        s.hi[k] = static_cast<uint8_t>(b[k]);
    }
    out.push_back(s);
}

std::vector<ByteSeq> utf8_sequences(const std::vector<CodeRange>& ranges) {
    static constexpr uint32_t kBounds[4][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, 0x10FFFF}};
    std::vector<ByteSeq> out;
    for (CodeRange r : ranges) {
        for (int n = 1; n <= 4; ++n) {
            uint32_t lo = std::max(r.lo, kBounds[n - 1][0]);
            uint32_t hi = std::min(r.hi, kBounds[n - 1][1]);
            if (lo > hi) continue;
            if (n == 3) {  // no surrogates
                if (lo < 0xD800 && hi >= 0xD800) {
                    split_utf8(lo, 0xD7FF, 3, out);
                    lo = 0xE000;
                }
                if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
                if (lo > hi) continue;
            }
            split_utf8(lo, hi, n, out);
        }
    }
    return out;
}

// Sorted, merged, and complemented when negated.
std::vector<CodeRange> normalize(std::vector<CodeRange> r, bool negate) {
    std::sort(r.begin(), r.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
    std::vector<CodeRange> m;
    for (CodeRange x : r) {
        if (!m.empty() && x.lo <= m.back().hi + 1) {
            m.back().hi = std::max(m.back().hi, x.hi);
        } else {
            m.push_back(x);
        }
    }
    if (!negate) return m;
    std::vector<CodeRange> c;
    uint32_t next = 0;
    for (CodeRange x : m) {
        if (x.lo > next) c.push_back({next, x.lo - 1});
        next = x.hi + 1;
    }
    if (next <= kMaxCodePoint) c.push_back({next, kMaxCodePoint});
    return c;
}

}  // namespace

class GrammarBuilder {
public:
    GrammarBuilder(std::string_view src, const GrammarLimits& limits) : src_(src), limits_(limits) {}

    Expected<std::shared_ptr<const Grammar>> build(std::string_view root_name) {
        skip(true);
        while (p_ < src_.size()) {
            Status st = parse_rule();
            if (!st.is_ok()) return st;
            skip(true);
        }
        for (const auto& [name, id] : ids_) {
            if (!defined_[id]) return fail_plain("rule '" + name + "' is used but never defined");
        }
        auto it = ids_.find(std::string(root_name));
        if (it == ids_.end()) return fail_plain("the grammar has no rule '" + std::string(root_name) + "'");
        FERROX_RETURN_IF_ERROR(check_left_recursion());

        auto g = std::make_shared<Grammar>();
        g->source_ = std::string(src_);
        g->root_ = it->second;
        g->sets_ = std::move(sets_);
        g->rule_alts_.resize(rules_.size());
        size_t n_elems = 0;
        for (const auto& alts : rules_) {
            for (const auto& seq : alts) n_elems += seq.size() + 1;
        }
        if (n_elems > static_cast<size_t>(limits_.max_elements)) {
            return fail_plain("the grammar is too large (" + std::to_string(n_elems) + " elements, at most " +
                              std::to_string(limits_.max_elements) + ")");
        }
        g->elements_.reserve(n_elems);
        for (size_t r = 0; r < rules_.size(); ++r) {
            for (const auto& seq : rules_[r]) {
                g->rule_alts_[r].push_back(static_cast<uint32_t>(g->elements_.size()));
                for (Sym s : seq) g->elements_.push_back({s.kind, s.value});
                g->elements_.push_back({Grammar::kEnd, 0});
            }
        }
        return std::shared_ptr<const Grammar>(std::move(g));
    }

private:
    // ---- errors ----
    Status fail(const std::string& what) const {
        int line = 1 + static_cast<int>(std::count(src_.begin(), src_.begin() + std::min(p_, src_.size()), '\n'));
        return invalid_argument("grammar line " + std::to_string(line) + ": " + what);
    }
    static Status fail_plain(const std::string& what) { return invalid_argument("grammar: " + what); }

    // ---- rules ----
    Expected<uint32_t> new_rule() {
        if (static_cast<int>(rules_.size()) >= limits_.max_rules) {
            return fail("too many rules (at most " + std::to_string(limits_.max_rules) + ")");
        }
        rules_.emplace_back();
        defined_.push_back(true);
        return static_cast<uint32_t>(rules_.size() - 1);
    }
    Expected<uint32_t> named_rule(const std::string& name) {
        auto it = ids_.find(name);
        if (it != ids_.end()) return it->second;
        auto r = new_rule();
        if (!r.has_value()) return r.status();
        defined_[*r] = false;
        ids_.emplace(name, *r);
        return *r;
    }
    uint32_t byte_set(const std::array<uint64_t, 4>& s) {
        auto it = set_ids_.find(s);
        if (it != set_ids_.end()) return it->second;
        sets_.push_back(s);
        const auto id = static_cast<uint32_t>(sets_.size() - 1);
        set_ids_.emplace(s, id);
        return id;
    }
    Sym byte_terminal(uint8_t lo, uint8_t hi) {
        std::array<uint64_t, 4> s{};
        for (int b = lo; b <= hi; ++b) s[b >> 6] |= uint64_t{1} << (b & 63);
        return {Grammar::kTerminal, byte_set(s)};
    }
    Status add_elements(size_t n) {
        n_syms_ += n;
        if (n_syms_ > static_cast<size_t>(limits_.max_elements)) {
            return fail("the grammar is too large (more than " + std::to_string(limits_.max_elements) + " elements)");
        }
        return Status();
    }

    // ---- lexing ----
    bool at_end() const { return p_ >= src_.size(); }
    char cur() const { return at_end() ? '\0' : src_[p_]; }
    void skip(bool newline_ok) {
        while (!at_end()) {
            const char c = src_[p_];
            if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
                ++p_;
            } else if (c == '#') {
                while (!at_end() && src_[p_] != '\n' && src_[p_] != '\r') ++p_;
            } else {
                break;
            }
        }
    }
    static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }
    std::string parse_name() {
        const size_t b = p_;
        while (!at_end() && is_name_char(src_[p_])) ++p_;
        return std::string(src_.substr(b, p_ - b));
    }
    // One UTF-8 character of the source.
    Expected<uint32_t> decode_char() {
        const auto c = static_cast<uint8_t>(src_[p_]);
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || p_ + n > src_.size()) return fail("invalid UTF-8 in the grammar");
        uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; k < n; ++k) {
            const auto d = static_cast<uint8_t>(src_[p_ + k]);
            if ((d & 0xC0) != 0x80) return fail("invalid UTF-8 in the grammar");
            cp = (cp << 6) | (d & 0x3F);
        }
        p_ += n;
        return cp;
    }
    Expected<uint32_t> hex(int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
            if (at_end()) return fail("unfinished escape");
            const char c = src_[p_++];
            int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
            if (d < 0) return fail("bad hex digit in escape");
            v = v * 16 + static_cast<uint32_t>(d);
        }
        if (v > kMaxCodePoint) return fail("escape beyond U+10FFFF");
        return v;
    }
    // A character inside a literal or a class, escapes decoded.
    Expected<uint32_t> parse_char() {
        if (at_end()) return fail("unexpected end of grammar");
        if (src_[p_] != '\\') return decode_char();
        ++p_;
        if (at_end()) return fail("unfinished escape");
        const char e = src_[p_++];
        switch (e) {
            case 'n': return uint32_t{'\n'};
            case 'r': return uint32_t{'\r'};
            case 't': return uint32_t{'\t'};
            case 'x': return hex(2);
            case 'u': return hex(4);
            case 'U': return hex(8);
            default:
                if (std::strchr("\\\"'[]-^/.()|*+?{}", e) != nullptr && e != '\0') return static_cast<uint32_t>(e);
                return fail(std::string("unknown escape \\") + e);
        }
    }

    // ---- syntax ----
    Status parse_rule() {
        const size_t b = p_;
        std::string name = parse_name();
        if (name.empty()) return fail("expected a rule name");
        skip(false);
        if (src_.substr(p_, 3) != "::=") {
            p_ = b;
            return fail("expected '::=' after '" + name + "'");
        }
        p_ += 3;
        skip(true);
        auto id = named_rule(name);
        if (!id.has_value()) return id.status();
        if (defined_[*id] && !rules_[*id].empty()) return fail("rule '" + name + "' is defined twice");
        defined_[*id] = true;
        FERROX_RETURN_IF_ERROR(parse_alternatives(*id, 0));
        skip(false);
        if (!at_end() && cur() != '\n' && cur() != '\r') {
            return fail(std::string("unexpected '") + cur() + "'");
        }
        return Status();
    }

    Status parse_alternatives(uint32_t rule, int depth) {
        if (depth > limits_.max_nesting) return fail("parentheses nested too deep");
        for (;;) {
            Seq seq;
            FERROX_RETURN_IF_ERROR(parse_sequence(seq, depth));
            rules_[rule].push_back(std::move(seq));
            // Another alternative follows '|', which may start the next line (even at the top
            // level: no rule starts with '|').
            const size_t save = p_;
            skip(true);
            if (cur() != '|') {
                if (depth == 0) p_ = save;  // the rule ends at its newline
                return Status();
            }
            ++p_;
            skip(true);
        }
    }

    Status parse_sequence(Seq& seq, int depth) {
        for (;;) {
            skip(depth > 0);
            if (at_end()) return Status();
            const char c = cur();
            const size_t item_begin = seq.size();
            if (c == '"') {
                ++p_;
                std::string bytes;
                while (!at_end() && cur() != '"') {
                    auto cp = parse_char();
                    if (!cp.has_value()) return cp.status();
                    utf8_append(bytes, *cp);
                }
                if (at_end()) return fail("unterminated string literal");
                ++p_;
                FERROX_RETURN_IF_ERROR(add_elements(bytes.size()));
                for (char ch : bytes) {
                    const auto u = static_cast<uint8_t>(ch);
                    seq.push_back(byte_terminal(u, u));
                }
            } else if (c == '[') {
                ++p_;
                bool negate = false;
                if (cur() == '^') {
                    negate = true;
                    ++p_;
                }
                std::vector<CodeRange> ranges;
                while (!at_end() && cur() != ']') {
                    auto lo = parse_char();
                    if (!lo.has_value()) return lo.status();
                    uint32_t hi = *lo;
                    if (cur() == '-' && p_ + 1 < src_.size() && src_[p_ + 1] != ']') {
                        ++p_;
                        auto h = parse_char();
                        if (!h.has_value()) return h.status();
                        hi = *h;
                        if (hi < *lo) return fail("character range out of order");
                    }
                    ranges.push_back({*lo, hi});
                }
                if (at_end()) return fail("unterminated character class");
                ++p_;
                auto s = char_class(normalize(std::move(ranges), negate));
                if (!s.has_value()) return s.status();
                seq.push_back(*s);
            } else if (c == '.') {
                ++p_;
                auto s = char_class({{0, kMaxCodePoint}});
                if (!s.has_value()) return s.status();
                seq.push_back(*s);
            } else if (c == '(') {
                ++p_;
                auto sub = new_rule();
                if (!sub.has_value()) return sub.status();
                FERROX_RETURN_IF_ERROR(parse_alternatives(*sub, depth + 1));
                skip(true);
                if (cur() != ')') return fail("expected ')'");
                ++p_;
                FERROX_RETURN_IF_ERROR(add_elements(1));
                seq.push_back({Grammar::kRef, *sub});
            } else if (is_name_char(c)) {
                // A name followed by '::=' starts the next rule (only at the top level, after
                // a newline; skip(false) never crosses one, so this is a grammar error).
                std::string name = parse_name();
                auto id = named_rule(name);
                if (!id.has_value()) return id.status();
                FERROX_RETURN_IF_ERROR(add_elements(1));
                seq.push_back({Grammar::kRef, *id});
            } else {
                return Status();  // '|', ')', a newline at the top level, ...
            }
            FERROX_RETURN_IF_ERROR(parse_repetition(seq, item_begin, depth));
        }
    }

    // A class as one terminal when every character is one byte, else a rule of alternatives.
    Expected<Sym> char_class(const std::vector<CodeRange>& ranges) {
        if (ranges.empty()) return fail("empty character class");
        std::vector<ByteSeq> seqs = utf8_sequences(ranges);
        std::array<uint64_t, 4> single{};
        bool any_single = false;
        std::vector<ByteSeq> multi;
        for (const ByteSeq& s : seqs) {
            if (s.n == 1) {
                for (int b = s.lo[0]; b <= s.hi[0]; ++b) single[b >> 6] |= uint64_t{1} << (b & 63);
                any_single = true;
            } else {
                multi.push_back(s);
            }
        }
        if (multi.empty()) return Sym{Grammar::kTerminal, byte_set(single)};
        auto key = std::make_pair(single, std::vector<std::array<uint8_t, 8>>());
        for (const ByteSeq& s : multi) {
            std::array<uint8_t, 8> k{};
            for (int i = 0; i < s.n; ++i) k[2 * i] = s.lo[i], k[2 * i + 1] = s.hi[i];
            key.second.push_back(k);
        }
        auto it = class_rules_.find(key);
        if (it != class_rules_.end()) return Sym{Grammar::kRef, it->second};
        auto r = new_rule();
        if (!r.has_value()) return r.status();
        if (any_single) rules_[*r].push_back({Sym{Grammar::kTerminal, byte_set(single)}});
        for (const ByteSeq& s : multi) {
            Seq alt;
            for (int i = 0; i < s.n; ++i) alt.push_back(byte_terminal(s.lo[i], s.hi[i]));
            rules_[*r].push_back(std::move(alt));
        }
        FERROX_RETURN_IF_ERROR(add_elements(4 * multi.size() + 2));
        class_rules_.emplace(std::move(key), *r);
        return Sym{Grammar::kRef, *r};
    }

    Expected<long> parse_int() {
        const size_t b = p_;
        long v = 0;
        while (!at_end() && cur() >= '0' && cur() <= '9') {
            v = v * 10 + (cur() - '0');
            if (v > limits_.max_repeat) return fail("repetition count above " + std::to_string(limits_.max_repeat));
            ++p_;
        }
        if (p_ == b) return fail("expected a number in {m,n}");
        return v;
    }

    Status parse_repetition(Seq& seq, size_t item_begin, int depth) {
        const size_t save = p_;
        skip(depth > 0);
        const char c = cur();
        if (c != '*' && c != '+' && c != '?' && c != '{') {
            p_ = save;
            return Status();
        }
        ++p_;
        long m = 0, n = -1;  // n -1: unbounded
        if (c == '+') m = 1;
        if (c == '?') n = 1;
        if (c == '{') {
            skip(false);
            auto a = parse_int();
            if (!a.has_value()) return a.status();
            m = *a;
            skip(false);
            if (cur() == ',') {
                ++p_;
                skip(false);
                if (cur() != '}') {
                    auto b = parse_int();
                    if (!b.has_value()) return b.status();
                    n = *b;
                    if (n < m) return fail("{m,n} with n < m");
                }
            } else {
                n = m;
            }
            skip(false);
            if (cur() != '}') return fail("expected '}'");
            ++p_;
        }
        // The item as one symbol.
        Sym item;
        if (seq.size() - item_begin == 1) {
            item = seq.back();
        } else {
            auto r = new_rule();
            if (!r.has_value()) return r.status();
            rules_[*r].push_back(Seq(seq.begin() + static_cast<long>(item_begin), seq.end()));
            item = {Grammar::kRef, *r};
        }
        seq.resize(item_begin);
        FERROX_RETURN_IF_ERROR(add_elements(static_cast<size_t>(m) + 4 + (n > m ? 2 * static_cast<size_t>(n - m) : 0)));
        for (long k = 0; k < m; ++k) seq.push_back(item);
        if (n < 0) {  // star ::= item star | ""
            auto r = new_rule();
            if (!r.has_value()) return r.status();
            rules_[*r].push_back({item, Sym{Grammar::kRef, *r}});
            rules_[*r].push_back({});
            seq.push_back({Grammar::kRef, *r});
        } else if (n > m) {  // opt_k ::= item opt_{k-1} | ""
            uint32_t prev = 0;
            bool have_prev = false;
            for (long k = 0; k < n - m; ++k) {
                auto r = new_rule();
                if (!r.has_value()) return r.status();
                Seq alt{item};
                if (have_prev) alt.push_back({Grammar::kRef, prev});
                rules_[*r].push_back(std::move(alt));
                rules_[*r].push_back({});
                prev = *r;
                have_prev = true;
            }
            seq.push_back({Grammar::kRef, prev});
        }
        return Status();
    }

    // Left recursion (through nullable prefixes too) would make expansion loop forever.
    Status check_left_recursion() const {
        const size_t n = rules_.size();
        std::vector<uint8_t> nullable(n, 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < n; ++r) {
                if (nullable[r]) continue;
                for (const Seq& seq : rules_[r]) {
                    bool all = true;
                    for (Sym s : seq) {
                        if (s.kind == Grammar::kTerminal || !nullable[s.value]) {
                            all = false;
                            break;
                        }
                    }
                    if (all) {
                        nullable[r] = 1;
                        changed = true;
                        break;
                    }
                }
            }
        }
        std::vector<std::vector<uint32_t>> first(n);
        for (size_t r = 0; r < n; ++r) {
            for (const Seq& seq : rules_[r]) {
                for (Sym s : seq) {
                    if (s.kind == Grammar::kTerminal) break;
                    first[r].push_back(s.value);
                    if (!nullable[s.value]) break;
                }
            }
        }
        // Iterative DFS: 0 unvisited, 1 on the path, 2 done.
        std::vector<uint8_t> color(n, 0);
        std::vector<std::pair<uint32_t, size_t>> stack;
        for (size_t start = 0; start < n; ++start) {
            if (color[start]) continue;
            stack.push_back({static_cast<uint32_t>(start), 0});
            color[start] = 1;
            while (!stack.empty()) {
                auto& [r, i] = stack.back();
                if (i == first[r].size()) {
                    color[r] = 2;
                    stack.pop_back();
                    continue;
                }
                const uint32_t t = first[r][i++];
                if (color[t] == 1) return fail_plain("rule '" + rule_name(t) + "' is left-recursive");
                if (color[t] == 0) {
                    color[t] = 1;
                    stack.push_back({t, 0});
                }
            }
        }
        return Status();
    }

    std::string rule_name(uint32_t id) const {
        for (const auto& [name, i] : ids_) {
            if (i == id) return name;
        }
        return "(group)";
    }

    std::string_view src_;
    GrammarLimits limits_;
    size_t p_ = 0;
    size_t n_syms_ = 0;
    std::vector<std::vector<Seq>> rules_;
    std::vector<bool> defined_;
    std::map<std::string, uint32_t> ids_;
    std::vector<std::array<uint64_t, 4>> sets_;
    std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
    std::map<std::pair<std::array<uint64_t, 4>, std::vector<std::array<uint8_t, 8>>>, uint32_t> class_rules_;
};

Expected<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view gbnf, std::string_view root,
                                                        const GrammarLimits& limits) {
    GrammarBuilder b(gbnf, limits);
    return b.build(root);
}

}  // namespace ferrox::grammar
