#include "grammar/lark.h"

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/utf8.h"
#include "grammar/regex.h"

namespace ferrox::grammar {
namespace {

// Lark's common terminals, written here in the subset this front end reads (same languages as
// Lark's common.lark, which is not copied: its ESCAPED_STRING uses a lookbehind).
constexpr std::string_view kCommon = R"(
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*
WS_INLINE: (" " | "\t")+
WS: (" " | "\t" | "\f" | "\r" | "\n")+
CR: "\r"
LF: "\n"
CRLF: "\r\n"
NEWLINE: (CR? LF)+
ESCAPED_STRING: "\"" (/[^"\\\n]/ | "\\" /[^\n]/)* "\""
)";

enum class Tok { kName, kString, kRegex, kNumber, kOp, kNewline, kDirective, kEnd };

struct Token {
    Tok kind;
    std::string text;  // kString: the decoded value; kRegex: the pattern; kOp: the operator
    std::string flags;  // kString, kRegex: the letters after the closing delimiter
    int line = 1;
};

Status fail(int line, const std::string& what) {
    return invalid_argument("lark grammar, line " + std::to_string(line) + ": " + what);
}

// The first code point of `s` (UTF-8), or -1 when `s` is not exactly one character.
int64_t single_code_point(const std::string& s) {
    if (s.empty()) return -1;
    const auto b = static_cast<uint8_t>(s[0]);
    const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (s.size() != n) return -1;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[i]) & 0x3F);
    return cp;
}

class Lexer {
  public:
    explicit Lexer(std::string_view src) : s_(src) {}

    Status run(std::vector<Token>* out) {
        while (p_ < s_.size()) {
            const char c = s_[p_];
            if (c == '\n') {
                out->push_back({Tok::kNewline, "", "", line_});
                ++line_;
                ++p_;
            } else if (c == ' ' || c == '\t' || c == '\r') {
                ++p_;
            } else if (c == '#' || (c == '/' && p_ + 1 < s_.size() && s_[p_ + 1] == '/')) {
                while (p_ < s_.size() && s_[p_] != '\n') ++p_;
            } else if (c == '"') {
                Token t{Tok::kString, "", "", line_};
                FERROX_RETURN_IF_ERROR(string(&t.text));
                t.flags = letters();
                out->push_back(std::move(t));
            } else if (c == '/') {
                Token t{Tok::kRegex, "", "", line_};
                ++p_;
                while (p_ < s_.size() && s_[p_] != '/') {
                    if (s_[p_] == '\n') return fail(line_, "a regular expression does not end on its line");
                    // \/ is a slash inside the pattern; other escapes go to the regex front end.
                    if (s_[p_] == '\\' && p_ + 1 < s_.size()) {
                        if (s_[p_ + 1] != '/') t.text += '\\';
                        t.text += s_[p_ + 1];
                        p_ += 2;
                        continue;
                    }
                    t.text += s_[p_++];
                }
                if (p_ >= s_.size()) return fail(line_, "a regular expression does not end");
                ++p_;
                t.flags = letters();
                out->push_back(std::move(t));
            } else if (c == '%') {
                Token t{Tok::kDirective, "", "", line_};
                while (p_ < s_.size() && s_[p_] != '\n') t.text += s_[p_++];
                out->push_back(std::move(t));
            } else if (is_name_start(c)) {
                Token t{Tok::kName, "", "", line_};
                while (p_ < s_.size() && is_name_char(s_[p_])) t.text += s_[p_++];
                out->push_back(std::move(t));
            } else if (c >= '0' && c <= '9') {
                Token t{Tok::kNumber, "", "", line_};
                while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') t.text += s_[p_++];
                out->push_back(std::move(t));
            } else if (s_.substr(p_, 2) == ".." || s_.substr(p_, 2) == "->") {
                out->push_back({Tok::kOp, std::string(s_.substr(p_, 2)), "", line_});
                p_ += 2;
            } else if (std::string_view(":|()[]?*+~.,!{}").find(c) != std::string_view::npos) {
                out->push_back({Tok::kOp, std::string(1, c), "", line_});
                ++p_;
            } else {
                return fail(line_, std::string("unexpected character '") + c + "'");
            }
        }
        out->push_back({Tok::kNewline, "", "", line_});
        out->push_back({Tok::kEnd, "", "", line_});
        return Status::ok();
    }

