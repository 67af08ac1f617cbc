#include "chat/jinja_value.h"
#include "core/utf8.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

namespace ferrox::jinja {

Value Value::string(std::string s) {
    return Value::string(std::make_shared<const std::string>(std::move(s)));
}
Value Value::array(std::shared_ptr<Array> a) {
    Value v;
    v.kind_ = Kind::kArray;
    v.p_ = std::move(a);
    return v;
}
Value Value::object(std::shared_ptr<Object> o) {
    Value v;
    v.kind_ = Kind::kObject;
    v.p_ = std::move(o);
    return v;
}
Value Value::ns(std::shared_ptr<Namespace> n) {
    Value v;
    v.kind_ = Kind::kNamespace;
    v.p_ = std::move(n);
    return v;
}
Value Value::callable(std::shared_ptr<Callable> c) {
    Value v;
    v.kind_ = Kind::kCallable;
    v.p_ = std::move(c);
    return v;
}
Value Value::loop(std::shared_ptr<LoopInfo> l) {
    Value v;
    v.kind_ = Kind::kLoop;
    v.p_ = std::move(l);
    return v;
}

Value make_list(std::vector<Value> items, bool is_tuple) {
    auto a = std::make_shared<Array>();
    uint32_t d = 0;
    for (const auto& v : items) d = std::max(d, value_depth(v));
    a->items = std::move(items);
    a->is_tuple = is_tuple;
    a->depth = d + 1;
    return Value::array(std::move(a));
}

Value make_object(std::vector<std::pair<std::string, Value>> items) {
    auto o = std::make_shared<Object>();
    uint32_t d = 0;
    for (const auto& kv : items) d = std::max(d, value_depth(kv.second));
    o->items = std::move(items);
    o->depth = d + 1;
    return Value::object(std::move(o));
}

bool truthy(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::kUndefined:
        case Value::Kind::kNone:
            return false;
        case Value::Kind::kBool:
            return v.as_bool();
        case Value::Kind::kInt:
            return v.as_int() != 0;
        case Value::Kind::kFloat:
            return v.as_double() != 0.0;
        case Value::Kind::kString:
            return !v.str().empty();
        case Value::Kind::kArray:
            return !v.arr().items.empty();
        case Value::Kind::kObject:
            return !v.obj().items.empty();
        default:
            return true;
    }
}

const char* type_name(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::kUndefined:
            return "Undefined";
        case Value::Kind::kNone:
            return "NoneType";
        case Value::Kind::kBool:
            return "bool";
        case Value::Kind::kInt:
            return "int";
        case Value::Kind::kFloat:
            return "float";
        case Value::Kind::kString:
            return "str";
        case Value::Kind::kArray:
            return v.arr().is_tuple ? "tuple" : "list";
        case Value::Kind::kObject:
            return "dict";
        case Value::Kind::kNamespace:
            return "Namespace";
        case Value::Kind::kCallable:
            return "function";
        case Value::Kind::kLoop:
            return "LoopContext";
    }
    return "object";
}

void append_float_repr(std::string& out, double d) {
    if (std::isnan(d)) {
        out += "nan";
        return;
    }
    if (std::isinf(d)) {
        out += d < 0 ? "-inf" : "inf";
        return;
    }
    // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
    if (!sci.empty() && sci[0] == '-') {
        out += '-';
        sci.remove_prefix(1);
    }
    size_t e_pos = sci.find('e');
    std::string digits;
    for (size_t i = 0; i < e_pos; ++i)
        if (sci[i] != '.') digits += sci[i];
    int exp = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            size_t n_int = static_cast<size_t>(exp) + 1;
            if (digits.size() <= n_int) {
                out += digits;
                out.append(n_int - digits.size(), '0');
                out += ".0";
            } else {
                out.append(digits, 0, n_int);
                out += '.';
                out.append(digits, n_int);
            }
        } else {
            out += "0.";
            out.append(static_cast<size_t>(-exp - 1), '0');
            out += digits;
        }
        return;
    }
    out += digits[0];
    if (digits.size() > 1) {
        out += '.';
        out.append(digits, 1);
    }
    out += 'e';
    out += exp < 0 ? '-' : '+';
    int a = exp < 0 ? -exp : exp;
    if (a < 10) out += '0';
    out += std::to_string(a);
}

uint32_t utf8_next(std::string_view s, size_t& i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n <= 0 || i + static_cast<size_t>(n) >= s.size()) {
        ++i;
        return c;
    }
    uint32_t cp = c & (0x3Fu >> n);
    for (int k = 1; k <= n; ++k) {
        unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
        if ((cc & 0xC0) != 0x80) {
            ++i;
            return c;
        }
        cp = (cp << 6) | (cc & 0x3F);
    }
    i += static_cast<size_t>(n) + 1;
    return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
    ::ferrox::utf8_append(out, cp);
}

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

bool is_ascii(std::string_view s) {
    for (unsigned char c : s)
        if (c >= 0x80) return false;
    return true;
}

