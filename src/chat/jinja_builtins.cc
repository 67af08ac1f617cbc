// Built-in filters, tests, globals and methods of the Jinja engine, with Python semantics.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "chat/jinja_runtime.h"

namespace ferrox::jinja {

// ---------------------------------------------------------------------------------------------
// Python str helpers

bool py_isspace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

std::vector<uint32_t> decode(std::string_view s) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0; i < s.size();) cps.push_back(utf8_next(s, i));
    return cps;
}

bool in_chars(uint32_t cp, const std::vector<uint32_t>* set) {
    if (!set) return py_isspace(cp);
    return std::find(set->begin(), set->end(), cp) != set->end();
}

}  // namespace

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
    std::vector<uint32_t> set;
    if (chars) set = decode(*chars);
    const std::vector<uint32_t>* setp = chars ? &set : nullptr;
    size_t b = 0, e = s.size();
    if (left) {
        while (b < e) {
            size_t i = b;
            uint32_t cp = utf8_next(s, i);
            if (!in_chars(cp, setp)) break;
            b = i;
        }
    }
    if (right) {
        while (e > b) {
            size_t start = e - 1;
            while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
            size_t i = start;
            uint32_t cp = utf8_next(s, i);
            if (i != e || !in_chars(cp, setp)) break;
            e = start;
        }
    }
    return std::string(s.substr(b, e - b));
}

namespace {

char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string str_upper(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = ascii_upper(c);
    return r;
}
std::string str_lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = ascii_lower(c);
    return r;
}
std::string str_capitalize(std::string_view s) {
    std::string r = str_lower(s);
    if (!r.empty()) r[0] = ascii_upper(r[0]);
    return r;
}
// Python str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
std::string str_title(std::string_view s) {
    std::string r(s);
    bool prev_cased = false;
    for (char& c : r) {
        if (ascii_alpha(c)) {
            c = prev_cased ? ascii_lower(c) : ascii_upper(c);
            prev_cased = true;
        } else {
            prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
        }
    }
    return r;
}

std::string str_replace(std::string_view s, std::string_view from, std::string_view to,
                        int64_t count) {
    std::string r;
    if (from.empty()) {
        // Python inserts `to` before every character and at the end.
        int64_t n = 0;
        size_t i = 0;
        while (i < s.size()) {
            if (count < 0 || n < count) {
                r += to;
                ++n;
            }
            size_t start = i;
            utf8_next(s, i);
            r.append(s.substr(start, i - start));
        }
        if (count < 0 || n < count) r += to;
        return r;
    }
    size_t pos = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        size_t hit = s.find(from, pos);
        if (hit == std::string_view::npos) break;
        r.append(s.substr(pos, hit - pos));
        r += to;
        pos = hit + from.size();
        ++n;
    }
    r.append(s.substr(pos));
    return r;
}

// Python str.split / str.rsplit.
std::vector<std::string> str_split(std::string_view s, const std::string* sep, int64_t maxsplit,
                                   bool from_right) {
    std::vector<std::string> parts;
    if (sep) {
        if (!from_right) {
            size_t pos = 0;
            while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
                size_t hit = s.find(*sep, pos);
                if (hit == std::string_view::npos) break;
                parts.emplace_back(s.substr(pos, hit - pos));
                pos = hit + sep->size();
            }
            parts.emplace_back(s.substr(pos));
        } else {
            size_t end = s.size();
            while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
                if (end < sep->size()) break;
                size_t hit = s.rfind(*sep, end - sep->size());
                if (hit == std::string_view::npos) break;
                parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
                end = hit;
            }
            parts.emplace_back(s.substr(0, end));
            std::reverse(parts.begin(), parts.end());
        }
        return parts;
    }
    // Whitespace runs; empty strings never appear.
    std::vector<std::pair<size_t, size_t>> words;  // byte ranges
    std::vector<uint32_t> cps;
    std::vector<size_t> offs;
    for (size_t i = 0; i < s.size();) {
        offs.push_back(i);
        cps.push_back(utf8_next(s, i));
    }
    offs.push_back(s.size());
    size_t n = cps.size();
    if (!from_right) {
        size_t i = 0;
        while (i < n) {
            while (i < n && py_isspace(cps[i])) ++i;
            if (i >= n) break;
            if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
                // The remainder keeps its trailing whitespace.
                parts.emplace_back(s.substr(offs[i]));
                return parts;
            }
            size_t j = i;
            while (j < n && !py_isspace(cps[j])) ++j;
            parts.emplace_back(s.substr(offs[i], offs[j] - offs[i]));
            i = j;
        }
        return parts;
    }
    size_t i = n;
    while (i > 0) {
        while (i > 0 && py_isspace(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
            parts.emplace_back(s.substr(0, offs[i]));
            break;
        }
        size_t j = i;
        while (j > 0 && !py_isspace(cps[j - 1])) --j;
        parts.emplace_back(s.substr(offs[j], offs[i] - offs[j]));
        i = j;
    }
    std::reverse(parts.begin(), parts.end());
    return parts;
}

// Python str.splitlines() (without keepends).
std::vector<std::string> str_splitlines(std::string_view s) {
    std::vector<std::string> lines;
    size_t start = 0, i = 0;
    while (i < s.size()) {
        size_t here = i;
        uint32_t cp = utf8_next(s, i);
        bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                   cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!brk) continue;
        lines.emplace_back(s.substr(start, here - start));
        if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
        start = i;
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return lines;
}

// Index of code point `cp_index` as a byte offset (ASCII fast path).
size_t byte_offset(std::string_view s, int64_t cp_index) {
    if (is_ascii(s)) return static_cast<size_t>(cp_index);
    size_t i = 0;
    for (int64_t k = 0; k < cp_index && i < s.size(); ++k) utf8_next(s, i);
    return i;
}
int64_t cp_index_of(std::string_view s, size_t byte_off) {
    return static_cast<int64_t>(utf8_length(s.substr(0, byte_off)));
}

std::string soft_str(const Value& v) { return to_str(v); }

bool arg_bool(CallArgs& a, size_t i, std::string_view name, bool dflt) {
    const Value* v = a.get(i, name);
    return v ? truthy(*v) : dflt;
}

// Requires an int argument; fails the render otherwise.
bool arg_int(Interp& in, const Expr& at, CallArgs& a, size_t i, std::string_view name, int64_t dflt,
             int64_t* out) {
    const Value* v = a.get(i, name);
    if (!v || v->is_none()) {
        *out = dflt;
        return true;
    }
    if (!v->is_int() && !v->is_bool()) {
        in.fail(at.line,
                std::string("'") + type_name(*v) + "' object cannot be interpreted as an integer");
        return false;
    }
    *out = v->as_int();
    return true;
}

bool arg_str(Interp& in, const Expr& at, CallArgs& a, size_t i, std::string_view name,
             const std::string** out) {
    const Value* v = a.get(i, name);
    if (!v || v->is_none()) {
        *out = nullptr;
        return true;
    }
    if (!v->is_string()) {
        in.fail(at.line, std::string("expected a string argument, got '") + type_name(*v) + "'");
        return false;
    }
    *out = &v->str();
    return true;
}

Value make_str(Interp& in, const Expr& at, std::string s) {
    return in.new_string(std::move(s), at.line);
}

// Item lookup by a dotted attribute path, as jinja's make_attrgetter does (getitem per part).
Value get_path(Interp& in, const Expr& at, Value v, const std::string& path) {
    size_t pos = 0;
    while (true) {
        size_t dot = path.find('.', pos);
        std::string part =
            path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        Value key;
        bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                   [](char c) { return c >= '0' && c <= '9'; });
        key = digits ? Value::integer(std::stoll(part)) : Value::string(part);
        if (v.is_undefined()) {
            in.fail_undefined(at.line, v);
            return Value();
        }
        v = in.getitem(v, key, at);
        if (in.failed()) return Value();
        if (dot == std::string::npos) return v;
        pos = dot + 1;
    }
}

// ---------------------------------------------------------------------------------------------
// printf-style formatting (Python's str % args), following CPython's PyUnicode_Format step by
// step (unicode_format_arg_parse / _format / _output), since tool prompts print numbers with it.

struct PercentSpec {
    bool ljust = false;  // '-'
    bool sign = false;   // '+'
    bool blank = false;  // ' '
    bool alt = false;    // '#'
    bool zero = false;   // '0'
    int64_t width = -1;
    int64_t prec = -1;
    char conv = 0;
};

