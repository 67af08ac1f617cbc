#include "grammar/regex.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/utf8.h"

namespace ferrox::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxDepth = 100;  // nested groups
constexpr int kUnbounded = -1;

// Sorted, disjoint, inclusive code point ranges; never contains surrogates.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalize(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (auto [lo, hi] : r) {
        if (!out.empty() && lo <= out.back().second + 1) {
            out.back().second = std::max(out.back().second, hi);
        } else {
            out.push_back({lo, hi});
        }
    }
    Ranges clean;  // cut out U+D800..U+DFFF: not characters, not encodable in UTF-8
    for (auto [lo, hi] : out) {
        if (hi < 0xD800 || lo > 0xDFFF) {
            clean.push_back({lo, hi});
            continue;
        }
        if (lo < 0xD800) clean.push_back({lo, 0xD7FF});
        if (hi > 0xDFFF) clean.push_back({0xE000, hi});
    }
    return clean;
}

Ranges complement(const Ranges& r) {
    Ranges out;
    uint32_t next = 0;
    for (auto [lo, hi] : r) {
        if (lo > next) out.push_back({next, lo - 1});
        next = hi + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return normalize(out);
}

Ranges intersect(const Ranges& a, const Ranges& b) {
    Ranges out;
    for (auto [alo, ahi] : a) {
        for (auto [blo, bhi] : b) {
            uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
            if (lo <= hi) out.push_back({lo, hi});
        }
    }
    return normalize(out);
}

Ranges digit_set() { return {{'0', '9'}}; }
Ranges word_set() { return normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
// The class escapes are the intersection of ECMAScript's meaning (JSON Schema's) and Python's
// Unicode-aware one (what PyPI jsonschema and most validators run), so that a string the grammar
// accepts passes either: \s leaves out U+FEFF (not white space to Python); \S also leaves out
// U+001C..U+001F and U+0085 (white space to Python); \D and \W match ASCII only (Python's \d
// and \w take in every Unicode digit and letter).
Ranges space_set() {
    return normalize({{'\t', '\r'},
                      {' ', ' '},
                      {0xA0, 0xA0},
                      {0x1680, 0x1680},
                      {0x2000, 0x200A},
                      {0x2028, 0x2029},
                      {0x202F, 0x202F},
                      {0x205F, 0x205F},
                      {0x3000, 0x3000}});
}
Ranges not_space_set() {
    Ranges r = space_set();
    r.push_back({0x1C, 0x1F});
    r.push_back({0x85, 0x85});
    r.push_back({0xFEFF, 0xFEFF});
    return complement(normalize(std::move(r)));
}
Ranges ascii_complement(const Ranges& r) { return intersect(complement(r), {{0, 0x7F}}); }
Ranges dot_set() { return complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})); }
Ranges universe() { return complement({}); }

struct Node;
using Seq = std::vector<Node>;
using Alt = std::vector<Seq>;

struct Node {
    enum Kind { kSet, kGroup, kStart, kEnd } kind = kSet;
    Ranges set;  // kSet
    Alt alts;    // kGroup
    int min = 1;
    int max = 1;  // kUnbounded for no limit
};

// UTF-8 to code points; false on malformed input.
bool decode_utf8(std::string_view s, std::u32string& out) {
    for (size_t i = 0; i < s.size();) {
        auto b = static_cast<uint8_t>(s[i]);
        int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
        if (n < 0 || i + static_cast<size_t>(n) >= s.size()) return false;
        uint32_t cp = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
        for (int k = 1; k <= n; ++k) {
            auto c = static_cast<uint8_t>(s[i + k]);
            if ((c >> 6) != 2) return false;
            cp = (cp << 6) | (c & 0x3F);
        }
        if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        out += static_cast<char32_t>(cp);
        i += static_cast<size_t>(n) + 1;
    }
    return true;
}

int hex_value(char32_t c) {
    if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
    return -1;
}

class Parser {
  public:
    Parser(std::u32string p, int max_repeat) : p_(std::move(p)), max_repeat_(max_repeat) {}

    Expected<Alt> parse() {
        FERROX_ASSIGN_OR_RETURN(Alt alt, parse_alt(0));
        if (pos_ < p_.size()) return error("unmatched ')'");
        return alt;
    }

