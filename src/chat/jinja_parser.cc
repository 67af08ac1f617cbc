#include "chat/jinja_parser.h"

#include <cstring>
#include <string>
#include <vector>

#include "chat/jinja_runtime.h"

namespace ferrox::jinja {

namespace {

enum class Tok : uint8_t {
    kData,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof,
};

struct Token {
    Tok type;
    int line;
    std::string text;  // data, name, string value, operator
    int64_t i = 0;
    double f = 0;
};

Status syntax_error(int line, const std::string& msg) {
    return invalid_argument("jinja syntax error at line " + std::to_string(line) + ": " + msg);
}

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int count_newlines(std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

// Python's unicode-escape decoding of a string literal's body (unknown escapes stay as typed).
bool unescape(std::string_view s, std::string* out) {
    out->clear();
    out->reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (c != '\\' || i + 1 >= s.size()) {
            *out += c;
            continue;
        }
        char e = s[++i];
        auto hex = [&](int n) -> int64_t {
            if (i + static_cast<size_t>(n) >= s.size()) return -1;
            int64_t v = 0;
            for (int k = 1; k <= n; ++k) {
                char h = s[i + static_cast<size_t>(k)];
                int d = is_digit(h)              ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
                if (d < 0) return -1;
                v = v * 16 + d;
            }
            i += static_cast<size_t>(n);
            return v;
        };
        switch (e) {
            case '\n':
                break;
            case '\\':
                *out += '\\';
                break;
            case '\'':
                *out += '\'';
                break;
            case '"':
                *out += '"';
                break;
            case 'a':
                *out += '\a';
                break;
            case 'b':
                *out += '\b';
                break;
            case 'f':
                *out += '\f';
                break;
            case 'n':
                *out += '\n';
                break;
            case 'r':
                *out += '\r';
                break;
            case 't':
                *out += '\t';
                break;
            case 'v':
                *out += '\v';
                break;
            case 'x':
            case 'u':
            case 'U': {
                int64_t v = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
                if (v < 0 || v > 0x10FFFF) return false;
                utf8_append(*out, static_cast<uint32_t>(v));
                break;
            }
            default:
                if (e >= '0' && e <= '7') {
                    int v = e - '0';
                    for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7';
                         ++k)
                        v = v * 8 + (s[++i] - '0');
                    utf8_append(*out, static_cast<uint32_t>(v));
                } else {
                    *out += '\\';
                    *out += e;
                }
        }
    }
    return true;
}

class Lexer {
  public:
    explicit Lexer(std::string_view src) {
        // jinja2 normalizes \r\n and \r to \n and drops one trailing newline.
        src_.reserve(src.size());
        for (size_t i = 0; i < src.size(); ++i) {
            if (src[i] == '\r') {
                src_ += '\n';
                if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
            } else {
                src_ += src[i];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    Status run(std::vector<Token>* out) {
        out_ = out;
        while (pos_ < src_.size()) {
            size_t tag = find_tag(pos_);
            std::string_view text(src_.data() + pos_, (tag == npos ? src_.size() : tag) - pos_);
            if (tag == npos) {
                emit_data(text);
                pos_ = src_.size();
                break;
            }
            char kind = src_[tag + 1];
            char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
            if (sign != '-' && sign != '+') sign = 0;
            int text_lines = count_newlines(text);
            if (sign == '-') {
                size_t n = text.size();
                while (n > 0 && is_space(text[n - 1])) --n;
                text = text.substr(0, n);
            } else if (sign != '+' && kind != '{') {
                size_t l_pos = text.rfind('\n');
                l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
                if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
                    bool all_ws = true;
                    for (size_t k = l_pos; k < text.size(); ++k) all_ws &= is_space(text[k]);
                    if (all_ws) text = text.substr(0, l_pos);
                }
            }
            emit_data(text);
            line_ += text_lines;
            pos_ = tag + 2 + (sign ? 1 : 0);
            Status st;
            if (kind == '#') {
                st = lex_comment();
            } else if (kind == '%' && try_raw(tag)) {
                st = lex_raw();
            } else {
                st = lex_tag(kind == '{');
            }
            if (!st.is_ok()) return st;
        }
        out_->push_back(Token{Tok::kEof, line_, {}});
        return Status::ok();
    }

  private:
    static constexpr size_t npos = std::string::npos;

    size_t find_tag(size_t from) const {
        for (size_t i = from; i + 1 < src_.size(); ++i) {
            if (src_[i] == '{') {
                char c = src_[i + 1];
                if (c == '{' || c == '%' || c == '#') return i;
            }
        }
        return npos;
    }

    void emit_data(std::string_view text) {
        if (!text.empty()) out_->push_back(Token{Tok::kData, line_, std::string(text)});
    }

    // Consumes the end of a block-like tag at pos_ (after its '-'/'+' sign, if any) following
    // jinja's rules: "-%}" eats all whitespace after, "+%}" nothing, "%}" one newline.
    void finish_end(char sign, size_t end_len, bool trim_newline) {
        size_t p = pos_ + end_len;
        if (sign == '-') {
            while (p < src_.size() && is_space(src_[p])) ++p;
        } else if (sign == 0 && trim_newline && p < src_.size() && src_[p] == '\n') {
            ++p;
        }
        line_ += count_newlines(std::string_view(src_).substr(pos_, p - pos_));
        line_starting_ = p > 0 && src_[p - 1] == '\n';
        pos_ = p;
    }

    Status lex_comment() {
        size_t end = src_.find("#}", pos_);
        if (end == npos) return syntax_error(line_, "missing end of comment tag");
        char sign = 0;
        if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[end - 1];
        line_ += count_newlines(std::string_view(src_).substr(pos_, end - pos_));
        pos_ = end;
        finish_end(sign, 2, true);
        return Status::ok();
    }

    // {%[-+]? raw [-]?%} at `tag` (pos_ is already past the sign).
    bool try_raw(size_t tag) {
        size_t p = pos_;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0) return false;
        p += 3;
        if (p < src_.size() && is_name_char(src_[p])) return false;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, 3, "-%}") == 0) {
            p += 3;
            while (p < src_.size() && is_space(src_[p])) ++p;
        } else if (src_.compare(p, 2, "%}") == 0) {
            p += 2;
        } else {
            return false;
        }
        line_ += count_newlines(std::string_view(src_).substr(tag, p - tag));
        pos_ = p;
        return true;
    }