  private:
    static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
    static bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

    std::string letters() {
        std::string f;
        while (p_ < s_.size() && ((s_[p_] >= 'a' && s_[p_] <= 'z') || (s_[p_] >= 'A' && s_[p_] <= 'Z'))) f += s_[p_++];
        return f;
    }

    // A Python-style string literal's value.
    Status string(std::string* out) {
        ++p_;
        while (p_ < s_.size() && s_[p_] != '"') {
            const char c = s_[p_];
            if (c == '\n') return fail(line_, "a string does not end on its line");
            if (c != '\\') {
                *out += c;
                ++p_;
                continue;
            }
            if (p_ + 1 >= s_.size()) break;
            const char e = s_[p_ + 1];
            p_ += 2;
            switch (e) {
                case 'n': *out += '\n'; break;
                case 'r': *out += '\r'; break;
                case 't': *out += '\t'; break;
                case 'f': *out += '\f'; break;
                case 'v': *out += '\v'; break;
                case '0': *out += '\0'; break;
                case '\\': *out += '\\'; break;
                case '"': *out += '"'; break;
                case '\'': *out += '\''; break;
                case 'x':
                case 'u':
                case 'U': {
                    const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    if (p_ + n > s_.size()) return fail(line_, "a short \\" + std::string(1, e) + " escape");
                    uint32_t cp = 0;
                    for (size_t i = 0; i < n; ++i) {
                        const char h = s_[p_ + i];
                        const int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                      : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                        if (v < 0) return fail(line_, "a bad \\" + std::string(1, e) + " escape");
                        cp = cp * 16 + static_cast<uint32_t>(v);
                    }
                    if (cp > 0x10FFFF) return fail(line_, "an escape beyond U+10FFFF");
                    p_ += n;
                    utf8_append(*out, cp);
                    break;
                }
                default:  // Python keeps an unknown escape as written
                    *out += '\\';
                    *out += e;
            }
        }
        if (p_ >= s_.size()) return fail(line_, "a string does not end");
        ++p_;
        return Status::ok();
    }

    std::string_view s_;
    size_t p_ = 0;
    int line_ = 1;
};

std::string json_escaped(const std::string& s) {
    std::string out;
    for (char ch : s) {
        const auto c = static_cast<uint8_t>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    static const char* kHex = "0123456789abcdef";
                    out += "\\u00";
                    out += kHex[c >> 4];
                    out += kHex[c & 15];
                } else {
                    out += ch;
                }
        }
    }
    return out;
}

std::string class_cp(uint32_t cp) {
    static const char* kHex = "0123456789ABCDEF";
    std::string s = cp > 0xFFFF ? "\\U" : "\\u";
    for (int shift = cp > 0xFFFF ? 28 : 12; shift >= 0; shift -= 4) s += kHex[(cp >> shift) & 15];
    return s;
}

// Parses definitions and writes one GBNF rule per Lark rule or terminal.
class Compiler {
  public:
    Compiler(std::vector<Token> toks, const LarkOptions& o) : t_(std::move(toks)), o_(o) {}

    // Reads every statement; `common`: the built-in definitions (names not to be redefined).
    Status run(bool common) {
        while (true) {
            skip_newlines();
            const Token& tk = peek();
            if (tk.kind == Tok::kEnd) break;
            if (tk.kind == Tok::kDirective) {
                FERROX_RETURN_IF_ERROR(directive(next()));
                continue;
            }
            FERROX_RETURN_IF_ERROR(definition(common));
        }
        return Status::ok();
    }