  private:
    Status error(const std::string& what) const {
        return invalid_argument("regex: " + what + " at offset " + std::to_string(pos_));
    }
    bool at_end() const { return pos_ >= p_.size(); }
    char32_t peek(size_t k = 0) const { return pos_ + k < p_.size() ? p_[pos_ + k] : 0; }

    Expected<Alt> parse_alt(int depth) {
        if (depth > kMaxDepth) return error("groups nested too deeply");
        Alt alt;
        while (true) {
            FERROX_ASSIGN_OR_RETURN(Seq seq, parse_seq(depth));
            alt.push_back(std::move(seq));
            if (at_end() || peek() != '|') break;
            ++pos_;
        }
        return alt;
    }

    Expected<Seq> parse_seq(int depth) {
        Seq seq;
        while (!at_end() && peek() != '|' && peek() != ')') {
            FERROX_ASSIGN_OR_RETURN(Node node, parse_atom(depth));
            FERROX_RETURN_IF_ERROR(parse_quantifier(node));
            seq.push_back(std::move(node));
        }
        return seq;
    }

    // {m}, {m,} or {m,n} at pos_; false (pos_ unchanged) if the text is not one.
    bool read_braces(int& m, int& n) {
        size_t p = pos_ + 1;
        auto number = [&](long& v) {
            size_t start = p;
            v = 0;
            while (p < p_.size() && p_[p] >= '0' && p_[p] <= '9') {
                v = std::min<long>(v * 10 + (p_[p] - '0'), 1L << 40);
                ++p;
            }
            return p > start;
        };
        long lo = 0, hi = 0;
        if (!number(lo)) return false;
        bool comma = false, has_hi = false;
        if (p < p_.size() && p_[p] == ',') {
            comma = true;
            ++p;
            has_hi = number(hi);
        }
        if (p >= p_.size() || p_[p] != '}') return false;
        pos_ = p + 1;
        m = static_cast<int>(std::min<long>(lo, 1L << 30));
        n = !comma ? m : has_hi ? static_cast<int>(std::min<long>(hi, 1L << 30)) : kUnbounded;
        return true;
    }