namespace {

void append_str_repr(std::string& out, std::string_view s) {
    bool has_single = s.find('\'') != std::string_view::npos;
    bool has_double = s.find('"') != std::string_view::npos;
    char q = (has_single && !has_double) ? '"' : '\'';
    out += q;
    size_t i = 0;
    while (i < s.size()) {
        size_t start = i;
        uint32_t cp = utf8_next(s, i);
        if (cp == static_cast<uint32_t>(q) || cp == '\\') {
            out += '\\';
            out += static_cast<char>(cp);
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
            out += buf;
        } else {
            out.append(s.substr(start, i - start));
        }
    }
    out += q;
}

void append_container(std::string& out, const Value& v, int depth);

void append_repr_depth(std::string& out, const Value& v, int depth) {
    if (v.is_string()) {
        append_str_repr(out, v.str());
        return;
    }
    if (v.is_undefined()) {
        out += "Undefined";  // repr() of jinja's default Undefined (its str() is "")
        return;
    }
    append_container(out, v, depth);
}

void append_container(std::string& out, const Value& v, int depth) {
    if (depth > 200) {
        out += "...";
        return;
    }
    switch (v.kind()) {
        case Value::Kind::kUndefined:
            return;
        case Value::Kind::kNone:
            out += "None";
            return;
        case Value::Kind::kBool:
            out += v.as_bool() ? "True" : "False";
            return;
        case Value::Kind::kInt:
            out += std::to_string(v.as_int());
            return;
        case Value::Kind::kFloat:
            append_float_repr(out, v.as_double());
            return;
        case Value::Kind::kString:
            out += v.str();
            return;
        case Value::Kind::kArray: {
            const Array& a = v.arr();
            out += a.is_tuple ? '(' : '[';
            for (size_t i = 0; i < a.items.size(); ++i) {
                if (i) out += ", ";
                append_repr_depth(out, a.items[i], depth + 1);
            }
            if (a.is_tuple && a.items.size() == 1) out += ',';
            out += a.is_tuple ? ')' : ']';
            return;
        }
        case Value::Kind::kObject: {
            out += '{';
            bool first = true;
            for (const auto& kv : v.obj().items) {
                if (!first) out += ", ";
                first = false;
                append_str_repr(out, kv.first);
                out += ": ";
                append_repr_depth(out, kv.second, depth + 1);
            }
            out += '}';
            return;
        }
        case Value::Kind::kNamespace: {
            out += "<Namespace {";
            bool first = true;
            for (const auto& kv : v.nspace().attrs) {
                if (!first) out += ", ";
                first = false;
                append_str_repr(out, kv.first);
                out += ": ";
                append_repr_depth(out, kv.second, depth + 1);
            }
            out += "}>";
            return;
        }
        case Value::Kind::kCallable:
            out += "<function>";
            return;
        case Value::Kind::kLoop:
            out += "<LoopContext>";
            return;
    }
}

}  // namespace

void append_str(std::string& out, const Value& v) { append_container(out, v, 0); }

std::string to_str(const Value& v) {
    if (v.is_string()) return v.str();
    std::string s;
    append_str(s, v);
    return s;
}

void append_repr(std::string& out, const Value& v) { append_repr_depth(out, v, 0); }

namespace {
bool equals_depth(const Value& a, const Value& b, int depth) {
    if (depth > 200) return false;
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::kUndefined:
        case Value::Kind::kNone:
            return true;
        case Value::Kind::kString:
            return a.str() == b.str();
        case Value::Kind::kArray: {
            const Array& x = a.arr();
            const Array& y = b.arr();
            if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
            for (size_t i = 0; i < x.items.size(); ++i)
                if (!equals_depth(x.items[i], y.items[i], depth + 1)) return false;
            return true;
        }
        case Value::Kind::kObject: {
            const Object& x = a.obj();
            const Object& y = b.obj();
            if (x.items.size() != y.items.size()) return false;
            for (const auto& kv : x.items) {
                const Value* o = y.find(kv.first);
                if (!o || !equals_depth(kv.second, *o, depth + 1)) return false;
            }
            return true;
        }
        default:
            return a.payload() == b.payload();
    }
}
}  // namespace

bool equals(const Value& a, const Value& b) { return equals_depth(a, b, 0); }

namespace {

void json_escape(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"':
                out += "\\\"";
                ++i;
                continue;
            case '\\':
                out += "\\\\";
                ++i;
                continue;
            case '\n':
                out += "\\n";
                ++i;
                continue;
            case '\r':
                out += "\\r";
                ++i;
                continue;
            case '\t':
                out += "\\t";
                ++i;
                continue;
            case '\b':
                out += "\\b";
                ++i;
                continue;
            case '\f':
                out += "\\f";
                ++i;
                continue;
            default:
                break;
        }
        if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
            ++i;
        } else if (c < 0x80 || !ensure_ascii) {
            out += static_cast<char>(c);
            ++i;
        } else {
            uint32_t cp = utf8_next(s, i);
            char buf[16];
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                              0xDC00 + (v & 0x3FF));
            } else {
                std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
            }
            out += buf;
        }
    }
    out += '"';
}

struct Dumper {
    const JsonDumpOptions& o;
    std::string* error;
    std::string& out;