    Status lex_raw() {
        for (size_t p = pos_; (p = src_.find("{%", p)) != npos; p += 2) {
            size_t q = p + 2;
            char sign = 0;
            if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
            while (q < src_.size() && is_space(src_[q])) ++q;
            if (src_.compare(q, 6, "endraw") != 0) continue;
            q += 6;
            while (q < src_.size() && is_space(src_[q])) ++q;
            char end_sign = 0;
            if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
            if (src_.compare(q, 2, "%}") != 0) continue;
            std::string_view text(src_.data() + pos_, p - pos_);
            int lines = count_newlines(text);
            if (sign == '-') {
                size_t n = text.size();
                while (n > 0 && is_space(text[n - 1])) --n;
                text = text.substr(0, n);
            } else if (sign != '+') {
                size_t l_pos = text.rfind('\n');
                l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
                if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
                    bool all_ws = true;
                    for (size_t k = l_pos; k < text.size(); ++k) all_ws &= is_space(text[k]);
                    if (all_ws) text = text.substr(0, l_pos);
                }
            }
            emit_data(text);
            line_ += lines + count_newlines(std::string_view(src_).substr(p, q - p));
            pos_ = q;
            finish_end(end_sign, 2, true);
            return Status::ok();
        }
        return syntax_error(line_, "missing end of raw directive");
    }

    Status lex_tag(bool is_var) {
        out_->push_back(Token{is_var ? Tok::kVarBegin : Tok::kBlockBegin, line_, {}});
        int balance = 0;
        std::vector<char> stack;
        while (true) {
            while (pos_ < src_.size() && is_space(src_[pos_])) {
                if (src_[pos_] == '\n') ++line_;
                ++pos_;
            }
            if (pos_ >= src_.size())
                return syntax_error(line_, is_var ? "unexpected end of template, expected '}}'"
                                                  : "unexpected end of template, expected '%}'");
            if (balance == 0) {
                const char* end = is_var ? "}}" : "%}";
                char c = src_[pos_];
                if ((c == '-' || (c == '+' && !is_var)) && src_.compare(pos_ + 1, 2, end) == 0) {
                    out_->push_back(Token{is_var ? Tok::kVarEnd : Tok::kBlockEnd, line_, {}});
                    ++pos_;
                    finish_end(c, 2, !is_var);
                    return Status::ok();
                }
                if (src_.compare(pos_, 2, end) == 0) {
                    out_->push_back(Token{is_var ? Tok::kVarEnd : Tok::kBlockEnd, line_, {}});
                    finish_end(0, 2, !is_var);
                    return Status::ok();
                }
            }
            Status st = lex_one(&balance, &stack);
            if (!st.is_ok()) return st;
        }
    }

    Status lex_one(int* balance, std::vector<char>* stack) {
        char c = src_[pos_];
        size_t start = pos_;
        if (is_digit(c)) return lex_number();
        if (is_name_start(c) || static_cast<unsigned char>(c) >= 0x80) {
            while (pos_ < src_.size() &&
                   (is_name_char(src_[pos_]) || static_cast<unsigned char>(src_[pos_]) >= 0x80))
                ++pos_;
            std::string name = src_.substr(start, pos_ - start);
            if (!is_ascii(name)) return syntax_error(line_, "invalid character in identifier");
            out_->push_back(Token{Tok::kName, line_, std::move(name)});
            return Status::ok();
        }
        if (c == '\'' || c == '"') {
            size_t p = pos_ + 1;
            while (p < src_.size() && src_[p] != c) {
                if (src_[p] == '\\') ++p;
                ++p;
            }
            if (p >= src_.size()) return syntax_error(line_, "unterminated string");
            std::string value;
            std::string_view body(src_.data() + pos_ + 1, p - pos_ - 1);
            if (!unescape(body, &value)) return syntax_error(line_, "invalid escape in string");
            out_->push_back(Token{Tok::kString, line_, std::move(value)});
            line_ += count_newlines(body);
            pos_ = p + 1;
            return Status::ok();
        }
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                           "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                           ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
        for (const char* op : kOps) {
            size_t n = std::strlen(op);
            if (src_.compare(pos_, n, op) != 0) continue;
            if (n == 1 && (c == '(' || c == '[' || c == '{')) {
                stack->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
                ++*balance;
            } else if (n == 1 && (c == ')' || c == ']' || c == '}')) {
                if (stack->empty())
                    return syntax_error(line_, std::string("unexpected '") + c + "'");
                if (stack->back() != c)
                    return syntax_error(line_, std::string("unexpected '") + c + "', expected '" +
                                                   stack->back() + "'");
                stack->pop_back();
                --*balance;
            }
            out_->push_back(Token{Tok::kOp, line_, op});
            pos_ += n;
            return Status::ok();
        }
        return syntax_error(line_, std::string("unexpected char '") + c + "'");
    }

    Status lex_number() {
        size_t start = pos_;
        auto digits = [&] {
            size_t b = pos_;
            while (pos_ < src_.size() && (is_digit(src_[pos_]) || src_[pos_] == '_')) ++pos_;
            return pos_ > b;
        };
        // Hex/octal/binary integers.
        if (src_[pos_] == '0' && pos_ + 1 < src_.size() &&
            std::strchr("xXoObB", src_[pos_ + 1]) != nullptr && src_[pos_ + 1] != 0) {
            char base_c = static_cast<char>(src_[pos_ + 1] | 0x20);
            int base = base_c == 'x' ? 16 : base_c == 'o' ? 8 : 2;
            pos_ += 2;
            int64_t v = 0;
            size_t n = 0;
            while (pos_ < src_.size()) {
                char h = static_cast<char>(src_[pos_] | 0x20);
                int d = is_digit(src_[pos_])     ? src_[pos_] - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                                                 : -1;
                if (src_[pos_] == '_') {
                    ++pos_;
                    continue;
                }
                if (d < 0 || d >= base) break;
                if (v > (INT64_MAX - d) / base)
                    return syntax_error(line_, "integer literal too large");
                v = v * base + d;
                ++pos_;
                ++n;
            }
            if (n == 0) return syntax_error(line_, "invalid integer literal");
            Token t{Tok::kInt, line_, {}};
            t.i = v;
            out_->push_back(std::move(t));
            return Status::ok();
        }
        digits();
        bool is_float = false;
        bool after_dot = start > 0 && src_[start - 1] == '.';
        if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
            ++pos_;
            digits();
            is_float = true;
        }
        if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            size_t save = pos_;
            ++pos_;
            if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
            if (pos_ < src_.size() && is_digit(src_[pos_])) {
                digits();
                is_float = true;
            } else {
                pos_ = save;
            }
        }
        std::string text;
        for (size_t k = start; k < pos_; ++k)
            if (src_[k] != '_') text += src_[k];
        Token t{is_float ? Tok::kFloat : Tok::kInt, line_, {}};
        if (is_float) {
            t.f = std::strtod(text.c_str(), nullptr);
        } else {
            int64_t v = 0;
            for (char d : text) {
                if (v > (INT64_MAX - (d - '0')) / 10)
                    return syntax_error(line_, "integer literal too large");
                v = v * 10 + (d - '0');
            }
            t.i = v;
        }
        out_->push_back(std::move(t));
        return Status::ok();
    }

    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    bool line_starting_ = true;
    std::vector<Token>* out_ = nullptr;
};