    Status parse_quantifier(Node& node) {
        if (at_end()) return Status::ok();
        char32_t c = peek();
        int m = 1, n = 1;
        if (c == '*') {
            m = 0, n = kUnbounded, ++pos_;
        } else if (c == '+') {
            m = 1, n = kUnbounded, ++pos_;
        } else if (c == '?') {
            m = 0, n = 1, ++pos_;
        } else if (c == '{') {
            if (!read_braces(m, n)) return Status::ok();  // a literal '{' follows
        } else {
            return Status::ok();
        }
        if (node.kind == Node::kStart || node.kind == Node::kEnd) return error("quantified anchor");
        if (n != kUnbounded && m > n) return error("numbers out of order in {m,n}");
        if (m > max_repeat_ || n > max_repeat_) {
            return error("repetition count above " + std::to_string(max_repeat_));
        }
        if (!at_end() && peek() == '?') ++pos_;  // lazy: the same language
        if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?')) {
            return error("nothing to repeat");
        }
        node.min = m;
        node.max = n;
        return Status::ok();
    }

    static Node set_node(Ranges r) {
        Node n;
        n.kind = Node::kSet;
        n.set = normalize(std::move(r));
        return n;
    }

    Expected<Node> parse_atom(int depth) {
        char32_t c = peek();
        switch (c) {
            case '(':
                return parse_group(depth);
            case '[':
                return parse_class();
            case '.':
                ++pos_;
                return set_node(dot_set());
            case '^': {
                ++pos_;
                Node n;
                n.kind = Node::kStart;
                return n;
            }
            case '$': {
                ++pos_;
                Node n;
                n.kind = Node::kEnd;
                return n;
            }
            case '\\':
                return parse_escape();
            case '*':
            case '+':
            case '?':
                return error("nothing to repeat");
            case '{': {
                int m, n;
                size_t save = pos_;
                if (read_braces(m, n)) {
                    pos_ = save;
                    return error("nothing to repeat");
                }
                ++pos_;
                return set_node({{c, c}});
            }
            default:
                ++pos_;
                return set_node({{c, c}});
        }
    }

    Expected<Node> parse_group(int depth) {
        ++pos_;  // (
        if (peek() == '?') {
            char32_t a = peek(1), b = peek(2);
            if (a == ':') {
                pos_ += 2;
            } else if (a == '=' || a == '!') {
                return error("lookahead (?" + std::string(1, static_cast<char>(a)) +
                             " is not supported");
            } else if (a == '<' && (b == '=' || b == '!')) {
                return error("lookbehind (?<" + std::string(1, static_cast<char>(b)) +
                             " is not supported");
            } else if (a == '<') {  // named capturing group: the name does not matter here
                size_t p = pos_ + 2;
                while (p < p_.size() && p_[p] != '>') ++p;
                if (p >= p_.size()) return error("unterminated group name");
                pos_ = p + 1;
            } else {
                return error("group modifiers and inline flags (?...) are not supported");
            }
        }
        FERROX_ASSIGN_OR_RETURN(Alt alt, parse_alt(depth + 1));
        if (at_end() || peek() != ')') return error("missing ')'");
        ++pos_;
        Node n;
        n.kind = Node::kGroup;
        n.alts = std::move(alt);
        return n;
    }

    // After a backslash (pos_ at the escaped character): a class escape (\d ...) or a single
    // character. `in_class`: \b is backspace there.
    Expected<Ranges> parse_escaped(bool in_class) {
        if (at_end()) return error("pattern ends with '\\'");
        char32_t c = peek();
        ++pos_;
        auto one = [](uint32_t cp) { return Ranges{{cp, cp}}; };
        switch (c) {
            case 'd':
                return digit_set();
            case 'D':
                return ascii_complement(digit_set());
            case 'w':
                return word_set();
            case 'W':
                return ascii_complement(word_set());
            case 's':
                return space_set();
            case 'S':
                return not_space_set();
            case 'n':
                return one('\n');
            case 'r':
                return one('\r');
            case 't':
                return one('\t');
            case 'f':
                return one('\f');
            case 'v':
                return one('\v');
            case 'b':
                if (in_class) return one('\b');
                --pos_;
                return error("word boundary \\b is not supported");
            case 'B':
                --pos_;
                return error("word boundary \\B is not supported");
            case 'p':
            case 'P':
                --pos_;
                return error("Unicode property escapes \\p{...} are not supported");
            case 'k':
                --pos_;
                return error("backreference \\k<name> is not supported");
            case '0':
                if (peek() >= '0' && peek() <= '9') return error("octal escapes are not supported");
                return one(0);
            case 'c': {
                char32_t l = peek();
                if ((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')) {
                    ++pos_;
                    return one(static_cast<uint32_t>(l) & 31);
                }
                return one('\\');  // Annex B: "\c" not followed by a letter is a backslash and 'c'
            }
            case 'x': {
                int h = hex_value(peek()), l = hex_value(peek(1));
                if (h < 0 || l < 0) return one('x');
                pos_ += 2;
                return one(static_cast<uint32_t>(h * 16 + l));
            }
            case 'u': {
                if (peek() == '{') {
                    size_t p = pos_ + 1;
                    uint32_t v = 0;
                    while (p < p_.size() && hex_value(p_[p]) >= 0 && v <= kMaxCodePoint) {
                        v = v * 16 + static_cast<uint32_t>(hex_value(p_[p]));
                        ++p;
                    }
                    if (p < p_.size() && p_[p] == '}' && p > pos_ + 1 && v <= kMaxCodePoint) {
                        pos_ = p + 1;
                        return one(v);
                    }
                    return error("malformed \\u{...} escape");
                }
                uint32_t v = 0;
                for (int k = 0; k < 4; ++k) {
                    int h = hex_value(peek(k));
                    if (h < 0) return one('u');
                    v = v * 16 + static_cast<uint32_t>(h);
                }
                pos_ += 4;
                if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
                    uint32_t lo = 0;
                    bool ok = true;
                    for (int k = 0; k < 4; ++k) {
                        int h = hex_value(peek(2 + k));
                        if (h < 0) ok = false;
                        lo = lo * 16 + static_cast<uint32_t>(std::max(h, 0));
                    }
                    if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
                        pos_ += 6;
                        return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
                    }
                }
                if (v >= 0xD800 && v <= 0xDFFF) return error("lone surrogate escape");
                return one(v);
            }
            default:
                if (c >= '1' && c <= '9') {
                    --pos_;
                    return error("backreferences are not supported");
                }
                return one(static_cast<uint32_t>(c));  // identity escape: \. \* \/ ...
        }
    }

    Expected<Node> parse_escape() {
        ++pos_;  // backslash
        FERROX_ASSIGN_OR_RETURN(Ranges r, parse_escaped(false));
        return set_node(std::move(r));
    }

    Expected<Node> parse_class() {
        ++pos_;  // [
        bool negate = false;
        if (peek() == '^') {
            negate = true;
            ++pos_;
        }
        Ranges r;
        while (true) {
            if (at_end()) return error("missing ']'");
            if (peek() == ']') {
                ++pos_;
                break;
            }
            // One class atom: a single character (`single`) or a set (\d ...).
            Ranges a;
            bool single = true;
            auto atom = [&](Ranges& out, bool& is_single) -> Status {
                if (peek() == '\\') {
                    ++pos_;
                    FERROX_ASSIGN_OR_RETURN(out, parse_escaped(true));
                    is_single = out.size() == 1 && out[0].first == out[0].second;
                } else {
                    out = {{peek(), peek()}};
                    is_single = true;
                    ++pos_;
                }
                return Status::ok();
            };
            FERROX_RETURN_IF_ERROR(atom(a, single));
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < p_.size()) {
                ++pos_;  // -
                Ranges b;
                bool b_single = true;
                FERROX_RETURN_IF_ERROR(atom(b, b_single));
                if (single && b_single) {
                    if (a[0].first > b[0].first) return error("range out of order in class");
                    r.push_back({a[0].first, b[0].first});
                } else {  // [\d-x]: the '-' is literal (Annex B)
                    r.insert(r.end(), a.begin(), a.end());
                    r.push_back({'-', '-'});
                    r.insert(r.end(), b.begin(), b.end());
                }
                continue;
            }
            r.insert(r.end(), a.begin(), a.end());
        }
        r = normalize(std::move(r));
        if (negate) r = complement(r);
        if (r.empty()) return error("character class matches nothing");
        return set_node(std::move(r));
    }

    std::u32string p_;
    size_t pos_ = 0;
    int max_repeat_;
};