// Pads one converted value to the spec's width (unicode_format_arg_output). `numeric` bodies
// may start with '-' and, for %#x/%#o, carry their 0x/0o prefix right after the sign: the sign
// and prefix go before zero padding and after space padding, as in Python.
void percent_pad(std::string& out, std::string_view body, const PercentSpec& sp, bool numeric) {
    size_t pos = 0;
    int64_t len = static_cast<int64_t>(utf8_length(body));
    char sign = 0;
    if (numeric) {
        if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
            sign = body[0];
            ++pos;
            --len;
        } else if (sp.sign) {
            sign = '+';
        } else if (sp.blank) {
            sign = ' ';
        }
    }
    const char fill = numeric && sp.zero ? '0' : ' ';
    int64_t width = std::max(sp.width, len);
    if (sign) {
        if (fill != ' ') out += sign;
        if (width > len) --width;
    }
    const bool prefix = numeric && sp.alt && (sp.conv == 'x' || sp.conv == 'X' || sp.conv == 'o');
    if (prefix) {
        if (fill != ' ') {
            out.append(body.substr(pos, 2));
            pos += 2;
        }
        width = std::max<int64_t>(width - 2, 0);
        len -= 2;
    }
    if (width > len && !sp.ljust) {
        out.append(static_cast<size_t>(width - len), fill);
        width = len;
    }
    if (fill == ' ') {
        if (sign) out += sign;
        if (prefix) {
            out.append(body.substr(pos, 2));
            pos += 2;
        }
    }
    out.append(body.substr(pos));
    if (width > len) out.append(static_cast<size_t>(width - len), ' ');
}

// %d/%i/%u/%x/%X/%o of an integer given as sign + digits (_PyUnicode_FormatLong): precision
// zero-pads the digits; '#' adds 0x/0X/0o.
std::string percent_int_body(bool negative, std::string digits, const PercentSpec& sp) {
    if (sp.prec > static_cast<int64_t>(digits.size()))
        digits.insert(0, static_cast<size_t>(sp.prec) - digits.size(), '0');
    std::string r = negative ? "-" : "";
    if (sp.alt && sp.conv != 'd' && sp.conv != 'i' && sp.conv != 'u')
        r += sp.conv == 'o' ? "0o" : sp.conv == 'X' ? "0X" : "0x";
    r += digits;
    if (sp.conv == 'X') r = str_upper(r);
    return r;
}

std::string digits_of(uint64_t mag, int base) {
    static const char kDigits[] = "0123456789abcdef";
    std::string d;
    do {
        d += kDigits[mag % static_cast<uint64_t>(base)];
        mag /= static_cast<uint64_t>(base);
    } while (mag);
    std::reverse(d.begin(), d.end());
    return d;
}

// %e/%f/%g (and upper-case forms) of a double: glibc's printf and CPython's dtoa both round
// correctly, so the digits agree; inf/nan are spelled as Python does (no "-nan").
std::string percent_float_body(double x, const PercentSpec& sp) {
    const bool upper = sp.conv == 'E' || sp.conv == 'F' || sp.conv == 'G';
    if (!std::isfinite(x)) {
        std::string r = std::isnan(x) ? "nan" : (x < 0 ? "-inf" : "inf");
        return upper ? str_upper(r) : r;
    }
    int prec = sp.prec < 0 ? 6 : static_cast<int>(sp.prec);
    char fmt[8] = "%";
    size_t n = 1;
    if (sp.alt) fmt[n++] = '#';
    fmt[n++] = '.';
    fmt[n++] = '*';
    fmt[n++] = sp.conv;
    fmt[n] = 0;
    int need = std::snprintf(nullptr, 0, fmt, prec, x);
    std::string r(static_cast<size_t>(std::max(need, 0)) + 1, '\0');
    std::snprintf(r.data(), r.size(), fmt, prec, x);
    r.resize(static_cast<size_t>(std::max(need, 0)));
    return r;
}

// ascii(v): repr with every non-ASCII code point escaped as \xhh, \uhhhh or \Uhhhhhhhh.
std::string ascii_repr(const Value& v) {
    std::string rep, r;
    append_repr(rep, v);
    for (size_t i = 0; i < rep.size();) {
        uint32_t cp = utf8_next(rep, i);
        if (cp < 0x80) {
            r += static_cast<char>(cp);
            continue;
        }
        char buf[16];
        if (cp < 0x100)
            std::snprintf(buf, sizeof buf, "\\x%02x", cp);
        else if (cp < 0x10000)
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
        else
            std::snprintf(buf, sizeof buf, "\\U%08x", cp);
        r += buf;
    }
    return r;
}

// Converts one value by its spec and appends it padded (unicode_format_arg_format).
// conv_cp and conv_index (in code points) name the conversion character in errors.
bool percent_convert(Interp& in, const Expr& at, const Value& v, const PercentSpec& sp,
                     uint32_t conv_cp, int64_t conv_index, std::string* out) {
    auto need_defined = [&] {
        if (!v.is_undefined()) return true;
        in.fail_undefined(at.line, v);
        return false;
    };
    std::string body;
    bool numeric = false;
    switch (sp.conv) {
        case 's':
        case 'r':
        case 'a': {
            if (sp.conv == 's')
                body = to_str(v);
            else if (sp.conv == 'r')
                append_repr(body, v);
            else
                body = ascii_repr(v);
            if (sp.prec >= 0) body.resize(std::min(body.size(), byte_offset(body, sp.prec)));
            break;
        }
        case 'c': {
            if (v.is_int() || v.is_bool()) {
                int64_t cp = v.as_int();
                if (cp < 0 || cp > 0x10FFFF) {
                    in.fail(at.line, "%c arg not in range(0x110000)");
                    return false;
                }
                utf8_append(body, static_cast<uint32_t>(cp));
            } else if (v.is_string() && utf8_length(v.str()) == 1) {
                body = v.str();
            } else {
                if (!need_defined()) return false;
                in.fail(at.line, "%c requires int or char");
                return false;
            }
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o': {
            numeric = true;
            const bool decimal = sp.conv == 'd' || sp.conv == 'i' || sp.conv == 'u';
            if (!need_defined()) return false;
            if (v.is_int() || v.is_bool()) {
                int64_t i = v.as_int();
                // Magnitude through unsigned arithmetic: -INT64_MIN does not fit in int64.
                uint64_t mag = i < 0 ? ~static_cast<uint64_t>(i) + 1 : static_cast<uint64_t>(i);
                int base = decimal ? 10 : sp.conv == 'o' ? 8 : 16;
                body = percent_int_body(i < 0, digits_of(mag, base), sp);
            } else if (v.is_float() && decimal) {
                // int(x): truncation; "%.0f" prints an integral double's digits exactly, so
                // floats beyond int64 print as Python's big ints do.
                double x = v.as_double();
                if (!std::isfinite(x)) {
                    in.fail(at.line, std::isnan(x) ? "cannot convert float NaN to integer"
                                                   : "cannot convert float infinity to integer");
                    return false;
                }
                x = std::trunc(x);
                char buf[400];
                std::snprintf(buf, sizeof buf, "%.0f", std::fabs(x));
                body = percent_int_body(x < 0, buf, sp);
            } else {
                in.fail(at.line, std::string("%") + sp.conv +
                                     " format: " + (decimal ? "a real number" : "an integer") +
                                     " is required, not " + type_name(v));
                return false;
            }
            break;
        }
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G':
            numeric = true;
            if (!need_defined()) return false;
            if (!v.is_number()) {
                in.fail(at.line, std::string("must be real number, not ") + type_name(v));
                return false;
            }
            body = percent_float_body(v.as_double(), sp);
            break;
        default: {
            std::string shown;
            utf8_append(shown, conv_cp);
            char hex[16];
            std::snprintf(hex, sizeof hex, "0x%x", conv_cp);
            in.fail(at.line, "unsupported format character '" + shown + "' (" + hex +
                                 ") at index " + std::to_string(conv_index));
            return false;
        }
    }
    percent_pad(*out, body, sp, numeric);
    return true;
}

}  // namespace