    std::map<std::string, std::string>& rules() { return rules_; }
    std::map<std::string, std::string>& imports() { return imports_; }
    std::set<std::string>& used() { return used_; }
    std::vector<std::string>& helpers() { return helpers_; }
    std::map<std::string, int>& lines() { return lines_; }
    int regex_count = 0;

    std::string name_of(const std::string& lark_name) const { return o_.rule + "-" + lark_name; }

  private:
    const Token& peek() {
        if (depth_ > 0)
            while (t_[i_].kind == Tok::kNewline) ++i_;
        return t_[i_];
    }
    const Token& next() {
        const Token& tk = peek();
        if (tk.kind != Tok::kEnd) ++i_;
        return tk;
    }
    bool is_op(const char* op) { return peek().kind == Tok::kOp && peek().text == op; }
    void skip_newlines() {
        while (t_[i_].kind == Tok::kNewline) ++i_;
    }
    // At a newline outside brackets: does the definition go on with a `|` on a later line?
    bool continues() {
        size_t j = i_;
        while (t_[j].kind == Tok::kNewline) ++j;
        if (t_[j].kind == Tok::kOp && t_[j].text == "|") {
            i_ = j;
            return true;
        }
        return false;
    }

    Status directive(const Token& d) {
        // "%import common.NAME [-> ALIAS]" or "%import common (A, B)".
        std::string s = d.text;
        auto word = [&s](size_t& p) {
            while (p < s.size() && (s[p] == ' ' || s[p] == '\t')) ++p;
            size_t b = p;
            while (p < s.size() && s[p] != ' ' && s[p] != '\t' && s[p] != '(' && s[p] != ')' && s[p] != ',') ++p;
            return s.substr(b, p - b);
        };
        size_t p = 0;
        const std::string kw = word(p);
        if (kw != "%import") return fail(d.line, "'" + kw + "' is not supported");
        std::string what = word(p);
        auto known = [](const std::string& n) {
            return kCommon.find("\n" + n + ":") != std::string_view::npos;
        };
        if (what.rfind("common.", 0) == 0) {
            const std::string n = what.substr(7);
            std::string alias = n;
            if (word(p) == "->") alias = word(p);
            if (!known(n)) return fail(d.line, "common." + n + " is not a known terminal");
            imports_[alias] = n;
            return Status::ok();
        }
        if (what == "common") {
            while (p < s.size() && s[p] != '(') ++p;
            if (p >= s.size()) return fail(d.line, "expected '(' after %import common");
            ++p;
            while (true) {
                const std::string n = word(p);
                if (n.empty()) break;
                if (!known(n)) return fail(d.line, "common." + n + " is not a known terminal");
                imports_[n] = n;
                while (p < s.size() && (s[p] == ',' || s[p] == ' ')) ++p;
                if (p < s.size() && s[p] == ')') break;
            }
            return Status::ok();
        }
        return fail(d.line, "only imports from 'common' are supported");
    }

    Status definition(bool common) {
        if (is_op("?") || is_op("!")) next();
        const Token& name = next();
        if (name.kind != Tok::kName) return fail(name.line, "expected a rule name");
        if (is_op("{")) return fail(name.line, "rule templates are not supported");
        if (is_op(".")) {  // priority
            next();
            if (is_op("-")) next();
            if (peek().kind != Tok::kNumber) return fail(name.line, "expected a priority after '.'");
            next();
        }
        if (!is_op(":")) return fail(name.line, "expected ':' after '" + name.text + "'");
        next();
        if (rules_.count(name.text)) {
            if (common) {  // the grammar defines it itself
                std::string ignored;
                return alternatives(&ignored);
            }
            return fail(name.line, "'" + name.text + "' is defined twice");
        }
        std::string body;
        FERROX_RETURN_IF_ERROR(alternatives(&body));
        rules_[name.text] = body;
        lines_[name.text] = name.line;
        return Status::ok();
    }