// ---------------------------------------------------------------------------------------------

class Parser {
  public:
    Parser(std::vector<Token> toks, int max_nesting)
        : toks_(std::move(toks)), max_nesting_(max_nesting) {}

    Status parse(StmtList* out) {
        std::string end;
        Status st = parse_body(out, {}, &end);
        if (!st.is_ok()) return st;
        return Status::ok();
    }

  private:
    const Token& cur() const { return toks_[i_]; }
    const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
    void advance() {
        if (i_ + 1 < toks_.size()) ++i_;
    }
    bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        advance();
        return true;
    }
    Status fail(const std::string& msg) { return syntax_error(cur().line, msg); }
    std::string describe(const Token& t) const {
        switch (t.type) {
            case Tok::kEof:
                return "end of template";
            case Tok::kBlockEnd:
                return "end of statement block";
            case Tok::kVarEnd:
                return "end of print statement";
            case Tok::kName:
                return "'" + t.text + "'";
            case Tok::kOp:
                return "'" + t.text + "'";
            case Tok::kString:
                return "string";
            default:
                return "token";
        }
    }
    Status expect_op(const char* op) {
        if (skip_op(op)) return Status::ok();
        return fail(std::string("expected '") + op + "', got " + describe(cur()));
    }
    Status expect_block_end() {
        if (cur().type == Tok::kBlockEnd) {
            advance();
            return Status::ok();
        }
        return fail("expected end of statement block, got " + describe(cur()));
    }
    Status enter() {
        if (++nesting_ > max_nesting_) return fail("template nested too deeply");
        return Status::ok();
    }

    ExprPtr node(ExprKind k, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->line = line;
        return e;
    }

    // Parses statements until `{% name` with name in `ends` (consumed; *end set) or EOF.
    Status parse_body(StmtList* out, std::initializer_list<const char*> ends, std::string* end) {
        FERROX_RETURN_IF_ERROR(enter());
        while (true) {
            const Token& t = cur();
            if (t.type == Tok::kEof) {
                if (ends.size() == 0) {
                    --nesting_;
                    return Status::ok();
                }
                std::string want;
                for (const char* e : ends)
                    want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
                return fail("unexpected end of template, expected " + want);
            }
            if (t.type == Tok::kData) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::kText;
                s->line = t.line;
                s->text = t.text;
                out->push_back(std::move(s));
                advance();
                continue;
            }
            if (t.type == Tok::kVarBegin) {
                advance();
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::kOutput;
                s->line = t.line;
                FERROX_RETURN_IF_ERROR(parse_tuple(&s->expr, true));
                if (cur().type != Tok::kVarEnd)
                    return fail("expected end of print statement, got " + describe(cur()));
                advance();
                out->push_back(std::move(s));
                continue;
            }
            if (t.type != Tok::kBlockBegin) return fail("unexpected " + describe(t));
            advance();
            if (cur().type != Tok::kName) return fail("tag name expected");
            for (const char* e : ends) {
                if (cur().text == e) {
                    *end = e;
                    advance();
                    --nesting_;
                    return Status::ok();
                }
            }
            StmtPtr s;
            FERROX_RETURN_IF_ERROR(parse_statement(&s));
            out->push_back(std::move(s));
        }
    }

    Status parse_statement(StmtPtr* out) {
        const Token& t = cur();
        std::string tag = t.text;
        int line = t.line;
        auto s = std::make_unique<Stmt>();
        s->line = line;
        advance();
        if (tag == "if") {
            s->kind = StmtKind::kIf;
            FERROX_RETURN_IF_ERROR(parse_if_rest(s.get()));
        } else if (tag == "for") {
            s->kind = StmtKind::kFor;
            FERROX_RETURN_IF_ERROR(parse_for_rest(s.get()));
        } else if (tag == "set") {
            FERROX_RETURN_IF_ERROR(parse_set_rest(s.get()));
        } else if (tag == "macro") {
            s->kind = StmtKind::kMacro;
            FERROX_RETURN_IF_ERROR(parse_macro_rest(s.get()));
        } else if (tag == "call") {
            s->kind = StmtKind::kCallBlock;
            FERROX_RETURN_IF_ERROR(parse_call_rest(s.get()));
        } else if (tag == "filter") {
            s->kind = StmtKind::kFilterBlock;
            FERROX_RETURN_IF_ERROR(parse_filter_chain(&s->expr));
            FERROX_RETURN_IF_ERROR(expect_block_end());
            std::string end;
            FERROX_RETURN_IF_ERROR(parse_body(&s->body, {"endfilter"}, &end));
            FERROX_RETURN_IF_ERROR(expect_block_end());
        } else if (tag == "break" || tag == "continue") {
            if (loop_depth_ == 0) return syntax_error(line, "'" + tag + "' outside of a loop");
            s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
            FERROX_RETURN_IF_ERROR(expect_block_end());
        } else if (tag == "generation") {
            s->kind = StmtKind::kScopedBody;
            FERROX_RETURN_IF_ERROR(expect_block_end());
            std::string end;
            FERROX_RETURN_IF_ERROR(parse_body(&s->body, {"endgeneration"}, &end));
            FERROX_RETURN_IF_ERROR(expect_block_end());
        } else {
            return syntax_error(line, "unknown or unsupported tag '" + tag + "'");
        }
        *out = std::move(s);
        return Status::ok();
    }

    Status parse_if_rest(Stmt* s) {
        FERROX_RETURN_IF_ERROR(parse_expression(&s->expr, true));
        FERROX_RETURN_IF_ERROR(expect_block_end());
        std::string end;
        FERROX_RETURN_IF_ERROR(parse_body(&s->body, {"elif", "else", "endif"}, &end));
        if (end == "elif") {
            auto e = std::make_unique<Stmt>();
            e->kind = StmtKind::kIf;
            e->line = cur().line;
            FERROX_RETURN_IF_ERROR(parse_if_rest(e.get()));
            s->else_body.push_back(std::move(e));
            return Status::ok();
        }
        if (end == "else") {
            FERROX_RETURN_IF_ERROR(expect_block_end());
            FERROX_RETURN_IF_ERROR(parse_body(&s->else_body, {"endif"}, &end));
        }
        return expect_block_end();
    }

    Status parse_targets(std::vector<std::string>* names, bool* is_tuple) {
        bool paren = skip_op("(");
        while (true) {
            if (cur().type != Tok::kName)
                return fail("expected a variable name, got " + describe(cur()));
            names->push_back(cur().text);
            advance();
            if (!skip_op(",")) break;
            *is_tuple = true;
            if (cur().type != Tok::kName) break;
        }
        if (paren) FERROX_RETURN_IF_ERROR(expect_op(")"));
        if (paren && names->size() > 1) *is_tuple = true;
        return Status::ok();
    }

    Status parse_for_rest(Stmt* s) {
        FERROX_RETURN_IF_ERROR(parse_targets(&s->targets, &s->target_tuple));
        if (!skip_name("in")) return fail("expected 'in', got " + describe(cur()));
        FERROX_RETURN_IF_ERROR(parse_tuple(&s->expr, false));
        if (skip_name("if")) FERROX_RETURN_IF_ERROR(parse_expression(&s->cond, true));
        if (is_name("recursive")) return fail("recursive loops are not supported");
        FERROX_RETURN_IF_ERROR(expect_block_end());
        ++loop_depth_;
        std::string end;
        Status st = parse_body(&s->body, {"else", "endfor"}, &end);
        --loop_depth_;
        FERROX_RETURN_IF_ERROR(st);
        if (end == "else") {
            FERROX_RETURN_IF_ERROR(expect_block_end());
            // `else` runs outside the loop, but jinja still parses loop controls there as
            // belonging to an enclosing loop, if any.
            FERROX_RETURN_IF_ERROR(parse_body(&s->else_body, {"endfor"}, &end));
        }
        return expect_block_end();
    }

    Status parse_set_rest(Stmt* s) {
        s->kind = StmtKind::kSet;
        if (cur().type != Tok::kName) return fail("expected a variable name after 'set'");
        if (peek().type == Tok::kOp && peek().text == "." && peek(2).type == Tok::kName) {
            s->targets.push_back(cur().text);
            s->text = peek(2).text;
            s->target_attr = true;
            advance();
            advance();
            advance();
        } else {
            FERROX_RETURN_IF_ERROR(parse_targets(&s->targets, &s->target_tuple));
        }
        if (skip_op("=")) {
            FERROX_RETURN_IF_ERROR(parse_tuple(&s->expr, true));
            return expect_block_end();
        }
        if (s->target_tuple) return fail("expected '='");
        s->kind = StmtKind::kSetBlock;
        if (is_op("|")) FERROX_RETURN_IF_ERROR(parse_filter_chain(&s->expr));
        FERROX_RETURN_IF_ERROR(expect_block_end());
        std::string end;
        FERROX_RETURN_IF_ERROR(parse_body(&s->body, {"endset"}, &end));
        return expect_block_end();
    }

    Status parse_params(std::vector<MacroParam>* params) {
        FERROX_RETURN_IF_ERROR(expect_op("("));
        while (!is_op(")")) {
            if (!params->empty()) FERROX_RETURN_IF_ERROR(expect_op(","));
            if (is_op(")")) break;
            if (cur().type != Tok::kName) return fail("expected a parameter name");
            MacroParam p;
            p.name = cur().text;
            advance();
            if (skip_op("=")) FERROX_RETURN_IF_ERROR(parse_expression(&p.default_value, true));
            params->push_back(std::move(p));
        }
        advance();
        return Status::ok();
    }

    Status parse_macro_rest(Stmt* s) {
        if (cur().type != Tok::kName) return fail("expected a macro name");
        s->text = cur().text;
        advance();
        FERROX_RETURN_IF_ERROR(parse_params(&s->params));
        FERROX_RETURN_IF_ERROR(expect_block_end());
        int saved = loop_depth_;
        loop_depth_ = 0;
        std::string end;
        Status st = parse_body(&s->body, {"endmacro"}, &end);
        loop_depth_ = saved;
        FERROX_RETURN_IF_ERROR(st);
        if (cur().type == Tok::kName) advance();  // {% endmacro name %}
        return expect_block_end();
    }

    Status parse_call_rest(Stmt* s) {
        if (is_op("(")) FERROX_RETURN_IF_ERROR(parse_params(&s->params));
        FERROX_RETURN_IF_ERROR(parse_expression(&s->expr, true));
        if (s->expr->kind != ExprKind::kCall) return fail("expected a call after 'call'");
        FERROX_RETURN_IF_ERROR(expect_block_end());
        int saved = loop_depth_;
        loop_depth_ = 0;
        std::string end;
        Status st = parse_body(&s->body, {"endcall"}, &end);
        loop_depth_ = saved;
        FERROX_RETURN_IF_ERROR(st);
        return expect_block_end();
    }

    // `| f(args) | g` applied to a placeholder (filter blocks, `set x | f` blocks).
    Status parse_filter_chain(ExprPtr* out) {
        ExprPtr base = node(ExprKind::kPlaceholder, cur().line);
        bool first = true;
        while (first || is_op("|")) {
            if (!first || is_op("|")) skip_op("|");
            first = false;
            FERROX_RETURN_IF_ERROR(parse_filter_one(&base));
        }
        *out = std::move(base);
        return Status::ok();
    }

    // ---- expressions (precedence as jinja2's parser) ----

    Status parse_tuple(ExprPtr* out, bool with_cond) {
        int line = cur().line;
        ExprPtr first;
        FERROX_RETURN_IF_ERROR(parse_expression(&first, with_cond));
        if (!is_op(",")) {
            *out = std::move(first);
            return Status::ok();
        }
        ExprPtr t = node(ExprKind::kTuple, line);
        t->args.push_back(std::move(first));
        while (skip_op(",")) {
            if (cur().type == Tok::kBlockEnd || cur().type == Tok::kVarEnd || is_op(")") ||
                is_name("if") || is_name("in"))
                break;
            ExprPtr e;
            FERROX_RETURN_IF_ERROR(parse_expression(&e, with_cond));
            t->args.push_back(std::move(e));
        }
        *out = std::move(t);
        return Status::ok();
    }

    Status parse_expression(ExprPtr* out, bool with_cond) {
        FERROX_RETURN_IF_ERROR(enter());
        Status st = with_cond ? parse_condexpr(out) : parse_or(out);
        --nesting_;
        return st;
    }

    Status parse_condexpr(ExprPtr* out) {
        ExprPtr e;
        FERROX_RETURN_IF_ERROR(parse_or(&e));
        while (is_name("if")) {
            int line = cur().line;
            advance();
            ExprPtr c = node(ExprKind::kCond, line);
            ExprPtr test;
            FERROX_RETURN_IF_ERROR(parse_or(&test));
            c->args.push_back(std::move(test));
            c->args.push_back(std::move(e));
            if (skip_name("else")) {
                ExprPtr other;
                FERROX_RETURN_IF_ERROR(enter());
                Status st = parse_condexpr(&other);
                --nesting_;
                FERROX_RETURN_IF_ERROR(st);
                c->args.push_back(std::move(other));
            } else {
                c->args.push_back(nullptr);
            }
            e = std::move(c);
        }
        *out = std::move(e);
        return Status::ok();
    }

    Status parse_or(ExprPtr* out) {
        ExprPtr e;
        FERROX_RETURN_IF_ERROR(parse_and(&e));
        while (is_name("or")) {
            int line = cur().line;
            advance();
            ExprPtr r;
            FERROX_RETURN_IF_ERROR(parse_and(&r));
            ExprPtr n = node(ExprKind::kOr, line);
            n->args.push_back(std::move(e));
            n->args.push_back(std::move(r));
            e = std::move(n);
        }
        *out = std::move(e);
        return Status::ok();
    }

    Status parse_and(ExprPtr* out) {
        ExprPtr e;
        FERROX_RETURN_IF_ERROR(parse_not(&e));
        while (is_name("and")) {
            int line = cur().line;
            advance();
            ExprPtr r;
            FERROX_RETURN_IF_ERROR(parse_not(&r));
            ExprPtr n = node(ExprKind::kAnd, line);
            n->args.push_back(std::move(e));
            n->args.push_back(std::move(r));
            e = std::move(n);
        }
        *out = std::move(e);
        return Status::ok();
    }

    Status parse_not(ExprPtr* out) {
        if (is_name("not")) {
            int line = cur().line;
            advance();
            FERROX_RETURN_IF_ERROR(enter());
            ExprPtr inner;
            Status st = parse_not(&inner);
            --nesting_;
            FERROX_RETURN_IF_ERROR(st);
            ExprPtr n = node(ExprKind::kUnary, line);
            n->unary_op = 'n';
            n->args.push_back(std::move(inner));
            *out = std::move(n);
            return Status::ok();
        }
        return parse_compare(out);
    }

    Status parse_compare(ExprPtr* out) {
        int line = cur().line;
        ExprPtr e;
        FERROX_RETURN_IF_ERROR(parse_math1(&e));
        ExprPtr cmp;
        while (true) {
            CmpOp op;
            if (is_op("=="))
                op = CmpOp::kEq;
            else if (is_op("!="))
                op = CmpOp::kNe;
            else if (is_op("<"))
                op = CmpOp::kLt;
            else if (is_op("<="))
                op = CmpOp::kLe;
            else if (is_op(">"))
                op = CmpOp::kGt;
            else if (is_op(">="))
                op = CmpOp::kGe;
            else if (is_name("in"))
                op = CmpOp::kIn;
            else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
                op = CmpOp::kNotIn;
                advance();
            } else {
                break;
            }
            advance();
            if (!cmp) {
                cmp = node(ExprKind::kCompare, line);
                cmp->args.push_back(std::move(e));
            }
            ExprPtr r;
            FERROX_RETURN_IF_ERROR(parse_math1(&r));
            cmp->args.push_back(std::move(r));
            cmp->cmp_ops.push_back(op);
        }
        *out = cmp ? std::move(cmp) : std::move(e);
        return Status::ok();
    }

    Status binary_chain(ExprPtr* out, Status (Parser::*next)(ExprPtr*),
                        std::initializer_list<std::pair<const char*, BinOp>> ops) {
        ExprPtr e;
        FERROX_RETURN_IF_ERROR((this->*next)(&e));
        while (true) {
            const std::pair<const char*, BinOp>* hit = nullptr;
            for (const auto& o : ops)
                if (is_op(o.first)) hit = &o;
            if (!hit) break;
            int line = cur().line;
            advance();
            ExprPtr r;
            FERROX_RETURN_IF_ERROR((this->*next)(&r));
            ExprPtr n = node(ExprKind::kBinary, line);
            n->bin_op = hit->second;
            n->args.push_back(std::move(e));
            n->args.push_back(std::move(r));
            e = std::move(n);
        }
        *out = std::move(e);
        return Status::ok();
    }

    Status parse_math1(ExprPtr* out) {
        return binary_chain(out, &Parser::parse_concat, {{"+", BinOp::kAdd}, {"-", BinOp::kSub}});
    }
    Status parse_concat(ExprPtr* out) {
        return binary_chain(out, &Parser::parse_math2, {{"~", BinOp::kConcat}});
    }
    Status parse_math2(ExprPtr* out) {
        return binary_chain(
            out, &Parser::parse_pow,
            {{"*", BinOp::kMul}, {"/", BinOp::kDiv}, {"//", BinOp::kFloorDiv}, {"%", BinOp::kMod}});
    }
    Status parse_pow(ExprPtr* out) {
        return binary_chain(out, &Parser::parse_unary_filtered, {{"**", BinOp::kPow}});
    }
    Status parse_unary_filtered(ExprPtr* out) { return parse_unary(out, true); }

    Status parse_unary(ExprPtr* out, bool with_filter) {
        FERROX_RETURN_IF_ERROR(enter());
        int line = cur().line;
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            char op = cur().text[0];
            advance();
            ExprPtr inner;
            Status st = parse_unary(&inner, false);
            if (!st.is_ok()) return st;
            e = node(ExprKind::kUnary, line);
            e->unary_op = op;
            e->args.push_back(std::move(inner));
        } else {
            Status st = parse_primary(&e);
            if (!st.is_ok()) return st;
        }
        FERROX_RETURN_IF_ERROR(parse_postfix(&e));
        if (with_filter) FERROX_RETURN_IF_ERROR(parse_filter_expr(&e));
        --nesting_;
        *out = std::move(e);
        return Status::ok();
    }

    Status parse_primary(ExprPtr* out) {
        const Token& t = cur();
        int line = t.line;
        if (t.type == Tok::kName) {
            const std::string& n = t.text;
            ExprPtr e = node(ExprKind::kLiteral, line);
            if (n == "true" || n == "True") {
                e->value = Value::boolean(true);
            } else if (n == "false" || n == "False") {
                e->value = Value::boolean(false);
            } else if (n == "none" || n == "None") {
                e->value = Value::none();
            } else {
                e->kind = ExprKind::kName;
                e->name = n;
            }
            advance();
            *out = std::move(e);
            return Status::ok();
        }
        if (t.type == Tok::kString) {
            std::string s = t.text;
            advance();
            while (cur().type == Tok::kString) {
                s += cur().text;
                advance();
            }
            ExprPtr e = node(ExprKind::kLiteral, line);
            e->value = Value::string(std::move(s));
            *out = std::move(e);
            return Status::ok();
        }
        if (t.type == Tok::kInt || t.type == Tok::kFloat) {
            ExprPtr e = node(ExprKind::kLiteral, line);
            e->value = t.type == Tok::kInt ? Value::integer(t.i) : Value::number(t.f);
            advance();
            *out = std::move(e);
            return Status::ok();
        }
        if (is_op("(")) {
            advance();
            if (skip_op(")")) {
                *out = node(ExprKind::kTuple, line);
                return Status::ok();
            }
            ExprPtr first;
            FERROX_RETURN_IF_ERROR(parse_expression(&first, true));
            if (skip_op(")")) {
                *out = std::move(first);
                return Status::ok();
            }
            ExprPtr tup = node(ExprKind::kTuple, line);
            tup->args.push_back(std::move(first));
            while (skip_op(",")) {
                if (is_op(")")) break;
                ExprPtr e;
                FERROX_RETURN_IF_ERROR(parse_expression(&e, true));
                tup->args.push_back(std::move(e));
            }
            FERROX_RETURN_IF_ERROR(expect_op(")"));
            *out = std::move(tup);
            return Status::ok();
        }
        if (is_op("[")) {
            advance();
            ExprPtr list = node(ExprKind::kList, line);
            while (!is_op("]")) {
                if (!list->args.empty()) FERROX_RETURN_IF_ERROR(expect_op(","));
                if (is_op("]")) break;
                ExprPtr e;
                FERROX_RETURN_IF_ERROR(parse_expression(&e, true));
                list->args.push_back(std::move(e));
            }
            advance();
            *out = std::move(list);
            return Status::ok();
        }
        if (is_op("{")) {
            advance();
            ExprPtr dict = node(ExprKind::kDict, line);
            while (!is_op("}")) {
                if (!dict->args.empty()) FERROX_RETURN_IF_ERROR(expect_op(","));
                if (is_op("}")) break;
                ExprPtr k, v;
                FERROX_RETURN_IF_ERROR(parse_expression(&k, true));
                FERROX_RETURN_IF_ERROR(expect_op(":"));
                FERROX_RETURN_IF_ERROR(parse_expression(&v, true));
                dict->args.push_back(std::move(k));
                dict->args.push_back(std::move(v));
            }
            advance();
            *out = std::move(dict);
            return Status::ok();
        }
        return fail("unexpected " + describe(t));
    }

    Status parse_call_args(Expr* call) {
        // cur() is '('
        advance();
        bool seen_kw = false;
        bool first = true;
        while (!is_op(")")) {
            if (!first) {
                FERROX_RETURN_IF_ERROR(expect_op(","));
                if (is_op(")")) break;
            }
            first = false;
            if (is_op("*") || is_op("**")) return fail("*args and **kwargs are not supported");
            if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
                std::string name = cur().text;
                advance();
                advance();
                ExprPtr v;
                FERROX_RETURN_IF_ERROR(parse_expression(&v, true));
                call->kwargs.emplace_back(std::move(name), std::move(v));
                seen_kw = true;
            } else {
                if (seen_kw) return fail("positional argument follows keyword argument");
                ExprPtr v;
                FERROX_RETURN_IF_ERROR(parse_expression(&v, true));
                call->args.push_back(std::move(v));
            }
        }
        advance();
        return Status::ok();
    }

    Status parse_postfix(ExprPtr* e) {
        while (true) {
            int line = cur().line;
            if (is_op(".")) {
                advance();
                if (cur().type == Tok::kName) {
                    ExprPtr n = node(ExprKind::kGetAttr, line);
                    n->name = cur().text;
                    n->args.push_back(std::move(*e));
                    advance();
                    *e = std::move(n);
                } else if (cur().type == Tok::kInt) {
                    ExprPtr n = node(ExprKind::kGetItem, line);
                    n->args.push_back(std::move(*e));
                    ExprPtr idx = node(ExprKind::kLiteral, line);
                    idx->value = Value::integer(cur().i);
                    n->args.push_back(std::move(idx));
                    advance();
                    *e = std::move(n);
                } else {
                    return fail("expected an attribute name after '.'");
                }
            } else if (is_op("[")) {
                advance();
                FERROX_RETURN_IF_ERROR(parse_subscript(e, line));
            } else if (is_op("(")) {
                ExprPtr n = node(ExprKind::kCall, line);
                n->args.push_back(std::move(*e));
                FERROX_RETURN_IF_ERROR(parse_call_args(n.get()));
                *e = std::move(n);
            } else {
                return Status::ok();
            }
        }
    }

    Status parse_subscript(ExprPtr* e, int line) {
        ExprPtr parts[3];
        int n_colons = 0;
        while (!is_op("]")) {
            if (is_op(":")) {
                if (++n_colons > 2) return fail("invalid slice");
                advance();
                continue;
            }
            if (parts[n_colons]) return fail("expected ']'");
            FERROX_RETURN_IF_ERROR(parse_expression(&parts[n_colons], true));
            if (is_op(",")) return fail("tuple subscripts are not supported");
        }
        advance();
        if (n_colons == 0) {
            if (!parts[0]) return fail("expected an index");
            ExprPtr n = node(ExprKind::kGetItem, line);
            n->args.push_back(std::move(*e));
            n->args.push_back(std::move(parts[0]));
            *e = std::move(n);
            return Status::ok();
        }
        ExprPtr n = node(ExprKind::kSlice, line);
        n->args.push_back(std::move(*e));
        for (auto& p : parts) n->args.push_back(std::move(p));
        *e = std::move(n);
        return Status::ok();
    }

    Status parse_filter_one(ExprPtr* e) {
        int line = cur().line;
        if (cur().type != Tok::kName) return fail("expected a filter name");
        ExprPtr f = node(ExprKind::kFilter, line);
        f->name = cur().text;
        advance();
        f->filter = find_filter(f->name);
        if (!f->filter) return syntax_error(line, "no filter named '" + f->name + "'");
        f->args.push_back(std::move(*e));
        if (is_op("(")) FERROX_RETURN_IF_ERROR(parse_call_args(f.get()));
        *e = std::move(f);
        return Status::ok();
    }

    Status parse_filter_expr(ExprPtr* e) {
        while (true) {
            if (is_op("|")) {
                advance();
                FERROX_RETURN_IF_ERROR(parse_filter_one(e));
            } else if (is_name("is")) {
                int line = cur().line;
                advance();
                ExprPtr t = node(ExprKind::kTest, line);
                t->negated = skip_name("not");
                if (cur().type != Tok::kName) return fail("expected a test name");
                t->name = cur().text;
                advance();
                t->test = find_test(t->name);
                if (!t->test) return syntax_error(line, "no test named '" + t->name + "'");
                t->args.push_back(std::move(*e));
                if (is_op("(")) {
                    FERROX_RETURN_IF_ERROR(parse_call_args(t.get()));
                } else if ((cur().type == Tok::kName || cur().type == Tok::kString ||
                            cur().type == Tok::kInt || cur().type == Tok::kFloat || is_op("(") ||
                            is_op("[") || is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and")) {
                    if (is_name("is")) return fail("you cannot chain multiple tests with is");
                    ExprPtr arg;
                    FERROX_RETURN_IF_ERROR(parse_primary(&arg));
                    FERROX_RETURN_IF_ERROR(parse_postfix(&arg));
                    t->args.push_back(std::move(arg));
                }
                *e = std::move(t);
            } else {
                return Status::ok();
            }
        }
    }

    std::vector<Token> toks_;
    size_t i_ = 0;
    int max_nesting_;
    int nesting_ = 0;
    int loop_depth_ = 0;
};

}  // namespace

Status parse_template(std::string_view source, int max_nesting, StmtList* out) {
    std::vector<Token> toks;
    Lexer lexer(source);
    FERROX_RETURN_IF_ERROR(lexer.run(&toks));
    Parser parser(std::move(toks), max_nesting);
    return parser.parse(out);
}

}  // namespace ferrox::jinja