bool py_percent_format(Interp& in, const Expr& at, std::string_view f, const Value& args,
                       std::string* out) {
    const bool is_tuple = args.is_array() && args.arr().is_tuple;
    // CPython accepts %(key)s when the argument has __getitem__ and is neither a tuple nor a
    // str (so a list or jinja's Undefined counts), and then skips the "not all arguments
    // converted" check.
    const bool mapping = args.is_object() || (args.is_array() && !is_tuple) || args.is_undefined();
    // The argument cursor: `cur` is a tuple walked by argidx, or (arglen < 0) one value that
    // argidx -2 says is still unused.
    Value cur = args;
    int64_t arglen = is_tuple ? static_cast<int64_t>(args.arr().items.size()) : -1;
    int64_t argidx = is_tuple ? 0 : -2;
    auto next_arg = [&](Value* v) {
        if (argidx < arglen) {
            int64_t i = argidx++;
            *v = arglen < 0 ? cur : cur.arr().items[static_cast<size_t>(i)];
            return true;
        }
        in.fail(at.line, "not enough arguments for format string");
        return false;
    };
    // A width or precision beyond the output cap could only fail later, after allocating.
    const int64_t max_field = static_cast<int64_t>(in.options().max_output_bytes);
    auto star_arg = [&](int64_t* n) {
        Value v;
        if (!next_arg(&v)) return false;
        if (!v.is_int() && !v.is_bool()) {
            in.fail(at.line, "* wants int");
            return false;
        }
        *n = v.as_int();
        return true;
    };
    auto digits = [&](size_t* i, int64_t* n) {
        *n = 0;
        while (*i < f.size() && f[*i] >= '0' && f[*i] <= '9') {
            *n = *n * 10 + (f[*i] - '0');
            if (*n > max_field) return false;
            ++*i;
        }
        return true;
    };
    auto too_wide = [&] {
        in.fail_limit(at.line, "format width or precision too large");
        return false;
    };
    for (size_t i = 0; i < f.size();) {
        size_t pct = f.find('%', i);
        if (pct == std::string_view::npos) pct = f.size();
        out->append(f.substr(i, pct - i));
        if (pct == f.size()) break;
        i = pct + 1;
        if (i < f.size() && f[i] == '%') {
            *out += '%';
            ++i;
            continue;
        }
        PercentSpec sp;
        if (i < f.size() && f[i] == '(') {
            if (!mapping) {
                in.fail(at.line, "format requires a mapping");
                return false;
            }
            size_t key_start = ++i;
            int depth = 1;
            while (i < f.size() && depth > 0) {
                if (f[i] == ')')
                    --depth;
                else if (f[i] == '(')
                    ++depth;
                ++i;
            }
            if (depth > 0) {
                in.fail(at.line, "incomplete format key");
                return false;
            }
            std::string key(f.substr(key_start, i - 1 - key_start));
            cur = in.getitem(args, Value::string(key), at);
            if (in.failed()) return false;
            if (cur.is_undefined()) {
                in.fail(at.line, "KeyError: '" + key + "'");
                return false;
            }
            arglen = -1;
            argidx = -2;
        }
        for (; i < f.size(); ++i) {
            char c = f[i];
            if (c == '-')
                sp.ljust = true;
            else if (c == '+')
                sp.sign = true;
            else if (c == ' ')
                sp.blank = true;
            else if (c == '#')
                sp.alt = true;
            else if (c == '0')
                sp.zero = true;
            else
                break;
        }
        if (i < f.size() && f[i] == '*') {
            ++i;
            if (!star_arg(&sp.width)) return false;
            if (sp.width < 0) {
                sp.ljust = true;
                sp.width = sp.width == INT64_MIN ? INT64_MAX : -sp.width;
            }
            if (sp.width > max_field) return too_wide();
        } else if (!digits(&i, &sp.width)) {
            return too_wide();
        }
        if (i < f.size() && f[i] == '.') {
            ++i;
            if (i < f.size() && f[i] == '*') {
                ++i;
                if (!star_arg(&sp.prec)) return false;
                if (sp.prec < 0) sp.prec = 0;
                if (sp.prec > max_field) return too_wide();
            } else if (!digits(&i, &sp.prec)) {
                return too_wide();
            }
        }
        if (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
        if (i >= f.size()) {
            in.fail(at.line, "incomplete format");
            return false;
        }
        int64_t conv_index = cp_index_of(f, i);
        uint32_t conv_cp = utf8_next(f, i);
        sp.conv = conv_cp < 0x80 ? static_cast<char>(conv_cp) : '\0';  // '\0': unsupported
        Value v;
        if (!next_arg(&v)) return false;
        if (!percent_convert(in, at, v, sp, conv_cp, conv_index, out)) return false;
        if (out->size() > in.options().max_output_bytes) {
            in.fail_limit(at.line, "formatted string longer than " +
                                       std::to_string(in.options().max_output_bytes) + " bytes");
            return false;
        }
    }
    if (argidx < arglen && !mapping) {
        in.fail(at.line, "not all arguments converted during string formatting");
        return false;
    }
    return true;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Filters

Value f_tojson(Interp& in, const Expr& at, Value v, CallArgs& a) {
    // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonDumpOptions o;
    o.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
    const Value* indent = a.get(1, "indent");
    if (indent && !indent->is_none()) {
        if (indent->is_string())
            o.indent_str = &indent->str();
        else if (indent->is_int() || indent->is_bool())
            o.indent = static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64));
        else {
            in.fail(at.line, "tojson: indent must be an int or a string");
            return Value();
        }
    }
    const Value* seps = a.get(2, "separators");
    if (seps && !seps->is_none()) {
        if (!seps->is_array() || seps->arr().items.size() != 2 ||
            !seps->arr().items[0].is_string() || !seps->arr().items[1].is_string()) {
            in.fail(at.line, "tojson: separators must be a pair of strings");
            return Value();
        }
        o.item_sep = seps->arr().items[0].str();
        o.key_sep = seps->arr().items[1].str();
        if (o.item_sep.empty()) o.item_sep = std::string();
    }
    o.sort_keys = arg_bool(a, 3, "sort_keys", false);
    std::string out, err;
    if (seps && !seps->is_none() && o.item_sep.empty()) {
        // json.dumps with an empty item separator: emulate by dumping then fixing is not
        // possible; templates never do this.
        in.fail(at.line, "tojson: empty item separator is not supported");
        return Value();
    }
    if (!json_dump(out, v, o, &err)) {
        in.fail(at.line, err);
        return Value();
    }
    return make_str(in, at, std::move(out));
}

Value f_safe(Interp&, const Expr&, Value v, CallArgs&) { return v; }

Value f_string(Interp& in, const Expr& at, Value v, CallArgs&) {
    if (v.is_string()) return v;
    return make_str(in, at, soft_str(v));
}

Value f_escape(Interp& in, const Expr& at, Value v, CallArgs&) {
    std::string s = soft_str(v), r;
    for (char c : s) {
        switch (c) {
            case '&':
                r += "&amp;";
                break;
            case '<':
                r += "&lt;";
                break;
            case '>':
                r += "&gt;";
                break;
            case '"':
                r += "&#34;";
                break;
            case '\'':
                r += "&#39;";
                break;
            default:
                r += c;
        }
    }
    return make_str(in, at, std::move(r));
}

Value f_trim(Interp& in, const Expr& at, Value v, CallArgs& a) {
    const std::string* chars;
    if (!arg_str(in, at, a, 0, "chars", &chars)) return Value();
    return make_str(in, at, py_strip(soft_str(v), chars, true, true));
}

Value f_upper(Interp& in, const Expr& at, Value v, CallArgs&) {
    return make_str(in, at, str_upper(soft_str(v)));
}
Value f_lower(Interp& in, const Expr& at, Value v, CallArgs&) {
    return make_str(in, at, str_lower(soft_str(v)));
}
Value f_capitalize(Interp& in, const Expr& at, Value v, CallArgs&) {
    return make_str(in, at, str_capitalize(soft_str(v)));
}
Value f_title(Interp& in, const Expr& at, Value v, CallArgs&) {
    // jinja's do_title: split on runs of [-\s({\[<], capitalize each piece.
    std::string s = soft_str(v), r;
    auto is_sep = [](char c) {
        return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || c == '\t' ||
               c == '\n' || c == '\r' || c == '\f' || c == '\v';
    };
    size_t i = 0;
    while (i < s.size()) {
        size_t j = i;
        if (is_sep(s[i])) {
            while (j < s.size() && is_sep(s[j])) ++j;
            r.append(s, i, j - i);
        } else {
            while (j < s.size() && !is_sep(s[j])) ++j;
            r += str_capitalize(std::string_view(s).substr(i, j - i));
        }
        i = j;
    }
    return make_str(in, at, std::move(r));
}

Value f_replace(Interp& in, const Expr& at, Value v, CallArgs& a) {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    if (!from || !to) {
        in.fail(at.line, "replace() needs two arguments");
        return Value();
    }
    int64_t count;
    if (!arg_int(in, at, a, 2, "count", -1, &count)) return Value();
    std::string s = soft_str(v);
    in.charge_steps(s.size() / 8, at.line);
    return make_str(in, at, str_replace(s, soft_str(*from), soft_str(*to), count));
}