    Status alternatives(std::string* out) {
        std::vector<std::string> alts;
        while (true) {
            std::string seq;
            FERROX_RETURN_IF_ERROR(sequence(&seq));
            if (is_op("->")) {  // an alias names the tree node only
                next();
                if (peek().kind != Tok::kName) return fail(peek().line, "expected a name after '->'");
                next();
            }
            alts.push_back(seq.empty() ? "\"\"" : seq);
            if (is_op("|")) {
                next();
                continue;
            }
            if (depth_ == 0 && peek().kind == Tok::kNewline && continues()) {
                next();  // the '|'
                continue;
            }
            break;
        }
        *out = alts.size() == 1 ? alts[0] : "";
        if (alts.size() > 1) {
            for (size_t k = 0; k < alts.size(); ++k) *out += (k ? " | " : "") + alts[k];
        }
        return Status::ok();
    }

    Status sequence(std::string* out) {
        while (true) {
            const Token& tk = peek();
            const bool starts_item = tk.kind == Tok::kName || tk.kind == Tok::kString || tk.kind == Tok::kRegex ||
                                     (tk.kind == Tok::kOp && (tk.text == "(" || tk.text == "["));
            if (!starts_item) break;
            std::string item;
            FERROX_RETURN_IF_ERROR(atom(&item));
            FERROX_RETURN_IF_ERROR(quantifier(&item));
            if (!out->empty()) *out += " ";
            *out += item;
        }
        return Status::ok();
    }

    Status quantifier(std::string* item) {
        if (is_op("?") || is_op("*") || is_op("+")) {
            *item = "(" + *item + ")" + next().text;
            return Status::ok();
        }
        if (!is_op("~")) return Status::ok();
        const int line = next().line;
        if (peek().kind != Tok::kNumber) return fail(line, "expected a count after '~'");
        const std::string lo = next().text;
        std::string hi = lo;
        if (is_op("..")) {
            next();
            if (peek().kind != Tok::kNumber) return fail(line, "expected a count after '..'");
            hi = next().text;
        }
        if (lo.size() > 5 || hi.size() > 5 || std::stoi(hi) < std::stoi(lo)) return fail(line, "a bad repeat count");
        *item = "(" + *item + "){" + lo + (hi == lo ? "" : "," + hi) + "}";
        return Status::ok();
    }

    Status atom(std::string* out) {
        const Token tk = next();
        switch (tk.kind) {
            case Tok::kName:
                used_.insert(tk.text);
                *out = name_of(tk.text);
                return Status::ok();
            case Tok::kString: {
                if (!tk.flags.empty()) return fail(tk.line, "string flags ('" + tk.flags + "') are not supported");
                if (is_op("..")) return range(tk, out);
                *out = gbnf_literal(o_.json_string ? json_escaped(tk.text) : tk.text);
                return Status::ok();
            }
            case Tok::kRegex: {
                if (!tk.flags.empty()) return fail(tk.line, "regex flags ('" + tk.flags + "') are not supported");
                RegexOptions ro;
                ro.rule = o_.rule + "-re" + std::to_string(regex_count++);
                ro.json_string = o_.json_string;
                auto g = regex_to_gbnf(tk.text, ro);
                if (!g.has_value()) return fail(tk.line, g.status().message());
                helpers_.push_back(*g);
                *out = ro.rule;
                return Status::ok();
            }
            case Tok::kOp:
                if (tk.text == "(" || tk.text == "[") {
                    ++depth_;
                    std::string inner;
                    Status st = alternatives(&inner);
                    --depth_;
                    FERROX_RETURN_IF_ERROR(st);
                    const char* close = tk.text == "(" ? ")" : "]";
                    if (!is_op(close)) return fail(peek().line, std::string("expected '") + close + "'");
                    next();
                    *out = "(" + inner + ")" + (tk.text == "[" ? "?" : "");
                    return Status::ok();
                }
                [[fallthrough]];
            default:
                return fail(tk.line, "unexpected '" + tk.text + "'");
        }
    }