    void newline(int level) {
        out += '\n';
        if (o.indent_str) {
            for (int i = 0; i < level; ++i) out += *o.indent_str;
        } else {
            out.append(static_cast<size_t>(level) * static_cast<size_t>(o.indent), ' ');
        }
    }
    bool indented() const { return o.indent_str != nullptr || o.indent >= 0; }

    bool dump(const Value& v, int level) {
        if (level > 256) {
            *error = "value nested too deeply for tojson";
            return false;
        }
        switch (v.kind()) {
            case Value::Kind::kNone:
                out += "null";
                return true;
            case Value::Kind::kBool:
                out += v.as_bool() ? "true" : "false";
                return true;
            case Value::Kind::kInt:
                out += std::to_string(v.as_int());
                return true;
            case Value::Kind::kFloat: {
                double d = v.as_double();
                if (std::isnan(d))
                    out += "NaN";
                else if (std::isinf(d))
                    out += d < 0 ? "-Infinity" : "Infinity";
                else
                    append_float_repr(out, d);
                return true;
            }
            case Value::Kind::kString:
                json_escape(out, v.str(), o.ensure_ascii);
                return true;
            case Value::Kind::kArray: {
                const auto& items = v.arr().items;
                if (items.empty()) {
                    out += "[]";
                    return true;
                }
                out += '[';
                for (size_t i = 0; i < items.size(); ++i) {
                    if (i) out += o.item_sep;
                    if (indented()) newline(level + 1);
                    if (!dump(items[i], level + 1)) return false;
                }
                if (indented()) newline(level);
                out += ']';
                return true;
            }
            case Value::Kind::kObject: {
                const auto& items = v.obj().items;
                if (items.empty()) {
                    out += "{}";
                    return true;
                }
                std::vector<const std::pair<std::string, Value>*> order;
                order.reserve(items.size());
                for (const auto& kv : items) order.push_back(&kv);
                if (o.sort_keys)
                    std::stable_sort(order.begin(), order.end(),
                                     [](auto* a, auto* b) { return a->first < b->first; });
                out += '{';
                for (size_t i = 0; i < order.size(); ++i) {
                    if (i) out += o.item_sep;
                    if (indented()) newline(level + 1);
                    json_escape(out, order[i]->first, o.ensure_ascii);
                    out += o.key_sep;
                    if (!dump(order[i]->second, level + 1)) return false;
                }
                if (indented()) newline(level);
                out += '}';
                return true;
            }
            default:
                *error =
                    std::string("Object of type ") + type_name(v) + " is not JSON serializable";
                return false;
        }
    }
};

}  // namespace

bool json_dump(std::string& out, const Value& v, const JsonDumpOptions& opts, std::string* error) {
    JsonDumpOptions o = opts;
    if (o.item_sep.empty()) o.item_sep = (o.indent >= 0 || o.indent_str) ? "," : ", ";
    Dumper d{o, error, out};
    return d.dump(v, 0);
}

namespace {

using ojson = nlohmann::ordered_json;

bool from_json(const ojson& j, Value* out, int depth, int max_depth, std::string* error) {
    if (depth > max_depth) {
        *error = "JSON nested deeper than " + std::to_string(max_depth);
        return false;
    }
    switch (j.type()) {
        case ojson::value_t::null:
            *out = Value::none();
            return true;
        case ojson::value_t::boolean:
            *out = Value::boolean(j.get<bool>());
            return true;
        case ojson::value_t::number_integer:
            *out = Value::integer(j.get<int64_t>());
            return true;
        case ojson::value_t::number_unsigned: {
            uint64_t u = j.get<uint64_t>();
            if (u > static_cast<uint64_t>(INT64_MAX))
                *out = Value::number(static_cast<double>(u));
            else
                *out = Value::integer(static_cast<int64_t>(u));
            return true;
        }
        case ojson::value_t::number_float:
            *out = Value::number(j.get<double>());
            return true;
        case ojson::value_t::string:
            *out = Value::string(j.get<std::string>());
            return true;
        case ojson::value_t::array: {
            std::vector<Value> items(j.size());
            for (size_t i = 0; i < j.size(); ++i)
                if (!from_json(j[i], &items[i], depth + 1, max_depth, error)) return false;
            *out = make_list(std::move(items));
            return true;
        }
        case ojson::value_t::object: {
            std::vector<std::pair<std::string, Value>> items;
            items.reserve(j.size());
            for (auto it = j.begin(); it != j.end(); ++it) {
                Value v;
                if (!from_json(it.value(), &v, depth + 1, max_depth, error)) return false;
                items.emplace_back(it.key(), std::move(v));
            }
            *out = make_object(std::move(items));
            return true;
        }
        default:
            *error = "unsupported JSON value";
            return false;
    }
}

}  // namespace

bool json_parse(std::string_view text, Value* out, std::string* error, int max_depth) {
    // nlohmann's parser is iterative; only the conversion below recurses, depth-capped.
    ojson j = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        *error = "invalid JSON";
        return false;
    }
    return from_json(j, out, 0, max_depth, error);
}

}  // namespace ferrox::jinja