Value f_length(Interp& in, const Expr& at, Value v, CallArgs&) {
    switch (v.kind()) {
        case Value::Kind::kString:
            return Value::integer(static_cast<int64_t>(utf8_length(v.str())));
        case Value::Kind::kArray:
            return Value::integer(static_cast<int64_t>(v.arr().items.size()));
        case Value::Kind::kObject:
            return Value::integer(static_cast<int64_t>(v.obj().items.size()));
        case Value::Kind::kUndefined:
            return Value::integer(0);
        default:
            in.fail(at.line, std::string("object of type '") + type_name(v) + "' has no len()");
            return Value();
    }
}

Value f_list(Interp& in, const Expr& at, Value v, CallArgs&) {
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    return in.new_list(items->items, at.line);
}

Value f_first(Interp& in, const Expr& at, Value v, CallArgs&) {
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    return items->items.empty() ? Value() : items->items.front();
}

Value f_last(Interp& in, const Expr& at, Value v, CallArgs&) {
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    return items->items.empty() ? Value() : items->items.back();
}

Value f_reverse(Interp& in, const Expr& at, Value v, CallArgs&) {
    if (v.is_string()) {
        std::vector<uint32_t> cps = decode(v.str());
        std::string r;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) utf8_append(r, *it);
        return make_str(in, at, std::move(r));
    }
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    std::vector<Value> r(items->items.rbegin(), items->items.rend());
    return in.new_list(std::move(r), at.line);
}

Value f_join(Interp& in, const Expr& at, Value v, CallArgs& a) {
    const Value* sep = a.get(0, "d");
    const Value* attr = a.get(1, "attribute");
    std::string d = sep ? soft_str(*sep) : std::string();
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    in.charge_steps(items->items.size(), at.line);
    std::string r;
    bool first = true;
    for (const auto& item : items->items) {
        if (!first) r += d;
        first = false;
        if (attr && !attr->is_none()) {
            Value x = get_path(in, at, item, soft_str(*attr));
            if (in.failed()) return Value();
            append_str(r, x);
        } else {
            append_str(r, item);
        }
        if (r.size() > in.options().max_output_bytes) break;
    }
    return make_str(in, at, std::move(r));
}

Value f_default(Interp&, const Expr&, Value v, CallArgs& a) {
    const Value* dflt = a.get(0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v)))
        return dflt ? *dflt : Value::string(std::string());
    return v;
}

Value f_items(Interp& in, const Expr& at, Value v, CallArgs&) {
    if (v.is_undefined()) return in.new_list({}, at.line);
    if (!v.is_object()) {
        in.fail(at.line, "Can only get item pairs from a mapping.");
        return Value();
    }
    std::vector<Value> pairs;
    pairs.reserve(v.obj().items.size());
    for (const auto& kv : v.obj().items)
        pairs.push_back(make_list({Value::string(kv.first), kv.second}, true));
    return in.new_list(std::move(pairs), at.line);
}

Value f_int(Interp& in, const Expr& at, Value v, CallArgs& a) {
    const Value* dflt = a.get(0, "default");
    int64_t base;
    if (!arg_int(in, at, a, 1, "base", 10, &base)) return Value();
    Value fallback = dflt ? *dflt : Value::integer(0);
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) {
        double d = v.as_double();
        if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return fallback;
        return Value::integer(static_cast<int64_t>(d));
    }
    if (v.is_string()) {
        std::string s = py_strip(v.str(), nullptr, true, true);
        std::string digits;
        for (char c : s)
            if (c != '_') digits += c;
        if (!digits.empty() && base >= 2 && base <= 36) {
            char* end = nullptr;
            errno = 0;
            long long r = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
            if (errno == 0 && end && *end == 0) return Value::integer(r);
        }
        char* end = nullptr;
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18)
            return Value::integer(static_cast<int64_t>(d));
    }
    return fallback;
}

Value f_float(Interp&, const Expr&, Value v, CallArgs& a) {
    const Value* dflt = a.get(0, "default");
    Value fallback = dflt ? *dflt : Value::number(0.0);
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string()) {
        std::string s = py_strip(v.str(), nullptr, true, true);
        char* end = nullptr;
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == 0) return Value::number(d);
    }
    return fallback;
}

Value f_abs(Interp& in, const Expr& at, Value v, CallArgs&) {
    if (v.is_float()) return Value::number(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) {
        if (v.as_int() == INT64_MIN) {
            in.fail(at.line, "integer overflow");
            return Value();
        }
        return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    in.fail(at.line, std::string("bad operand type for abs(): '") + type_name(v) + "'");
    return Value();
}

// Python's round(x, n) for floats: correctly rounded, ties to even.
double py_round(double x, int64_t n) {
    if (!std::isfinite(x)) return x;
    if (n == 0) return std::nearbyint(x);
    if (n > 30 || n < -30) return n > 0 ? x : 0.0 * x;
    if (n > 0) {
        char buf[512];
        std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(n), x);
        return std::strtod(buf, nullptr);
    }
    double p = std::pow(10.0, static_cast<double>(-n));
    return std::nearbyint(x / p) * p;
}

Value f_round(Interp& in, const Expr& at, Value v, CallArgs& a) {
    int64_t precision;
    if (!arg_int(in, at, a, 0, "precision", 0, &precision)) return Value();
    const Value* method = a.get(1, "method");
    std::string m = method ? soft_str(*method) : "common";
    if (!v.is_number()) {
        in.fail(at.line, std::string("round() of '") + type_name(v) + "'");
        return Value();
    }
    double x = v.as_double();
    if (m == "common") return Value::number(py_round(x, precision));
    double p = std::pow(10.0, static_cast<double>(precision));
    if (m == "ceil") return Value::number(std::ceil(x * p) / p);
    if (m == "floor") return Value::number(std::floor(x * p) / p);
    in.fail(at.line, "method must be common, ceil or floor");
    return Value();
}

Value f_indent(Interp& in, const Expr& at, Value v, CallArgs& a) {
    const Value* width = a.get(0, "width");
    std::string ind;
    if (!width)
        ind = "    ";
    else if (width->is_string())
        ind = width->str();
    else if (width->is_int() || width->is_bool())
        ind.assign(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 1024)), ' ');
    else {
        in.fail(at.line, "indent width must be an int or a string");
        return Value();
    }
    bool first = arg_bool(a, 1, "first", false);
    bool blank = arg_bool(a, 2, "blank", false);
    std::string s = soft_str(v) + "\n";
    std::vector<std::string> lines = str_splitlines(s);
    std::string r;
    if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) {
            if (i) r += "\n" + ind;
            r += lines[i];
        }
    } else if (!lines.empty()) {
        r = lines[0];
        for (size_t i = 1; i < lines.size(); ++i) {
            r += '\n';
            if (!lines[i].empty()) r += ind;
            r += lines[i];
        }
    }
    if (first) r = ind + r;
    return make_str(in, at, std::move(r));
}

Value f_center(Interp& in, const Expr& at, Value v, CallArgs& a) {
    int64_t width;
    if (!arg_int(in, at, a, 0, "width", 80, &width)) return Value();
    std::string s = soft_str(v);
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width > 1 << 20) width = 1 << 20;
    if (width <= len) return make_str(in, at, s);
    int64_t total = width - len;
    int64_t left = total / 2 + (total & width & 1);
    return make_str(in, at,
                    std::string(static_cast<size_t>(left), ' ') + s +
                        std::string(static_cast<size_t>(total - left), ' '));
}

Value f_wordcount(Interp&, const Expr&, Value v, CallArgs&) {
    int64_t n = 0;
    bool in_word = false;
    for (char c : soft_str(v)) {
        bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                 static_cast<unsigned char>(c) >= 0x80;
        if (w && !in_word) ++n;
        in_word = w;
    }
    return Value::integer(n);
}

// key(x) for sort/unique/min/max: an attribute path, then lower-casing unless case-sensitive.
Value sort_key(Interp& in, const Expr& at, const Value& x, const Value* attr, bool case_sensitive) {
    Value k = (attr && !attr->is_none()) ? get_path(in, at, x, soft_str(*attr)) : x;
    if (!case_sensitive && k.is_string()) return Value::string(str_lower(k.str()));
    return k;
}

Value f_sort(Interp& in, const Expr& at, Value v, CallArgs& a) {
    bool reverse = arg_bool(a, 0, "reverse", false);
    bool cs = arg_bool(a, 1, "case_sensitive", false);
    const Value* attr = a.get(2, "attribute");
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    size_t n = items->items.size();
    std::vector<std::pair<Value, size_t>> keyed;
    keyed.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        keyed.emplace_back(sort_key(in, at, items->items[i], attr, cs), i);
        if (in.failed()) return Value();
    }
    in.charge_steps(n * 8, at.line);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        if (in.failed()) return false;
        bool ok;
        int c = in.compare(x.first, y.first, at, &ok);
        if (!ok) return false;
        return reverse ? c > 0 : c < 0;
    });
    if (in.failed()) return Value();
    std::vector<Value> r;
    r.reserve(n);
    for (const auto& k : keyed) r.push_back(items->items[k.second]);
    return in.new_list(std::move(r), at.line);
}