    // "a".."z": one character from the range (as its JSON escape where it needs one).
    Status range(const Token& lo_tok, std::string* out) {
        next();  // ..
        const Token hi_tok = next();
        if (hi_tok.kind != Tok::kString) return fail(hi_tok.line, "expected a string after '..'");
        const int64_t lo = single_code_point(lo_tok.text), hi = single_code_point(hi_tok.text);
        if (lo < 0 || hi < 0 || hi < lo) return fail(lo_tok.line, "a range takes two single characters, low first");
        std::vector<std::string> alts;
        std::string cls;
        auto add_span = [&cls](int64_t a, int64_t b) {
            if (a > b) return;
            cls += class_cp(static_cast<uint32_t>(a));
            if (b > a) cls += "-" + class_cp(static_cast<uint32_t>(b));
        };
        if (!o_.json_string) {
            add_span(lo, hi);
        } else {
            // Characters JSON escapes become their escapes; the rest stay in the class.
            int64_t start = lo;
            for (int64_t c = lo; c <= hi && c < 0x80; ++c) {
                if (c < 0x20 || c == '"' || c == '\\') {
                    add_span(start, c - 1);
                    start = c + 1;
                    alts.push_back(gbnf_literal(json_escaped(std::string(1, static_cast<char>(c)))));
                }
            }
            add_span(start, hi);
        }
        if (!cls.empty()) alts.insert(alts.begin(), "[" + cls + "]");
        *out = alts.size() == 1 ? alts[0] : "(";
        if (alts.size() > 1) {
            for (size_t k = 0; k < alts.size(); ++k) *out += (k ? " | " : "") + alts[k];
            *out += ")";
        }
        return Status::ok();
    }

    std::vector<Token> t_;
    size_t i_ = 0;
    int depth_ = 0;
    const LarkOptions& o_;
    std::map<std::string, std::string> rules_;    // Lark name -> GBNF alternatives
    std::map<std::string, std::string> imports_;  // local name -> common name
    std::map<std::string, int> lines_;
    std::set<std::string> used_;
    std::vector<std::string> helpers_;  // the regexes' rules
};

}  // namespace

Expected<std::string> lark_to_gbnf(std::string_view lark, const LarkOptions& opts) {
    std::vector<Token> toks;
    FERROX_RETURN_IF_ERROR(Lexer(lark).run(&toks));
    Compiler c(std::move(toks), opts);
    FERROX_RETURN_IF_ERROR(c.run(false));
    if (!c.rules().count("start")) return invalid_argument("lark grammar: no 'start' rule");
    // Imported terminals: the common definitions, under their own names, then the aliases.
    for (const auto& [local, name] : c.imports()) {
        if (c.rules().count(local)) return invalid_argument("lark grammar: '" + local + "' is imported and defined");
    }
    if (!c.imports().empty()) {
        std::vector<Token> common;
        FERROX_RETURN_IF_ERROR(Lexer(kCommon).run(&common));
        std::map<std::string, std::string> own = c.rules();
        Compiler cc(std::move(common), opts);
        cc.regex_count = c.regex_count + 1000;
        for (const auto& [n, body] : own) cc.rules()[n] = body;  // taken first: not redefined
        FERROX_RETURN_IF_ERROR(cc.run(true));
        for (const auto& [n, body] : cc.rules()) {
            if (!own.count(n)) c.rules()[n] = body;
        }
        for (auto& h : cc.helpers()) c.helpers().push_back(std::move(h));
        for (const auto& [local, name] : c.imports()) {
            if (local != name) c.rules()[local] = c.name_of(name);
        }
    }
    for (const std::string& n : c.used()) {
        if (!c.rules().count(n)) return invalid_argument("lark grammar: '" + n + "' is used but not defined");
    }
    std::string out = opts.rule + " ::= " + c.name_of("start") + "\n";
    for (const auto& [n, body] : c.rules()) out += c.name_of(n) + " ::= " + body + "\n";
    for (const std::string& h : c.helpers()) out += h + (h.empty() || h.back() == '\n' ? "" : "\n");
    return out;
}

}  // namespace ferrox::grammar