std::string hex(uint32_t v, int digits, bool upper = true) {
    const char* d = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    std::string s(static_cast<size_t>(digits), '0');
    for (int i = digits - 1; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = d[v & 15];
    return s;
}

// One code point inside a GBNF [class].
std::string class_char(uint32_t cp) {
    if (cp >= 0x21 && cp <= 0x7E && cp != ']' && cp != '[' && cp != '\\' && cp != '-' &&
        cp != '^' && cp != '"') {
        return std::string(1, static_cast<char>(cp));
    }
    if (cp < 0x80) return "\\x" + hex(cp, 2);
    if (cp < 0x10000) return "\\u" + hex(cp, 4);
    return "\\U" + hex(cp, 8);
}

std::string class_expr(const Ranges& r) {
    std::string s = "[";
    for (auto [lo, hi] : r) {
        s += class_char(lo);
        if (hi > lo) {
            if (hi > lo + 1) s += '-';
            s += class_char(hi);
        }
    }
    return s + "]";
}

// The text a JSON string holds for `cp` (escaped where JSON requires it).
std::string json_char(uint32_t cp) {
    switch (cp) {
        case '"':
            return "\\\"";
        case '\\':
            return "\\\\";
        case '\b':
            return "\\b";
        case '\f':
            return "\\f";
        case '\n':
            return "\\n";
        case '\r':
            return "\\r";
        case '\t':
            return "\\t";
        default:
            break;
    }
    if (cp < 0x20) return "\\u00" + hex(cp, 2, false);
    std::string s;
    utf8_append(s, cp);
    return s;
}

struct Expr {
    std::string text;  // empty: matches the empty string
    bool atom = true;  // can take a quantifier without parentheses
};

class Emitter {
  public:
    explicit Emitter(const RegexOptions& opts) : opts_(opts) {}

    Expected<std::string> emit(const Alt& top) {
        std::vector<std::string> branches;
        bool any_empty = false;
        for (const Seq& seq : top) {
            size_t b = 0, e = seq.size();
            bool start = false, end = false;
            while (b < e && seq[b].kind == Node::kStart) start = true, ++b;
            while (e > b && seq[e - 1].kind == Node::kEnd) end = true, --e;
            for (size_t i = b; i < e; ++i) FERROX_RETURN_IF_ERROR(check_no_anchor(seq[i]));
            Seq inner(seq.begin() + static_cast<long>(b), seq.begin() + static_cast<long>(e));
            std::string body = emit_seq(inner).text;
            if (opts_.search) {
                std::string pad = any_rule() + "*";
                if (!start && !end && body.empty()) {
                    body = pad;
                } else {
                    if (!start) body = pad + (body.empty() ? "" : " " + body);
                    if (!end) body = (body.empty() ? "" : body + " ") + pad;
                }
            }
            if (body.empty()) {
                any_empty = true;
            } else {
                branches.push_back(body);
            }
        }
        std::string rhs;
        if (branches.empty()) {
            rhs = "\"\"";
        } else {
            rhs = join(branches, " | ");
            if (any_empty) rhs = "( " + rhs + " )?";
        }
        std::string out = opts_.rule + " ::= " + rhs + "\n";
        for (const std::string& r : helpers_) out += r;
        return out;
    }

  private:
    Status check_no_anchor(const Node& n) {
        if (n.kind == Node::kStart)
            return invalid_argument("regex: '^' is only supported at the start of the pattern");
        if (n.kind == Node::kEnd)
            return invalid_argument("regex: '$' is only supported at the end of the pattern");
        if (n.kind == Node::kGroup) {
            for (const Seq& s : n.alts) {
                for (const Node& c : s) FERROX_RETURN_IF_ERROR(check_no_anchor(c));
            }
        }
        return Status::ok();
    }

    static std::string join(const std::vector<std::string>& v, const char* sep) {
        std::string s;
        for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
        return s;
    }

    static bool is_single(const Node& n) {
        return n.kind == Node::kSet && n.set.size() == 1 && n.set[0].first == n.set[0].second &&
               n.min == 1 && n.max == 1;
    }

    std::string char_text(uint32_t cp) const {
        if (opts_.json_string) return json_char(cp);
        std::string s;
        utf8_append(s, cp);
        return s;
    }

    Expr emit_seq(const Seq& seq) {
        std::vector<std::string> parts;
        std::string pending;  // consecutive single characters, one literal
        auto flush = [&] {
            if (!pending.empty()) parts.push_back(gbnf_literal(pending));
            pending.clear();
        };
        for (const Node& n : seq) {
            if (is_single(n)) {
                pending += char_text(n.set[0].first);
                continue;
            }
            flush();
            Expr e = emit_node(n);
            if (!e.text.empty()) parts.push_back(e.text);
        }
        flush();
        if (parts.empty()) return {"", true};
        if (parts.size() == 1) {
            // A single literal or class is an atom; a sequence of one quantified item is too.
            return {parts[0], true};
        }
        return {join(parts, " "), false};
    }

    Expr emit_alt(const Alt& alt) {
        std::vector<std::string> branches;
        bool any_empty = false;
        for (const Seq& s : alt) {
            Expr e = emit_seq(s);
            if (e.text.empty()) {
                any_empty = true;
            } else if (std::find(branches.begin(), branches.end(), e.text) == branches.end()) {
                branches.push_back(e.text);
            }
        }
        if (branches.empty()) return {"", true};
        if (branches.size() == 1 && !any_empty) {
            return {branches[0], false};
        }
        std::string t = "( " + join(branches, " | ") + " )";
        if (any_empty) t += "?";
        return {t, true};
    }

    Expr set_expr(const Ranges& r) {
        if (!opts_.json_string) {
            if (r.size() == 1 && r[0].first == r[0].second)
                return {gbnf_literal(char_text(r[0].first)), true};
            return {class_expr(r), true};
        }
        Ranges plain = intersect(r, normalize({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodePoint}}));
        Ranges special = intersect(r, normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
        std::vector<std::string> alts;
        if (plain.size() == 1 && plain[0].first == plain[0].second) {
            alts.push_back(gbnf_literal(char_text(plain[0].first)));
        } else if (!plain.empty()) {
            alts.push_back(class_expr(plain));
        }
        bool all_controls = !intersect(special, {{0, 0x1F}}).empty() &&
                            intersect(special, {{0, 0x1F}}) == Ranges{{0, 0x1F}};
        for (auto [lo, hi] : special) {
            for (uint32_t cp = lo; cp <= hi; ++cp) {
                if (cp < 0x20 && all_controls) continue;
                alts.push_back(gbnf_literal(json_char(cp)));
            }
        }
        if (all_controls) {
            alts.push_back("\"\\\\\" [bfnrt]");
            alts.push_back("\"\\\\u00\" [01] [0-9a-fA-F]");
        }
        if (alts.size() == 1) return {alts[0], true};
        return {"( " + join(alts, " | ") + " )", true};
    }

    Expr emit_node(const Node& n) {
        Expr e;
        if (n.kind == Node::kSet) {
            e = set_expr(n.set);
        } else {
            e = emit_alt(n.alts);
        }
        if (e.text.empty() || (n.min == 1 && n.max == 1)) return e;
        if (n.max == 0) return {"", true};
        std::string t = e.atom ? e.text : "( " + e.text + " )";
        if (n.min == 0 && n.max == 1) {
            t += "?";
        } else if (n.min == 0 && n.max == kUnbounded) {
            t += "*";
        } else if (n.min == 1 && n.max == kUnbounded) {
            t += "+";
        } else if (n.max == kUnbounded) {
            t += "{" + std::to_string(n.min) + ",}";
        } else if (n.min == n.max) {
            t += "{" + std::to_string(n.min) + "}";
        } else {
            t += "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
        }
        return {t, true};
    }

    // Any character (search padding); in a JSON string, any escape too.
    std::string any_rule() {
        std::string name = opts_.rule + "-any";
        if (!any_defined_) {
            any_defined_ = true;
            std::string body;
            if (opts_.json_string) {
                body = class_expr(normalize({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodePoint}})) +
                       " | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )";
            } else {
                body = class_expr(universe());
            }
            helpers_.push_back(name + " ::= " + body + "\n");
        }
        return name;
    }

    const RegexOptions& opts_;
    std::vector<std::string> helpers_;
    bool any_defined_ = false;
};