Value f_dictsort(Interp& in, const Expr& at, Value v, CallArgs& a) {
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const Value* by = a.get(1, "by");
    bool reverse = arg_bool(a, 2, "reverse", false);
    if (!v.is_object()) {
        in.fail(at.line, "dictsort: expected a mapping");
        return Value();
    }
    bool by_value = by && by->is_string() && by->str() == "value";
    std::vector<Value> pairs;
    for (const auto& kv : v.obj().items)
        pairs.push_back(make_list({Value::string(kv.first), kv.second}, true));
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
        if (in.failed()) return false;
        Value kx = x.arr().items[by_value ? 1 : 0], ky = y.arr().items[by_value ? 1 : 0];
        if (!cs && kx.is_string()) kx = Value::string(str_lower(kx.str()));
        if (!cs && ky.is_string()) ky = Value::string(str_lower(ky.str()));
        bool ok;
        int c = in.compare(kx, ky, at, &ok);
        return ok && (reverse ? c > 0 : c < 0);
    });
    if (in.failed()) return Value();
    return in.new_list(std::move(pairs), at.line);
}

Value f_unique(Interp& in, const Expr& at, Value v, CallArgs& a) {
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const Value* attr = a.get(1, "attribute");
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    std::vector<Value> seen, r;
    for (const auto& x : items->items) {
        Value k = sort_key(in, at, x, attr, cs);
        if (in.failed()) return Value();
        if (!in.charge_steps(seen.size(), at.line)) return Value();
        bool dup = false;
        for (const auto& s : seen)
            if (equals(s, k)) {
                dup = true;
                break;
            }
        if (!dup) {
            seen.push_back(k);
            r.push_back(x);
        }
    }
    return in.new_list(std::move(r), at.line);
}

Value min_max(Interp& in, const Expr& at, Value v, CallArgs& a, bool want_max) {
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const Value* attr = a.get(1, "attribute");
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    if (items->items.empty()) return Value();
    size_t best = 0;
    Value best_key = sort_key(in, at, items->items[0], attr, cs);
    for (size_t i = 1; i < items->items.size(); ++i) {
        Value k = sort_key(in, at, items->items[i], attr, cs);
        bool ok;
        int c = in.compare(k, best_key, at, &ok);
        if (!ok) return Value();
        if (want_max ? c > 0 : c < 0) {
            best = i;
            best_key = k;
        }
    }
    return items->items[best];
}
Value f_min(Interp& in, const Expr& at, Value v, CallArgs& a) {
    return min_max(in, at, std::move(v), a, false);
}
Value f_max(Interp& in, const Expr& at, Value v, CallArgs& a) {
    return min_max(in, at, std::move(v), a, true);
}

Value f_sum(Interp& in, const Expr& at, Value v, CallArgs& a) {
    const Value* attr = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    Value acc = start ? *start : Value::integer(0);
    for (const auto& x : items->items) {
        Value k = (attr && !attr->is_none()) ? get_path(in, at, x, soft_str(*attr)) : x;
        if (in.failed()) return Value();
        if (!acc.is_number() || !k.is_number()) {
            in.fail(at.line, "sum() of non-numbers");
            return Value();
        }
        if (acc.is_float() || k.is_float())
            acc = Value::number(acc.as_double() + k.as_double());
        else {
            int64_t r;
            if (__builtin_add_overflow(acc.as_int(), k.as_int(), &r)) {
                in.fail(at.line, "integer overflow");
                return Value();
            }
            acc = Value::integer(r);
        }
    }
    return acc;
}

Value f_batch(Interp& in, const Expr& at, Value v, CallArgs& a) {
    int64_t n;
    if (!arg_int(in, at, a, 0, "linecount", 1, &n)) return Value();
    if (n <= 0) {
        in.fail(at.line, "batch size must be positive");
        return Value();
    }
    const Value* fill = a.get(1, "fill_with");
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    std::vector<Value> out, cur;
    for (const auto& x : items->items) {
        cur.push_back(x);
        if (static_cast<int64_t>(cur.size()) == n) {
            out.push_back(in.new_list(std::move(cur), at.line));
            cur.clear();
        }
    }
    if (!cur.empty()) {
        if (fill && !fill->is_none())
            while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
        out.push_back(in.new_list(std::move(cur), at.line));
    }
    return in.new_list(std::move(out), at.line);
}

Value f_attr(Interp& in, const Expr& at, Value v, CallArgs& a) {
    const Value* name = a.get(0, "name");
    if (!name || !name->is_string()) {
        in.fail(at.line, "attr() needs an attribute name");
        return Value();
    }
    if (v.is_undefined()) {
        in.fail_undefined(at.line, v);
        return Value();
    }
    Value r = in.getattr(v, name->str(), at);
    if (r.is_undefined())  // the name belongs to the argument, which dies with this call
        return Value::undefined_owned(std::static_pointer_cast<const std::string>(name->payload()),
                                      r.undefined_why());
    return r;
}

Value f_format(Interp& in, const Expr& at, Value v, CallArgs& a) {
    // jinja's do_format: soft_str(value) % (kwargs or args).
    if (!a.pos.empty() && !a.kw.empty()) {
        in.fail(at.line, "can't handle positional and keyword arguments at the same time");
        return Value();
    }
    Value args = a.kw.empty() ? make_list(a.pos, /*is_tuple=*/true) : make_object(a.kw);
    std::string r;
    if (!py_percent_format(in, at, soft_str(v), args, &r)) return Value();
    return make_str(in, at, std::move(r));
}

// select/reject/selectattr/rejectattr: keep items whose test (or truthiness) matches.
Value select_impl(Interp& in, const Expr& at, Value v, CallArgs& a, bool by_attr, bool keep) {
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    size_t i0 = 0;
    std::string attr;
    if (by_attr) {
        if (a.pos.empty() || !a.pos[0].is_string()) {
            in.fail(at.line, "missing attribute name");
            return Value();
        }
        attr = a.pos[0].str();
        i0 = 1;
    }
    std::string test;
    CallArgs test_args;
    if (a.pos.size() > i0) {
        if (!a.pos[i0].is_string()) {
            in.fail(at.line, "test name must be a string");
            return Value();
        }
        test = a.pos[i0].str();
        test_args.pos.assign(a.pos.begin() + static_cast<long>(i0) + 1, a.pos.end());
        test_args.kw = a.kw;
    }
    in.charge_steps(items->items.size(), at.line);
    std::vector<Value> r;
    for (const auto& x : items->items) {
        Value subject = by_attr ? get_path(in, at, x, attr) : x;
        if (in.failed()) return Value();
        bool ok = test.empty() ? truthy(subject) : in.apply_test(test, subject, test_args, at);
        if (in.failed()) return Value();
        if (ok == keep) r.push_back(x);
    }
    return in.new_list(std::move(r), at.line);
}
Value f_select(Interp& in, const Expr& at, Value v, CallArgs& a) {
    return select_impl(in, at, std::move(v), a, false, true);
}
Value f_reject(Interp& in, const Expr& at, Value v, CallArgs& a) {
    return select_impl(in, at, std::move(v), a, false, false);
}
Value f_selectattr(Interp& in, const Expr& at, Value v, CallArgs& a) {
    return select_impl(in, at, std::move(v), a, true, true);
}
Value f_rejectattr(Interp& in, const Expr& at, Value v, CallArgs& a) {
    return select_impl(in, at, std::move(v), a, true, false);
}

Value f_map(Interp& in, const Expr& at, Value v, CallArgs& a) {
    std::shared_ptr<const Array> items;
    if (!in.iterate(v, at, &items)) return Value();
    in.charge_steps(items->items.size(), at.line);
    std::vector<Value> r;
    r.reserve(items->items.size());
    const Value* attr = nullptr;
    for (const auto& kv : a.kw)
        if (kv.first == "attribute") attr = &kv.second;
    if (attr) {
        const Value* dflt = nullptr;
        for (const auto& kv : a.kw)
            if (kv.first == "default") dflt = &kv.second;
        for (const auto& x : items->items) {
            Value y = get_path(in, at, x, soft_str(*attr));
            if (in.failed()) return Value();
            if (y.is_undefined() && dflt) y = *dflt;
            r.push_back(std::move(y));
        }
        return in.new_list(std::move(r), at.line);
    }
    if (a.pos.empty() || !a.pos[0].is_string()) {
        in.fail(at.line, "map() needs a filter name or attribute=");
        return Value();
    }
    std::string name = a.pos[0].str();
    CallArgs fargs;
    fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
    fargs.kw = a.kw;
    for (const auto& x : items->items) {
        CallArgs copy = fargs;
        r.push_back(in.apply_filter(name, x, copy, at));
        if (in.failed()) return Value();
    }
    return in.new_list(std::move(r), at.line);
}

Value f_count(Interp& in, const Expr& at, Value v, CallArgs& a) {
    return f_length(in, at, std::move(v), a);
}

struct FilterEntry {
    const char* name;
    FilterFn fn;
};
const FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_count},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// ---------------------------------------------------------------------------------------------
// Tests

const Value* test_arg(Interp& in, const Expr& at, CallArgs& a) {
    const Value* v = a.get(0, "other");
    if (!v) v = a.get(0, "value");
    if (!v) in.fail(at.line, "test needs an argument");
    return v;
}

bool t_defined(Interp&, const Expr&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interp&, const Expr&, const Value& v, CallArgs&) {
    return v.is_bool() && !v.as_bool();
}
bool t_integer(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_object(); }
bool t_iterable(Interp&, const Expr&, const Value& v, CallArgs&) {
    return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
}
bool t_sequence(Interp&, const Expr&, const Value& v, CallArgs&) {
    return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
}
bool t_callable(Interp&, const Expr&, const Value& v, CallArgs&) { return v.is_callable(); }
bool t_escaped(Interp&, const Expr&, const Value&, CallArgs&) { return false; }
bool t_lower(Interp&, const Expr&, const Value& v, CallArgs&) {
    if (!v.is_string()) return false;
    bool cased = false;
    for (char c : v.str()) {
        if (c >= 'A' && c <= 'Z') return false;
        cased |= c >= 'a' && c <= 'z';
    }
    return cased;
}
bool t_upper(Interp&, const Expr&, const Value& v, CallArgs&) {
    if (!v.is_string()) return false;
    bool cased = false;
    for (char c : v.str()) {
        if (c >= 'a' && c <= 'z') return false;
        cased |= c >= 'A' && c <= 'Z';
    }
    return cased;
}
bool number_or_fail(Interp& in, const Expr& at, const Value& v) {
    if (v.is_number()) return true;
    if (v.is_undefined())
        in.fail_undefined(at.line, v);
    else
        in.fail(at.line, std::string("unsupported operand type for %: '") + type_name(v) + "'");
    return false;
}
bool t_odd(Interp& in, const Expr& at, const Value& v, CallArgs&) {
    if (!number_or_fail(in, at, v)) return false;
    if (v.is_float()) return std::fmod(std::fabs(v.as_double()), 2.0) == 1.0;
    return (v.as_int() % 2) != 0;
}
bool t_even(Interp& in, const Expr& at, const Value& v, CallArgs&) {
    if (!number_or_fail(in, at, v)) return false;
    if (v.is_float()) return std::fmod(v.as_double(), 2.0) == 0.0;
    return (v.as_int() % 2) == 0;
}
bool t_divisibleby(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    const Value* n = a.get(0, "num");
    if (!n || !number_or_fail(in, at, v) || !number_or_fail(in, at, *n)) {
        if (!in.failed()) in.fail(at.line, "divisibleby needs a number");
        return false;
    }
    if (n->as_double() == 0) {
        in.fail(at.line, "integer division or modulo by zero");
        return false;
    }
    if (v.is_float() || n->is_float()) return std::fmod(v.as_double(), n->as_double()) == 0.0;
    return n->as_int() == -1 || v.as_int() % n->as_int() == 0;
}
bool t_eq(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    const Value* o = test_arg(in, at, a);
    return o && equals(v, *o);
}
bool t_ne(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    const Value* o = test_arg(in, at, a);
    return o && !equals(v, *o);
}
int cmp_test(Interp& in, const Expr& at, const Value& v, CallArgs& a, bool* ok) {
    const Value* o = test_arg(in, at, a);
    if (!o) {
        *ok = false;
        return 0;
    }
    return in.compare(v, *o, at, ok);
}
bool t_lt(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    bool ok;
    int c = cmp_test(in, at, v, a, &ok);
    return ok && c < 0;
}
bool t_le(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    bool ok;
    int c = cmp_test(in, at, v, a, &ok);
    return ok && c <= 0;
}
bool t_gt(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    bool ok;
    int c = cmp_test(in, at, v, a, &ok);
    return ok && c > 0;
}
bool t_ge(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    bool ok;
    int c = cmp_test(in, at, v, a, &ok);
    return ok && c >= 0;
}
bool t_in(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    const Value* seq = a.get(0, "seq");
    if (!seq) {
        in.fail(at.line, "test 'in' needs a sequence");
        return false;
    }
    return in.contains(*seq, v, at);
}
bool t_sameas(Interp& in, const Expr& at, const Value& v, CallArgs& a) {
    const Value* o = test_arg(in, at, a);
    if (!o || v.kind() != o->kind()) return false;
    switch (v.kind()) {
        case Value::Kind::kNone:
        case Value::Kind::kUndefined:
            return true;
        case Value::Kind::kBool:
        case Value::Kind::kInt:
        case Value::Kind::kFloat:
            return equals(v, *o);
        default:
            return v.payload() == o->payload();
    }
}
bool t_filter(Interp&, const Expr&, const Value& v, CallArgs&) {
    return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interp&, const Expr&, const Value& v, CallArgs&) {
    return v.is_string() && find_test(v.str()) != nullptr;
}

struct TestEntry {
    const char* name;
    TestFn fn;
};
const TestEntry kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

// ---------------------------------------------------------------------------------------------
// Globals

Value g_range(Interp& in, const Expr& at, CallArgs& a) {
    int64_t v[3] = {0, 0, 1};
    if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty()) {
        in.fail(at.line, "range() takes 1 to 3 integer arguments");
        return Value();
    }
    for (const auto& x : a.pos)
        if (!x.is_int() && !x.is_bool()) {
            in.fail(at.line, std::string("'") + type_name(x) +
                                 "' object cannot be interpreted as an integer");
            return Value();
        }
    if (a.pos.size() == 1) {
        v[1] = a.pos[0].as_int();
    } else {
        v[0] = a.pos[0].as_int();
        v[1] = a.pos[1].as_int();
        if (a.pos.size() == 3) v[2] = a.pos[2].as_int();
    }
    if (v[2] == 0) {
        in.fail(at.line, "range() arg 3 must not be zero");
        return Value();
    }
    // Length in long double to avoid overflow on hostile bounds.
    long double span = static_cast<long double>(v[1]) - static_cast<long double>(v[0]);
    long double len = span / static_cast<long double>(v[2]);
    if (len > static_cast<long double>(in.options().max_range_length)) {
        in.fail_limit(at.line,
                      "range() longer than " + std::to_string(in.options().max_range_length));
        return Value();
    }
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(std::max<long double>(0, std::ceil(len))));
    if (v[2] > 0)
        for (int64_t i = v[0]; i < v[1]; i += v[2]) items.push_back(Value::integer(i));
    else
        for (int64_t i = v[0]; i > v[1]; i += v[2]) items.push_back(Value::integer(i));
    return in.new_list(std::move(items), at.line);
}

Value g_namespace(Interp& in, const Expr& at, CallArgs& a) {
    Value ns = in.new_namespace();
    for (const auto& p : a.pos) {
        if (!p.is_object()) {
            in.fail(at.line, "namespace() positional arguments must be mappings");
            return Value();
        }
        for (const auto& kv : p.obj().items) ns.nspace().set(kv.first, kv.second);
    }
    for (const auto& kv : a.kw) ns.nspace().set(kv.first, kv.second);
    return ns;
}

Value g_dict(Interp& in, const Expr& at, CallArgs& a) {
    // Python's dict(mapping, **kwargs): a repeated key keeps its first place and takes the last
    // value, so a template that overrides a schema key does not reorder it.
    if (a.pos.size() > 1) {
        in.fail(at.line, "dict expected at most 1 argument, got " + std::to_string(a.pos.size()));
        return Value();
    }
    Object o;
    if (!a.pos.empty()) {
        if (!a.pos[0].is_object()) {
            in.fail(at.line, "dict() positional argument must be a mapping");
            return Value();
        }
        o.items = a.pos[0].obj().items;
    }
    if (!in.charge_steps(o.items.size() * a.kw.size(), at.line)) return Value();
    for (const auto& kv : a.kw) o.set(kv.first, kv.second);
    return in.new_object(std::move(o.items), at.line);
}