bool valid_rule_name(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s) {
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_')) {
            return false;
        }
    }
    return true;
}

}  // namespace

std::string gbnf_literal(std::string_view bytes) {
    std::string s = "\"";
    for (char ch : bytes) {
        auto c = static_cast<uint8_t>(ch);
        switch (c) {
            case '"':
                s += "\\\"";
                break;
            case '\\':
                s += "\\\\";
                break;
            case '\n':
                s += "\\n";
                break;
            case '\r':
                s += "\\r";
                break;
            case '\t':
                s += "\\t";
                break;
            default:
                if (c < 0x20 || c == 0x7F) {
                    s += "\\x" + hex(c, 2);
                } else {
                    s += ch;  // UTF-8 passes through unchanged
                }
        }
    }
    return s + "\"";
}

Expected<std::string> regex_to_gbnf(std::string_view pattern, const RegexOptions& opts) {
    if (!valid_rule_name(opts.rule))
        return invalid_argument("regex: invalid rule name '" + opts.rule + "'");
    std::u32string cps;
    if (!decode_utf8(pattern, cps)) return invalid_argument("regex: pattern is not valid UTF-8");
    Parser parser(std::move(cps), opts.max_repeat);
    FERROX_ASSIGN_OR_RETURN(Alt alt, parser.parse());
    Emitter emitter(opts);
    return emitter.emit(alt);
}

}  // namespace ferrox::grammar