Value g_raise_exception(Interp& in, const Expr& at, CallArgs& a) {
    in.fail(at.line, a.pos.empty() ? std::string("raise_exception") : soft_str(a.pos[0]));
    return Value();
}

Value g_strftime_now(Interp& in, const Expr& at, CallArgs& a) {
    if (a.pos.empty() || !a.pos[0].is_string()) {
        in.fail(at.line, "strftime_now() needs a format string");
        return Value();
    }
    const std::string& fmt = a.pos[0].str();
    if (fmt.size() > 256) {
        in.fail(at.line, "strftime_now() format too long");
        return Value();
    }
    std::tm tm{};
    if (in.options().fixed_now_unix >= 0) {
        std::time_t t = static_cast<std::time_t>(in.options().fixed_now_unix);
        gmtime_r(&t, &tm);
    } else {
        std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
    }
    if (fmt.empty()) return Value::string(std::string());
    std::string buf(fmt.size() * 16 + 64, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return make_str(in, at, std::move(buf));
}

struct GlobalEntry {
    const char* name;
    GlobalFn fn;
};
const GlobalEntry kGlobals[] = {
    {"dict", g_dict},   {"namespace", g_namespace},       {"raise_exception", g_raise_exception},
    {"range", g_range}, {"strftime_now", g_strftime_now},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
    for (const auto& f : kFilters)
        if (name == f.name) return f.fn;
    return nullptr;
}
TestFn find_test(std::string_view name) {
    for (const auto& t : kTests)
        if (name == t.name) return t.fn;
    return nullptr;
}
GlobalFn find_global(std::string_view name) {
    for (const auto& g : kGlobals)
        if (name == g.name) return g.fn;
    return nullptr;
}

Value Interp::apply_filter(const std::string& name, Value subject, CallArgs& args, const Expr& at) {
    FilterFn f = find_filter(name);
    if (!f) {
        fail(at.line, "no filter named '" + name + "'");
        return Value();
    }
    return f(*this, at, std::move(subject), args);
}

bool Interp::apply_test(const std::string& name, const Value& subject, CallArgs& args,
                        const Expr& at) {
    TestFn t = find_test(name);
    if (!t) {
        fail(at.line, "no test named '" + name + "'");
        return false;
    }
    return t(*this, at, subject, args);
}

// ---------------------------------------------------------------------------------------------
// Attribute access and methods

namespace {
const char* const kStrMethods[] = {
    "capitalize", "count",      "endswith", "find",    "format",  "index",  "isalnum",
    "isalpha",    "isdigit",    "islower",  "isspace", "isupper", "join",   "lower",
    "lstrip",     "replace",    "rfind",    "rindex",  "rsplit",  "rstrip", "split",
    "splitlines", "startswith", "strip",    "title",   "upper",
};
const char* const kDictMethods[] = {"copy", "get", "items", "keys", "values"};
const char* const kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
const char* const kListMethods[] = {"copy", "count", "index"};
const char* const kListUnsafe[] = {"append", "clear",  "extend",  "insert",
                                   "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool in_list(const char* const (&list)[N], std::string_view name) {
    for (const char* s : list)
        if (name == s) return true;
    return false;
}

Value bound_method(const Value& self, const std::string& name) {
    auto c = std::make_shared<Callable>();
    c->type = Callable::Type::kMethod;
    c->name = name;
    c->self = self;
    return Value::callable(std::move(c));
}
}  // namespace

Value Interp::getattr(const Value& obj, const std::string& name, const Expr& at) {
    using W = Value::UndefinedWhy;
    switch (obj.kind()) {
        case Value::Kind::kObject: {
            if (in_list(kDictMethods, name)) return bound_method(obj, name);
            if (in_list(kDictUnsafe, name)) return Value::undefined(&name, W::kUnsafe);
            if (const Value* v = obj.obj().find(name)) return *v;
            return Value::undefined(&name, W::kDictAttr);
        }
        case Value::Kind::kNamespace: {
            if (const Value* v = obj.nspace().find(name)) return *v;
            return Value::undefined(&name, W::kOtherAttr);
        }
        case Value::Kind::kString:
            if (in_list(kStrMethods, name)) return bound_method(obj, name);
            return Value::undefined(&name, W::kStrAttr);
        case Value::Kind::kArray:
            if (in_list(kListMethods, name)) return bound_method(obj, name);
            if (in_list(kListUnsafe, name)) return Value::undefined(&name, W::kUnsafe);
            return Value::undefined(&name, W::kListAttr);
        case Value::Kind::kLoop: {
            const LoopInfo& l = obj.loop_info();
            int64_t i = static_cast<int64_t>(l.index0);
            int64_t n = static_cast<int64_t>(l.items->items.size());
            if (name == "index") return Value::integer(i + 1);
            if (name == "index0") return Value::integer(i);
            if (name == "revindex") return Value::integer(n - i);
            if (name == "revindex0") return Value::integer(n - i - 1);
            if (name == "first") return Value::boolean(i == 0);
            if (name == "last") return Value::boolean(i == n - 1);
            if (name == "length") return Value::integer(n);
            if (name == "depth") return Value::integer(1);
            if (name == "depth0") return Value::integer(0);
            if (name == "previtem")
                return i > 0 ? l.items->items[static_cast<size_t>(i - 1)] : Value();
            if (name == "nextitem")
                return i + 1 < n ? l.items->items[static_cast<size_t>(i + 1)] : Value();
            if (name == "cycle" || name == "changed") return bound_method(obj, name);
            return Value::undefined(&name, W::kOtherAttr);
        }
        default:
            (void)at;
            return Value::undefined(&name, W::kOtherAttr);
    }
}

Value Interp::getitem(const Value& obj, const Value& key, const Expr& at) {
    using W = Value::UndefinedWhy;
    if (obj.is_undefined()) {
        fail_undefined(at.line, obj);
        return Value();
    }
    if (obj.is_array() && (key.is_int() || key.is_bool())) {
        const auto& items = obj.arr().items;
        int64_t i = key.as_int();
        int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(nullptr, W::kIndex);
        return items[static_cast<size_t>(i)];
    }
    if (obj.is_string() && (key.is_int() || key.is_bool())) {
        const std::string& s = obj.str();
        int64_t n = static_cast<int64_t>(utf8_length(s));
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(nullptr, W::kIndex);
        size_t b = byte_offset(s, i);
        size_t e = b;
        utf8_next(s, e);
        return Value::string(s.substr(b, e - b));
    }
    if (key.is_string()) {
        if (obj.is_object()) {
            if (const Value* v = obj.obj().find(key.str())) return *v;
            // jinja falls back to the attribute (dict methods) when the key is missing.
            if (in_list(kDictMethods, key.str())) return bound_method(obj, key.str());
            return Value::undefined_owned(
                std::static_pointer_cast<const std::string>(key.payload()), W::kDictAttr);
        }
        if (obj.is_namespace() || obj.is_loop() || obj.is_string() || obj.is_array()) {
            Value r = getattr(obj, key.str(), at);
            if (r.is_undefined())
                return Value::undefined_owned(
                    std::static_pointer_cast<const std::string>(key.payload()), r.undefined_why());
            return r;
        }
    }
    return Value::undefined(nullptr, W::kIndex);
}

namespace {

bool str_arg(Interp& in, const Expr& at, CallArgs& a, size_t i, const char* what,
             std::string* out) {
    const Value* v = a.get(i, what);
    if (!v || !v->is_string()) {
        in.fail(at.line, std::string(what) + " must be a string");
        return false;
    }
    *out = v->str();
    return true;
}

// startswith/endswith accept a string or a tuple of strings.
bool affix_match(Interp& in, const Expr& at, const std::string& s, const Value* arg, bool prefix) {
    if (!arg) {
        in.fail(at.line, "startswith/endswith need an argument");
        return false;
    }
    auto one = [&](const Value& p) {
        if (!p.is_string()) {
            in.fail(at.line, "startswith/endswith arguments must be strings");
            return false;
        }
        const std::string& x = p.str();
        if (x.size() > s.size()) return false;
        return prefix ? s.compare(0, x.size(), x) == 0
                      : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (arg->is_array()) {
        for (const auto& p : arg->arr().items)
            if (one(p)) return true;
        return false;
    }
    return one(*arg);
}

// str.format with {} / {0} / {name} fields and {{ }} escapes (no format specs).
bool str_format(Interp& in, const Expr& at, const std::string& f, CallArgs& a, std::string* out) {
    size_t auto_idx = 0;
    for (size_t i = 0; i < f.size(); ++i) {
        char c = f[i];
        if (c == '}') {
            if (i + 1 < f.size() && f[i + 1] == '}') ++i;
            *out += '}';
            continue;
        }
        if (c != '{') {
            *out += c;
            continue;
        }
        if (i + 1 < f.size() && f[i + 1] == '{') {
            *out += '{';
            ++i;
            continue;
        }
        size_t close = f.find('}', i);
        if (close == std::string::npos) {
            in.fail(at.line, "Single '{' encountered in format string");
            return false;
        }
        std::string field = f.substr(i + 1, close - i - 1);
        bool repr = false;
        if (field.size() >= 2 && field[field.size() - 2] == '!') {
            repr = field.back() == 'r';
            field.resize(field.size() - 2);
        }
        if (field.find(':') != std::string::npos) {
            in.fail(at.line, "format specs are not supported in str.format");
            return false;
        }
        const Value* v = nullptr;
        if (field.empty()) {
            v = auto_idx < a.pos.size() ? &a.pos[auto_idx] : nullptr;
            ++auto_idx;
        } else if (std::all_of(field.begin(), field.end(),
                               [](char d) { return d >= '0' && d <= '9'; })) {
            size_t k = static_cast<size_t>(std::stoul(field));
            v = k < a.pos.size() ? &a.pos[k] : nullptr;
        } else {
            for (const auto& kv : a.kw)
                if (kv.first == field) v = &kv.second;
        }
        if (!v) {
            in.fail(at.line, "str.format: missing argument '" + field + "'");
            return false;
        }
        if (repr)
            append_repr(*out, *v);
        else
            append_str(*out, *v);
        i = close;
    }
    return true;
}

Value string_method(Interp& in, const Expr& at, const Value& self, const std::string& name,
                    CallArgs& a, bool* found) {
    const std::string& s = self.str();
    *found = true;
    in.charge_steps(s.size() / 8, at.line);
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const std::string* chars;
        if (!arg_str(in, at, a, 0, "chars", &chars)) return Value();
        return make_str(in, at, py_strip(s, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "startswith" || name == "endswith") {
        bool r = affix_match(in, at, s, a.get(0, "prefix"), name == "startswith");
        return in.failed() ? Value() : Value::boolean(r);
    }
    if (name == "split" || name == "rsplit") {
        const std::string* sep;
        if (!arg_str(in, at, a, 0, "sep", &sep)) return Value();
        if (sep && sep->empty()) {
            in.fail(at.line, "empty separator");
            return Value();
        }
        int64_t maxsplit;
        if (!arg_int(in, at, a, 1, "maxsplit", -1, &maxsplit)) return Value();
        std::vector<Value> parts;
        for (auto& p : str_split(s, sep, maxsplit, name == "rsplit"))
            parts.push_back(Value::string(std::move(p)));
        if (!in.charge(s.size(), at.line)) return Value();
        return in.new_list(std::move(parts), at.line);
    }
    if (name == "splitlines") {
        std::vector<Value> parts;
        for (auto& p : str_splitlines(s)) parts.push_back(Value::string(std::move(p)));
        return in.new_list(std::move(parts), at.line);
    }
    if (name == "upper") return make_str(in, at, str_upper(s));
    if (name == "lower") return make_str(in, at, str_lower(s));
    if (name == "title") return make_str(in, at, str_title(s));
    if (name == "capitalize") return make_str(in, at, str_capitalize(s));
    if (name == "replace") {
        std::string from, to;
        if (!str_arg(in, at, a, 0, "old", &from) || !str_arg(in, at, a, 1, "new", &to))
            return Value();
        int64_t count;
        if (!arg_int(in, at, a, 2, "count", -1, &count)) return Value();
        return make_str(in, at, str_replace(s, from, to, count));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
        std::string sub;
        if (!str_arg(in, at, a, 0, "sub", &sub)) return Value();
        if (name == "count") {
            if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
            int64_t n = 0;
            for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size()))
                ++n;
            return Value::integer(n);
        }
        bool right = name[0] == 'r';
        size_t p = right ? s.rfind(sub) : s.find(sub);
        if (p == std::string::npos) {
            if (name == "index" || name == "rindex") {
                in.fail(at.line, "substring not found");
                return Value();
            }
            return Value::integer(-1);
        }
        return Value::integer(cp_index_of(s, p));
    }
    if (name == "join") {
        const Value* items_v = a.get(0, "iterable");
        if (!items_v) {
            in.fail(at.line, "join() needs an iterable");
            return Value();
        }
        std::shared_ptr<const Array> items;
        if (!in.iterate(*items_v, at, &items)) return Value();
        std::string r;
        for (size_t i = 0; i < items->items.size(); ++i) {
            if (!items->items[i].is_string()) {
                in.fail(at.line, std::string("sequence item ") + std::to_string(i) +
                                     ": expected str instance, " + type_name(items->items[i]) +
                                     " found");
                return Value();
            }
            if (i) r += s;
            r += items->items[i].str();
            if (r.size() > in.options().max_output_bytes) break;
        }
        return make_str(in, at, std::move(r));
    }
    if (name == "format") {
        std::string r;
        if (!str_format(in, at, s, a, &r)) return Value();
        return make_str(in, at, std::move(r));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
        name == "islower" || name == "isupper") {
        if (name == "islower" || name == "isupper") {
            CallArgs none;
            return Value::boolean(name == "islower" ? t_lower(in, at, self, none)
                                                    : t_upper(in, at, self, none));
        }
        if (s.empty()) return Value::boolean(false);
        bool ok = true;
        for (size_t i = 0; i < s.size() && ok;) {
            uint32_t cp = utf8_next(s, i);
            bool digit = cp >= '0' && cp <= '9';
            bool alpha = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp >= 0x80;
            if (name == "isdigit")
                ok = digit;
            else if (name == "isalpha")
                ok = alpha && !py_isspace(cp);
            else if (name == "isalnum")
                ok = (alpha && !py_isspace(cp)) || digit;
            else
                ok = py_isspace(cp);
        }
        return Value::boolean(ok);
    }
    *found = false;
    return Value();
}

}  // namespace

Value Interp::call_method(const Value& self, const std::string& name, CallArgs& a, const Expr& at,
                          bool* found) {
    *found = false;
    switch (self.kind()) {
        case Value::Kind::kString:
            if (!in_list(kStrMethods, name)) return Value();
            return string_method(*this, at, self, name, a, found);
        case Value::Kind::kObject: {
            if (!in_list(kDictMethods, name)) return Value();
            *found = true;
            const Object& o = self.obj();
            if (name == "get") {
                const Value* key = a.get(0, "key");
                const Value* dflt = a.get(1, "default");
                if (!key) {
                    fail(at.line, "get() needs a key");
                    return Value();
                }
                if (key->is_string())
                    if (const Value* v = o.find(key->str())) return *v;
                return dflt ? *dflt : Value::none();
            }
            if (name == "copy") return self;
            std::vector<Value> r;
            r.reserve(o.items.size());
            for (const auto& kv : o.items) {
                if (name == "keys")
                    r.push_back(Value::string(kv.first));
                else if (name == "values")
                    r.push_back(kv.second);
                else
                    r.push_back(make_list({Value::string(kv.first), kv.second}, true));
            }
            return new_list(std::move(r), at.line);
        }
        case Value::Kind::kArray: {
            if (!in_list(kListMethods, name)) return Value();
            *found = true;
            const auto& items = self.arr().items;
            if (name == "copy") return self;
            const Value* x = a.get(0, "value");
            if (!x) {
                fail(at.line, name + "() needs an argument");
                return Value();
            }
            charge_steps(items.size(), at.line);
            int64_t n = 0;
            for (size_t i = 0; i < items.size(); ++i) {
                if (!equals(items[i], *x)) continue;
                if (name == "index") return Value::integer(static_cast<int64_t>(i));
                ++n;
            }
            if (name == "index") {
                fail(at.line, "value is not in list");
                return Value();
            }
            return Value::integer(n);
        }
        case Value::Kind::kLoop: {
            const LoopInfo& l = self.loop_info();
            if (name == "cycle") {
                *found = true;
                if (a.pos.empty()) {
                    fail(at.line, "no items for cycling given");
                    return Value();
                }
                return a.pos[l.index0 % a.pos.size()];
            }
            if (name == "changed") {
                *found = true;
                Value cur = make_list(a.pos);
                LoopInfo& m = const_cast<LoopInfo&>(l);
                bool changed = !m.has_changed || !equals(m.last_changed, cur);
                m.last_changed = cur;
                m.has_changed = true;
                return Value::boolean(changed);
            }
            return Value();
        }
        default:
            return Value();
    }
}

}  // namespace ferrox::jinja
