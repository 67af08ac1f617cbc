#include "grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "grammar/regex.h"

namespace ferrox::grammar {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxRepeat = 10000;  // GrammarLimits::max_repeat

// ---- fixed rules ----------------------------------------------------------------------------

struct Primitive {
    const char* name;
    const char* body;
    std::vector<const char*> deps;
};

// A JSON string character: anything but '"', '\' and controls, or an escape; a \u escape of a
// surrogate only as a high-low pair (one character for minLength/maxLength).
const std::vector<Primitive>& primitives() {
    static const std::vector<Primitive> p = {
        {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", {}},
        {"char",
         R"([^\"\\\x00-\x1F] | "\\" ( [\"\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ) | "\\u" [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2})",
         {}},
        {"string", R"("\"" char* "\"")", {"char"}},
        {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", {}},
        {"number",
         R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)",
         {}},
        {"boolean", R"("true" | "false")", {}},
        {"null", R"("null")", {}},
        {"value",
         R"(object | array | string | number | boolean | null)",
         {"object", "array", "string", "number", "boolean", "null"}},
        {"object",
         R"("{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* ws )? "}")",
         {"ws", "string", "value"}},
        {"array", R"("[" ws ( value ( ws "," ws value )* ws )? "]")", {"ws", "value"}},
        // Formats. Dates are real dates of years 0001-9999 (29 February only in leap years).
        {"fmt-year", R"([0-9]{3} [1-9] | [0-9]{2} [1-9] "0" | [0-9] [1-9] "00" | [1-9] "000")", {}},
        {"fmt-leap-year",
         R"([0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( "0" [48] | [2468] [048] | [13579] [26] ) "00")",
         {}},
        {"fmt-date",
         R"(fmt-year "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | fmt-leap-year "-02-29")",
         {"fmt-year", "fmt-leap-year"}},
        {"fmt-time",
         R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
         {}},
        {"fmt-date-time", R"(fmt-date "T" fmt-time)", {"fmt-date", "fmt-time"}},
        {"fmt-uuid",
         R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
         {}},
        {"fmt-email-atom", R"([A-Za-z0-9!#$%&'*+/=?\^_`{|}~\-]+)", {}},
        {"fmt-email-label", R"([A-Za-z0-9] ( [A-Za-z0-9\-]{0,61} [A-Za-z0-9] )?)", {}},
        {"fmt-email",
         R"(fmt-email-atom ( "." fmt-email-atom )* "@" fmt-email-label ( "." fmt-email-label )+)",
         {"fmt-email-atom", "fmt-email-label"}},
        {"fmt-ipv4-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9])", {}},
        {"fmt-ipv4", R"(fmt-ipv4-octet ( "." fmt-ipv4-octet ){3})", {"fmt-ipv4-octet"}},
    };
    return p;
}

// Formats and the length of their strings where it is fixed (0: variable).
const std::map<std::string, std::pair<const char*, int>>& formats() {
    static const std::map<std::string, std::pair<const char*, int>> f = {
        {"date", {"fmt-date", 10}},          {"time", {"fmt-time", 0}},
        {"date-time", {"fmt-date-time", 0}}, {"uuid", {"fmt-uuid", 36}},
        {"email", {"fmt-email", 0}},         {"ipv4", {"fmt-ipv4", 0}},
    };
    return f;
}

const std::set<std::string>& annotation_keywords() {
    static const std::set<std::string> s = {
        "title",        "description",      "examples",        "default",        "$schema",
        "$id",          "$comment",         "deprecated",      "readOnly",       "writeOnly",
        "$anchor",      "$vocabulary",      "example",         "discriminator",  "xml",
        "externalDocs", "contentMediaType", "contentEncoding", "$dynamicAnchor", "$recursiveAnchor",
        "$defs",        "definitions",
    };
    return s;
}

// Keywords that constrain one type (used to infer the types of a schema without `type`).
const char* keyword_type(const std::string& k) {
    static const std::map<std::string, const char*> m = {
        {"properties", "object"},
        {"required", "object"},
        {"additionalProperties", "object"},
        {"patternProperties", "object"},
        {"propertyNames", "object"},
        {"minProperties", "object"},
        {"maxProperties", "object"},
        {"dependentRequired", "object"},
        {"unevaluatedProperties", "object"},
        {"items", "array"},
        {"prefixItems", "array"},
        {"additionalItems", "array"},
        {"minItems", "array"},
        {"maxItems", "array"},
        {"contains", "array"},
        {"uniqueItems", "array"},
        {"unevaluatedItems", "array"},
        {"minLength", "string"},
        {"maxLength", "string"},
        {"pattern", "string"},
        {"format", "string"},
        {"minimum", "number"},
        {"maximum", "number"},
        {"exclusiveMinimum", "number"},
        {"exclusiveMaximum", "number"},
        {"multipleOf", "number"},
    };
    auto it = m.find(k);
    return it == m.end() ? nullptr : it->second;
}

bool is_annotation(const std::string& k) { return annotation_keywords().count(k) > 0; }

// Whether the schema has any keyword besides annotations.
bool has_validation(const json& s) {
    if (!s.is_object()) return !s.is_boolean() || !s.get<bool>();
    for (auto it = s.begin(); it != s.end(); ++it) {
        if (!is_annotation(it.key())) return true;
    }
    return false;
}

bool value_has_type(const json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "string") return v.is_string();
    if (t == "array") return v.is_array();
    if (t == "object") return v.is_object();
    if (t == "number") return v.is_number();
    if (t == "integer") {
        if (v.is_number_integer()) return true;
        return v.is_number_float() && std::floor(v.get<double>()) == v.get<double>();
    }
    return false;
}

std::string json_text(const json& v) {
    return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string pointer_escape(const std::string& key) {
    std::string s;
    for (char c : key) {
        if (c == '~') {
            s += "~0";
        } else if (c == '/') {
            s += "~1";
        } else {
            s += c;
        }
    }
    return s;
}

// ---- integer digit ranges ---------------------------------------------------------------------

std::string digit_class(char lo, char hi) {
    if (lo == hi) return std::string("\"") + lo + "\"";
    return std::string("[") + lo + "-" + hi + "]";
}

std::string digits_any(size_t n) {
    if (n == 0) return "";
    if (n == 1) return "[0-9]";
    return "[0-9]{" + std::to_string(n) + "}";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i].empty()) continue;
        if (!s.empty()) s += sep;
        s += v[i];
    }
    return s;
}

std::string group(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    return "( " + join(alts, " | ") + " )";
}

// Digit strings of equal length from x to y (x <= y), as alternatives.
void same_length_range(const std::string& x, const std::string& y, std::vector<std::string>& out) {
    size_t n = x.size(), p = 0;
    while (p < n && x[p] == y[p]) ++p;
    std::string prefix = p ? "\"" + x.substr(0, p) + "\" " : "";
    if (p == n) {
        out.push_back("\"" + x + "\"");
        return;
    }
    char x0 = x[p], y0 = y[p];
    std::string xr = x.substr(p + 1), yr = y.substr(p + 1);
    bool x_zeros = xr.find_first_not_of('0') == std::string::npos;
    bool y_nines = yr.find_first_not_of('9') == std::string::npos;
    size_t rest = n - p - 1;
    char mid_lo = x_zeros ? x0 : static_cast<char>(x0 + 1);
    char mid_hi = y_nines ? y0 : static_cast<char>(y0 - 1);
    if (!x_zeros) {
        std::vector<std::string> sub;
        same_length_range(xr, std::string(rest, '9'), sub);
        out.push_back(prefix + "\"" + std::string(1, x0) + "\" " + group(sub));
    }
    if (mid_lo <= mid_hi) {
        std::string d = digits_any(rest);
        out.push_back(prefix + digit_class(mid_lo, mid_hi) + (d.empty() ? "" : " " + d));
    }
    if (!y_nines) {
        std::vector<std::string> sub;
        same_length_range(std::string(rest, '0'), yr, sub);
        out.push_back(prefix + "\"" + std::string(1, y0) + "\" " + group(sub));
    }
}

// Canonical decimal integers from a to b (0 <= a <= b).
std::string nonneg_range(int64_t a, int64_t b) {
    std::vector<std::string> alts;
    std::string sa = std::to_string(a), sb = std::to_string(b);
    for (size_t len = sa.size(); len <= sb.size(); ++len) {
        std::string lo = len == sa.size() ? sa : "1" + std::string(len - 1, '0');
        std::string hi = len == sb.size() ? sb : std::string(len, '9');
        same_length_range(lo, hi, alts);
    }
    return group(alts);
}

// Canonical decimal integers from lo to hi (lo <= hi); "-0" is never produced.
std::string int_range(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    if (lo < 0) {
        int64_t a = hi < 0 ? -hi : 1, b = -lo;
        alts.push_back("\"-\" " + nonneg_range(a, b));
    }
    if (hi >= 0) alts.push_back(nonneg_range(std::max<int64_t>(lo, 0), hi));
    return group(alts);
}

// Magnitudes I(.F)? in [a, b] (a <= b), each end inclusive unless *_excl.
std::string magnitude_range(int64_t a, bool a_excl, int64_t b, bool b_excl) {
    const std::string any_f = R"(( "." [0-9]{1,16} )?)";
    const std::string zero_f = R"(( "." "0"{1,16} )?)";
    const std::string nonzero_f = R"("." "0"{0,15} [1-9] [0-9]{0,15})";
    if (a == b) return a_excl || b_excl ? "" : "\"" + std::to_string(a) + "\" " + zero_f;
    std::vector<std::string> alts;
    alts.push_back("\"" + std::to_string(a) + "\" " + (a_excl ? nonzero_f : any_f));
    if (a + 1 <= b - 1) alts.push_back(nonneg_range(a + 1, b - 1) + " " + any_f);
    if (!b_excl) alts.push_back("\"" + std::to_string(b) + "\" " + zero_f);
    return group(alts);
}

// ---- output ----------------------------------------------------------------------------------

// The rule names a GBNF body refers to (outside literals, classes and {m,n}).
std::vector<std::string> references(const std::string& body) {
    std::vector<std::string> out;
    for (size_t i = 0; i < body.size();) {
        char c = body[i];
        if (c == '"' || c == '[') {
            char close = c == '"' ? '"' : ']';
            for (++i; i < body.size() && body[i] != close; ++i) {
                if (body[i] == '\\') ++i;
            }
            ++i;
        } else if (c == '{') {
            i = body.find('}', i);
            i = i == std::string::npos ? body.size() : i + 1;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_') {
            size_t b = i;
            while (i < body.size() &&
                   ((body[i] >= 'a' && body[i] <= 'z') || (body[i] >= 'A' && body[i] <= 'Z') ||
                    (body[i] >= '0' && body[i] <= '9') || body[i] == '-' || body[i] == '_')) {
                ++i;
            }
            out.push_back(body.substr(b, i - b));
        } else {
            ++i;
        }
    }
    return out;
}

// The rules reachable from the first one, in their order, as GBNF text.
std::string reachable_rules(const std::vector<std::pair<std::string, std::string>>& rules) {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < rules.size(); ++i) index.emplace(rules[i].first, i);
    std::vector<bool> seen(rules.size(), false);
    std::vector<size_t> work = {0};
    seen[0] = true;
    while (!work.empty()) {
        size_t i = work.back();
        work.pop_back();
        for (const std::string& r : references(rules[i].second)) {
            auto it = index.find(r);
            if (it != index.end() && !seen[it->second]) {
                seen[it->second] = true;
                work.push_back(it->second);
            }
        }
    }
    std::string out;
    for (size_t i = 0; i < rules.size(); ++i) {
        if (seen[i]) out += rules[i].first + " ::= " + rules[i].second + "\n";
    }
    return out;
}

// ---- the converter ----------------------------------------------------------------------------

class Converter {
  public:
    Converter(const json& root, const JsonSchemaOptions& opts) : root_(root), opts_(opts) {
        for (const Primitive& p : primitives()) names_.insert(p.name);
        names_.insert("root");
    }

    Expected<JsonSchemaGbnf> run() {
        FERROX_ASSIGN_OR_RETURN(std::string top, visit(root_, "root", "#", 0));
        std::vector<std::pair<std::string, std::string>> all = {{"root", top}};
        all.insert(all.end(), rules_.begin(), rules_.end());
        for (const Primitive& p : primitives()) {
            if (used_.count(p.name)) all.push_back({p.name, p.body});
        }
        for (const std::string& text : extra_text_) {  // "name ::= body" lines
            size_t b = 0;
            while (b < text.size()) {
                size_t e = text.find('\n', b), sep = text.find(" ::= ", b);
                all.push_back({text.substr(b, sep - b), text.substr(sep + 5, e - sep - 5)});
                b = e + 1;
            }
        }
        JsonSchemaGbnf g;
        g.gbnf = reachable_rules(all);
        g.ignored = std::move(ignored_);
        return g;
    }

  private:
    // ---- bookkeeping ----
    std::string use(const char* name) {
        if (used_.insert(name).second) {
            for (const Primitive& p : primitives()) {
                if (p.name == std::string(name)) {
                    for (const char* d : p.deps) use(d);
                }
            }
        }
        return name;
    }

    std::string fresh_name(const std::string& hint) {
        std::string base;
        for (char c : hint) {
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            if (ok) {
                base += c;
            } else if (!base.empty() && base.back() != '-') {
                base += '-';
            }
        }
        while (!base.empty() && base.back() == '-') base.pop_back();
        if (base.size() > 48) base.resize(48);
        if (base.empty()) base = "r";
        std::string name = base;
        for (int i = 1; names_.count(name); ++i) name = base + "-" + std::to_string(i);
        names_.insert(name);
        return name;
    }

    // A rule for `body`, reusing an identical one.
    std::string add_rule(const std::string& hint, const std::string& body) {
        auto it = by_body_.find(body);
        if (it != by_body_.end()) return it->second;
        std::string name = fresh_name(hint);
        rules_.push_back({name, body});
        by_body_[body] = name;
        return name;
    }

    Status unsupported(const std::string& keyword, const std::string& path,
                       const std::string& why = "") {
        std::string where = keyword + " at " + path;
        if (opts_.strict) {
            return invalid_argument("JSON Schema keyword '" + keyword + "' at " + path +
                                    " is not supported" + (why.empty() ? "" : ": " + why));
        }
        if (std::find(ignored_.begin(), ignored_.end(), where) == ignored_.end())
            ignored_.push_back(where);
        return Status::ok();
    }

    Status unsatisfiable(const std::string& path, const std::string& why) {
        return invalid_argument("JSON Schema at " + path + " accepts no value: " + why);
    }

    Status invalid(const std::string& path, const std::string& why) {
        return invalid_argument("invalid JSON Schema at " + path + ": " + why);
    }

    // ---- keywords nobody enforces ----
    Status check_keywords(const json& s, const std::string& path) {
        for (auto it = s.begin(); it != s.end(); ++it) {
            const std::string& k = it.key();
            const json& v = it.value();
            if (k == "uniqueItems") {
                if (v.is_boolean() && !v.get<bool>()) continue;
                if (s.contains("maxItems") && s["maxItems"].is_number() &&
                    s["maxItems"].get<double>() <= 1)
                    continue;
                FERROX_RETURN_IF_ERROR(unsupported(k, path));
            } else if (k == "multipleOf") {
                if (v.is_number() && v.get<double>() == 1.0) continue;
                FERROX_RETURN_IF_ERROR(unsupported(k, path));
            } else if (k == "minProperties") {
                size_t n_required =
                    s.contains("required") && s["required"].is_array() ? s["required"].size() : 0;
                if (v.is_number() && v.get<double>() <= static_cast<double>(n_required)) continue;
                FERROX_RETURN_IF_ERROR(unsupported(k, path));
            } else if (k == "maxProperties") {
                bool closed = s.contains("additionalProperties") &&
                              s["additionalProperties"].is_boolean() &&
                              !s["additionalProperties"].get<bool>();
                size_t n_props = s.contains("properties") && s["properties"].is_object()
                                     ? s["properties"].size()
                                     : 0;
                if (closed && v.is_number() && v.get<double>() >= static_cast<double>(n_props))
                    continue;
                FERROX_RETURN_IF_ERROR(unsupported(k, path));
            } else if (k == "unevaluatedProperties" || k == "unevaluatedItems") {
                if (v.is_boolean()) continue;
                FERROX_RETURN_IF_ERROR(unsupported(k, path, "only true or false"));
            } else if (k == "patternProperties" || k == "propertyNames" || k == "not" ||
                       k == "if" || k == "dependentRequired" || k == "dependentSchemas" ||
                       k == "dependencies" || k == "contains" || k == "minContains" ||
                       k == "maxContains" || k == "$dynamicRef" || k == "$recursiveRef" ||
                       k == "contentSchema") {
                FERROX_RETURN_IF_ERROR(unsupported(k, path));
            }
        }
        return Status::ok();
    }

    // ---- $ref ----
    Expected<const json*> lookup(const std::string& ref, const std::string& path) {
        if (ref.empty() || ref[0] != '#') {
            FERROX_RETURN_IF_ERROR(unsupported(
                "$ref", path, "only references inside the schema ('#...'), not '" + ref + "'"));
            return static_cast<const json*>(nullptr);
        }
        const json* cur = &root_;
        if (ref.size() == 1) return cur;
        if (ref[1] != '/') {
            FERROX_RETURN_IF_ERROR(
                unsupported("$ref", path, "anchors ('" + ref + "') are not supported"));
            return static_cast<const json*>(nullptr);
        }
        size_t i = 2;
        while (true) {
            size_t j = ref.find('/', i);
            std::string raw = ref.substr(i, j == std::string::npos ? std::string::npos : j - i);
            std::string seg;
            for (size_t k = 0; k < raw.size(); ++k) {
                if (raw[k] == '~' && k + 1 < raw.size() &&
                    (raw[k + 1] == '0' || raw[k + 1] == '1')) {
                    seg += raw[k + 1] == '0' ? '~' : '/';
                    ++k;
                } else if (raw[k] == '%' && k + 2 < raw.size() &&
                           std::isxdigit(static_cast<unsigned char>(raw[k + 1])) &&
                           std::isxdigit(static_cast<unsigned char>(raw[k + 2]))) {
                    seg += static_cast<char>(std::stoi(raw.substr(k + 1, 2), nullptr, 16));
                    k += 2;
                } else {
                    seg += raw[k];
                }
            }
            if (cur->is_object() && cur->contains(seg)) {
                cur = &(*cur)[seg];
            } else if (cur->is_array() && !seg.empty() &&
                       seg.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoul(seg) < cur->size()) {
                cur = &(*cur)[std::stoul(seg)];
            } else {
                return invalid(path, "$ref '" + ref + "' points nowhere");
            }
            if (j == std::string::npos) break;
            i = j + 1;
        }
        return cur;
    }

    Expected<std::string> ref_rule(const json& ref_value, const std::string& path, int depth) {
        if (!ref_value.is_string()) return invalid(path, "$ref must be a string");
        const std::string ref = ref_value.get<std::string>();
        auto it = refs_.find(ref);
        if (it != refs_.end()) return it->second;
        FERROX_ASSIGN_OR_RETURN(const json* target, lookup(ref, path));
        if (target == nullptr) return use("value");  // ignored (strict = false)
        size_t slash = ref.rfind('/');
        std::string name =
            fresh_name("ref-" + (ref.size() <= 1 ? std::string("root") : ref.substr(slash + 1)));
        refs_[ref] = name;
        size_t slot = rules_.size();
        rules_.push_back({name, ""});
        FERROX_ASSIGN_OR_RETURN(std::string body, visit(*target, name, ref, depth + 1));
        rules_[slot].second = body;
        return name;
    }

    // ---- allOf ----
    // The schema with its $ref replaced by the target (merged with its siblings).
    Expected<json> inline_ref(json s, const std::string& path, int depth) {
        for (int guard = 0; s.is_object() && s.contains("$ref"); ++guard) {
            if (guard > opts_.max_depth) return invalid(path, "$ref chain too long");
            if (!s["$ref"].is_string()) return invalid(path, "$ref must be a string");
            FERROX_ASSIGN_OR_RETURN(const json* target, lookup(s["$ref"].get<std::string>(), path));
            s.erase("$ref");
            if (target == nullptr) continue;
            FERROX_ASSIGN_OR_RETURN(s, merge(*target, s, path, depth + 1));
        }
        return s;
    }

    Expected<json> flatten_all_of(const json& s, const std::string& path, int depth) {
        if (depth > opts_.max_depth) return invalid(path, "allOf nested too deeply");
        json out = s;
        out.erase("allOf");
        if (!s["allOf"].is_array()) return invalid(path, "allOf must be an array");
        for (size_t i = 0; i < s["allOf"].size(); ++i) {
            std::string p = path + "/allOf/" + std::to_string(i);
            FERROX_ASSIGN_OR_RETURN(json b, inline_ref(s["allOf"][i], p, depth));
            if (b.is_object() && b.contains("allOf")) {
                FERROX_ASSIGN_OR_RETURN(b, flatten_all_of(b, p, depth + 1));
            }
            FERROX_ASSIGN_OR_RETURN(out, merge(out, b, p, depth));
        }
        return out;
    }

    static json all_of(const json& a, const json& b) {
        return json{{"allOf", json::array({a, b})}};
    }

    static json addl_of(const json& s) {
        if (s.contains("additionalProperties")) return s["additionalProperties"];
        return true;
    }

    // The schema that accepts what both accept (as far as this converter can say).
    Expected<json> merge(const json& a_in, const json& b_in, const std::string& path, int depth) {
        if (b_in.is_boolean()) {
            if (b_in.get<bool>()) return a_in;
            return unsatisfiable(path, "allOf with false");
        }
        if (a_in.is_boolean()) {
            if (a_in.get<bool>()) return b_in;
            return unsatisfiable(path, "allOf with false");
        }
        if (!a_in.is_object() || !b_in.is_object())
            return invalid(path, "a schema must be an object or a boolean");
        FERROX_ASSIGN_OR_RETURN(json b, inline_ref(b_in, path, depth));
        json a = a_in;
        if (b.is_boolean()) return merge(a, b, path, depth);
        if (a.contains("$ref")) {
            FERROX_ASSIGN_OR_RETURN(a, inline_ref(a, path, depth));
            if (a.is_boolean()) return merge(a, b, path, depth);
        }

        // Properties: each side's additionalProperties applies to the other side's names.
        bool any_props = a.contains("properties") || b.contains("properties") ||
                         a.contains("additionalProperties") || b.contains("additionalProperties");
        if (any_props) {
            json pa = a.value("properties", json::object()),
                 pb = b.value("properties", json::object());
            json xa = addl_of(a), xb = addl_of(b);
            json props = json::object();
            std::set<std::string> forbidden;
            auto add = [&](const json& own, const json& other_props, const json& other_addl) {
                for (auto it = own.begin(); it != own.end(); ++it) {
                    const std::string& k = it.key();
                    if (props.contains(k)) continue;
                    json v = it.value();
                    if (other_props.contains(k)) {
                        v = all_of(v, other_props[k]);
                    } else if (other_addl.is_boolean() && !other_addl.get<bool>()) {
                        forbidden.insert(k);
                        continue;
                    } else if (!(other_addl.is_boolean() && other_addl.get<bool>())) {
                        v = all_of(v, other_addl);
                    }
                    props[k] = v;
                }
            };
            add(pa, pb, xb);
            add(pb, pa, xa);
            a["properties"] = props;
            b.erase("properties");
            json addl;
            bool fa = xa.is_boolean() && !xa.get<bool>(), fb = xb.is_boolean() && !xb.get<bool>();
            bool ta = xa.is_boolean() && xa.get<bool>(), tb = xb.is_boolean() && xb.get<bool>();
            if (fa || fb) {
                addl = false;
            } else if (ta && tb) {
                addl = nullptr;
            } else if (ta) {
                addl = xb;
            } else if (tb) {
                addl = xa;
            } else {
                addl = all_of(xa, xb);
            }
            if (addl.is_null()) {
                a.erase("additionalProperties");
            } else {
                a["additionalProperties"] = addl;
            }
            b.erase("additionalProperties");
            for (const std::string& k : forbidden) {
                for (const json* r : {&a, &b}) {
                    if (r->contains("required") && (*r)["required"].is_array()) {
                        for (const json& n : (*r)["required"]) {
                            if (n == k)
                                return unsatisfiable(path,
                                                     "allOf requires '" + k + "' and forbids it");
                        }
                    }
                }
            }
        }

        for (auto it = b.begin(); it != b.end(); ++it) {
            const std::string& k = it.key();
            const json& v = it.value();
            if (is_annotation(k)) continue;
            if (!a.contains(k)) {
                a[k] = v;
                continue;
            }
            json& cur = a[k];
            if (cur == v) continue;
            if (k == "type") {
                auto names = [](const json& t) {
                    std::set<std::string> s;
                    if (t.is_string()) s.insert(t.get<std::string>());
                    if (t.is_array()) {
                        for (const json& x : t) {
                            if (x.is_string()) s.insert(x.get<std::string>());
                        }
                    }
                    return s;
                };
                std::set<std::string> ta = names(cur), tb = names(v);
                json out = json::array();
                for (const std::string& t : ta) {
                    if (tb.count(t) || (t == "integer" && tb.count("number"))) {
                        out.push_back(t);
                    } else if (t == "number" && tb.count("integer")) {
                        out.push_back("integer");
                    }
                }
                if (out.empty()) return unsatisfiable(path, "allOf of disjoint types");
                cur = out;
            } else if (k == "required") {
                for (const json& n : v) {
                    if (std::find(cur.begin(), cur.end(), n) == cur.end()) cur.push_back(n);
                }
            } else if (k == "minLength" || k == "minItems" || k == "minimum" ||
                       k == "minProperties") {
                if (v.is_number() && cur.is_number() && v.get<double>() > cur.get<double>())
                    cur = v;
            } else if (k == "maxLength" || k == "maxItems" || k == "maximum" ||
                       k == "maxProperties") {
                if (v.is_number() && cur.is_number() && v.get<double>() < cur.get<double>())
                    cur = v;
            } else if ((k == "exclusiveMinimum" || k == "exclusiveMaximum") && v.is_number() &&
                       cur.is_number()) {
                bool lower = k == "exclusiveMinimum";
                if (lower ? v.get<double>() > cur.get<double>()
                          : v.get<double>() < cur.get<double>())
                    cur = v;
            } else if (k == "enum") {
                json out = json::array();
                for (const json& x : cur) {
                    if (std::find(v.begin(), v.end(), x) != v.end()) out.push_back(x);
                }
                if (out.empty()) return unsatisfiable(path, "allOf of disjoint enums");
                cur = out;
            } else if (k == "const") {
                return unsatisfiable(path, "allOf of two different consts");
            } else if (k == "items" && cur.is_object() && v.is_object()) {
                cur = all_of(cur, v);
            } else if (k == "anyOf" || k == "oneOf") {
                json out = json::array();
                for (const json& x : cur) {
                    for (const json& y : v) out.push_back(all_of(x, y));
                }
                if (out.size() > 256) return invalid(path, "allOf: too many anyOf combinations");
                cur = out;
            } else if (k == "$defs" || k == "definitions") {
                continue;
            } else {
                FERROX_RETURN_IF_ERROR(
                    unsupported("allOf", path, "cannot combine two different '" + k + "'"));
            }
        }
        return a;
    }

    // ---- the walk ----
    // A rule name for the schema `s` found at `path`.
    Expected<std::string> visit(const json& s, const std::string& hint, const std::string& path,
                                int depth) {
        if (depth > opts_.max_depth) return invalid(path, "schema nested too deeply");
        if (s.is_boolean()) {
            if (s.get<bool>()) return use("value");
            return unsatisfiable(path, "the schema is false");
        }
        if (!s.is_object()) return invalid(path, "a schema must be an object or a boolean");
        FERROX_RETURN_IF_ERROR(check_keywords(s, path));

        if (s.contains("$ref")) {
            json rest = s;
            rest.erase("$ref");
            if (!has_validation(rest)) return ref_rule(s["$ref"], path, depth);
            return visit(all_of(json{{"$ref", s["$ref"]}}, rest), hint, path, depth + 1);
        }
        if (s.contains("allOf")) {
            FERROX_ASSIGN_OR_RETURN(json merged, flatten_all_of(s, path, depth));
            return visit(merged, hint, path, depth + 1);
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (s.contains(key)) return visit_any_of(s, key, hint, path, depth);
        }
        if (s.contains("const")) return visit_enum(s, json::array({s["const"]}), hint, path);
        if (s.contains("enum")) {
            if (!s["enum"].is_array()) return invalid(path, "enum must be an array");
            return visit_enum(s, s["enum"], hint, path);
        }

        FERROX_ASSIGN_OR_RETURN(std::vector<std::string> types, types_of(s, path));
        if (types.empty()) return use("value");
        std::vector<std::string> alts;
        for (const std::string& t : types) {
            std::string h = types.size() > 1 ? hint + "-" + t : hint;
            Expected<std::string> r = std::string();
            if (t == "object") {
                r = visit_object(s, h, path, depth);
            } else if (t == "array") {
                r = visit_array(s, h, path, depth);
            } else if (t == "string") {
                r = visit_string(s, h, path);
            } else if (t == "integer") {
                r = visit_integer(s, h, path);
            } else if (t == "number") {
                r = visit_number(s, h, path);
            } else if (t == "boolean") {
                r = use("boolean");
            } else {
                r = use("null");
            }
            if (!r.has_value()) {
                if (types.size() > 1 && is_unsat_since(r.status())) continue;
                return r.status();
            }
            alts.push_back(*r);
        }
        if (alts.empty()) return unsatisfiable(path, "no type can satisfy the schema");
        if (alts.size() == 1) return alts[0];
        return add_rule(hint, join(alts, " | "));
    }

    // Whether a failed status came from unsatisfiable() (a branch that can be dropped).
    bool is_unsat_since(const Status& st) const {
        return st.message().find(" accepts no value: ") != std::string::npos;
    }

    Expected<std::string> visit_any_of(const json& s, const char* key, const std::string& hint,
                                       const std::string& path, int depth) {
        if (!s[key].is_array() || s[key].empty())
            return invalid(path, std::string(key) + " must be a non-empty array");
        json rest = s;
        rest.erase(key);
        bool merge_rest = has_validation(rest);
        std::vector<std::string> alts;
        Status last;
        for (size_t i = 0; i < s[key].size(); ++i) {
            std::string p = path + "/" + key + "/" + std::to_string(i);
            json branch = merge_rest ? all_of(rest, s[key][i]) : s[key][i];
            Expected<std::string> r = visit(branch, hint + "-" + std::to_string(i), p, depth + 1);
            if (!r.has_value()) {
                if (is_unsat_since(r.status())) {
                    last = r.status();
                    continue;
                }
                return r.status();
            }
            if (std::find(alts.begin(), alts.end(), *r) == alts.end()) alts.push_back(*r);
        }
        if (alts.empty()) return last;
        if (alts.size() == 1) return alts[0];
        return add_rule(hint, join(alts, " | "));
    }

    Expected<std::string> visit_enum(const json& s, const json& values, const std::string& hint,
                                     const std::string& path) {
        std::vector<std::string> types;
        if (s.contains("type")) {
            FERROX_ASSIGN_OR_RETURN(types, types_of(s, path));
        }
        std::vector<std::string> alts;
        for (const json& v : values) {
            bool ok = types.empty();
            for (const std::string& t : types) ok = ok || value_has_type(v, t);
            if (!ok) continue;
            std::string lit = gbnf_literal(json_text(v));
            if (std::find(alts.begin(), alts.end(), lit) == alts.end()) alts.push_back(lit);
        }
        if (s.value("nullable", false) &&
            std::find(alts.begin(), alts.end(), "\"null\"") == alts.end()) {
            alts.push_back("\"null\"");
        }
        if (alts.empty()) return unsatisfiable(path, "no enum value has the schema's type");
        return add_rule(hint, join(alts, " | "));
    }

    Expected<std::vector<std::string>> types_of(const json& s, const std::string& path) {
        static const std::vector<std::string> kOrder = {"object", "array",   "string", "integer",
                                                        "number", "boolean", "null"};
        std::set<std::string> set;
        if (s.contains("type")) {
            const json& t = s["type"];
            std::vector<json> names;
            if (t.is_array()) {
                names.assign(t.begin(), t.end());
            } else {
                names.push_back(t);
            }
            for (const json& n : names) {
                if (!n.is_string() ||
                    std::find(kOrder.begin(), kOrder.end(), n.get<std::string>()) == kOrder.end()) {
                    return invalid(path, "unknown type " + json_text(n));
                }
                set.insert(n.get<std::string>());
            }
            if (set.empty()) return unsatisfiable(path, "type is an empty list");
        } else {
            for (auto it = s.begin(); it != s.end(); ++it) {
                if (const char* t = keyword_type(it.key())) set.insert(t);
            }
            if (set.empty()) return std::vector<std::string>{};  // any value
        }
        if (set.count("number") && s.contains("multipleOf") && s["multipleOf"].is_number() &&
            s["multipleOf"].get<double>() == 1.0) {
            set.erase("number");
            set.insert("integer");
        }
        if (set.count("number")) set.erase("integer");
        if (s.value("nullable", false)) set.insert("null");
        std::vector<std::string> out;
        for (const std::string& t : kOrder) {
            if (set.count(t)) out.push_back(t);
        }
        return out;
    }

    // A non-negative integer keyword, or `dflt` when absent.
    Expected<int64_t> count_keyword(const json& s, const char* k, int64_t dflt,
                                    const std::string& path) {
        if (!s.contains(k)) return dflt;
        const json& v = s[k];
        if (!value_has_type(v, "integer") || v.get<double>() < 0) {
            return invalid(path, std::string(k) + " must be a non-negative integer");
        }
        double d = v.get<double>();
        if (d > 1e15) return int64_t{1000000000000000};
        return static_cast<int64_t>(d);
    }

    Expected<std::string> visit_string(const json& s, const std::string& hint,
                                       const std::string& path) {
        FERROX_ASSIGN_OR_RETURN(int64_t min_len, count_keyword(s, "minLength", 0, path));
        FERROX_ASSIGN_OR_RETURN(int64_t max_len, count_keyword(s, "maxLength", -1, path));
        bool has_len = s.contains("minLength") || s.contains("maxLength");
        if (max_len >= 0 && min_len > max_len) return unsatisfiable(path, "minLength > maxLength");
        if (s.contains("format")) {
            const std::string f =
                s["format"].is_string() ? s["format"].get<std::string>() : json_text(s["format"]);
            auto it = formats().find(f);
            if (it != formats().end()) {
                int fixed = it->second.second;
                if (has_len) {
                    if (fixed > 0) {
                        if (min_len > fixed || (max_len >= 0 && max_len < fixed)) {
                            return unsatisfiable(path, "format " + f + " has " +
                                                           std::to_string(fixed) + " characters");
                        }
                    } else {
                        FERROX_RETURN_IF_ERROR(
                            unsupported(s.contains("minLength") ? "minLength" : "maxLength", path,
                                        "combined with format"));
                    }
                }
                if (s.contains("pattern"))
                    FERROX_RETURN_IF_ERROR(unsupported("pattern", path, "combined with format"));
                return add_rule(hint, "\"\\\"\" " + use(it->second.first) + " \"\\\"\"");
            }
            FERROX_RETURN_IF_ERROR(unsupported("format", path, "unknown format '" + f + "'"));
        }
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) return invalid(path, "pattern must be a string");
            std::string name = fresh_name(hint + "-pattern");
            names_.insert(name + "-any");  // the regex compiler's helper
            RegexOptions ro;
            ro.rule = name;
            ro.search = true;
            ro.json_string = true;
            Expected<std::string> rx = regex_to_gbnf(s["pattern"].get<std::string>(), ro);
            if (!rx.has_value()) {
                FERROX_RETURN_IF_ERROR(unsupported("pattern", path, rx.status().message()));
            } else {
                if (has_len) {
                    FERROX_RETURN_IF_ERROR(
                        unsupported(s.contains("minLength") ? "minLength" : "maxLength", path,
                                    "combined with pattern"));
                }
                extra_text_.push_back(*rx);
                return add_rule(hint, "\"\\\"\" " + name + " \"\\\"\"");
            }
        }
        if (!has_len) return use("string");
        use("char");
        if (min_len > kMaxRepeat || max_len > kMaxRepeat) {
            FERROX_RETURN_IF_ERROR(unsupported(min_len > kMaxRepeat ? "minLength" : "maxLength",
                                               path,
                                               "lengths above " + std::to_string(kMaxRepeat)));
            return use("string");
        }
        std::string rep;
        if (max_len < 0) {
            rep = min_len == 0 ? "*" : min_len == 1 ? "+" : "{" + std::to_string(min_len) + ",}";
        } else if (max_len == 0) {
            return add_rule(hint, R"("\"\"")");
        } else {
            rep = min_len == max_len
                      ? "{" + std::to_string(min_len) + "}"
                      : "{" + std::to_string(min_len) + "," + std::to_string(max_len) + "}";
        }
        return add_rule(hint, "\"\\\"\" char" + rep + " \"\\\"\"");
    }

    struct Bound {
        bool present = false;
        double value = 0;
        bool exclusive = false;
    };

    // The tighter of minimum/exclusiveMinimum (lower) or maximum/exclusiveMaximum.
    Expected<Bound> bound(const json& s, bool lower, const std::string& path) {
        const char* inc = lower ? "minimum" : "maximum";
        const char* exc = lower ? "exclusiveMinimum" : "exclusiveMaximum";
        Bound b;
        if (s.contains(inc)) {
            if (!s[inc].is_number()) return invalid(path, std::string(inc) + " must be a number");
            b.present = true;
            b.value = s[inc].get<double>();
            b.exclusive = s.contains(exc) && s[exc].is_boolean() && s[exc].get<bool>();  // draft 4
        }
        if (s.contains(exc) && s[exc].is_number()) {
            double v = s[exc].get<double>();
            bool tighter = !b.present || (lower ? v >= b.value : v <= b.value);
            if (tighter) b = {true, v, true};
        }
        return b;
    }

    Expected<std::string> visit_integer(const json& s, const std::string& hint,
                                        const std::string& path) {
        FERROX_ASSIGN_OR_RETURN(Bound lo, bound(s, true, path));
        FERROX_ASSIGN_OR_RETURN(Bound hi, bound(s, false, path));
        if (!lo.present && !hi.present) return use("integer");
        double l = -1e16 + 1, h = 1e16 - 1;  // 16 digits either way, as the plain integer rule
        if (lo.present) l = lo.exclusive ? std::floor(lo.value) + 1 : std::ceil(lo.value);
        if (hi.present) h = hi.exclusive ? std::ceil(hi.value) - 1 : std::floor(hi.value);
        const double cap =
            std::max({1e16 - 1, std::fabs(lo.present ? l : 0), std::fabs(hi.present ? h : 0)});
        if (cap > 9e17) {
            FERROX_RETURN_IF_ERROR(
                unsupported(lo.present ? "minimum" : "maximum", path, "bounds beyond 18 digits"));
            return use("integer");
        }
        if (!lo.present) l = -cap;
        if (!hi.present) h = cap;
        if (l > h) return unsatisfiable(path, "no integer between the bounds");
        return add_rule(hint, int_range(static_cast<int64_t>(l), static_cast<int64_t>(h)));
    }

    Expected<std::string> visit_number(const json& s, const std::string& hint,
                                       const std::string& path) {
        FERROX_ASSIGN_OR_RETURN(Bound lo, bound(s, true, path));
        FERROX_ASSIGN_OR_RETURN(Bound hi, bound(s, false, path));
        if (!lo.present && !hi.present) return use("number");
        for (auto [b, name] : {std::pair{lo, lo.exclusive ? "exclusiveMinimum" : "minimum"},
                               std::pair{hi, hi.exclusive ? "exclusiveMaximum" : "maximum"}}) {
            if (b.present && (std::floor(b.value) != b.value || std::fabs(b.value) > 9e17)) {
                FERROX_RETURN_IF_ERROR(
                    unsupported(name, path, "a bound with a fraction on a number"));
                return use("number");
            }
        }
        const int64_t cap = 9999999999999999;  // 16 digits
        int64_t l = static_cast<int64_t>(lo.value), h = static_cast<int64_t>(hi.value);
        std::vector<std::string> alts;
        // x >= 0
        if (!hi.present || h > 0 || (h == 0 && !hi.exclusive)) {
            int64_t a = lo.present && l > 0 ? l : 0;
            bool a_excl = lo.present && l >= 0 && lo.exclusive;
            int64_t b = hi.present ? h : std::max(cap, a);
            bool b_excl = hi.present && hi.exclusive;
            if (a < b || (a == b && !a_excl && !b_excl))
                alts.push_back(magnitude_range(a, a_excl, b, b_excl));
        }
        // x < 0, as its magnitude
        if (!lo.present || l < 0) {
            int64_t a = hi.present && h < 0 ? -h : 0;
            bool a_excl = hi.present && h < 0 ? hi.exclusive : true;
            int64_t b = lo.present ? -l : std::max(cap, a);
            bool b_excl = lo.present && lo.exclusive;
            if (a < b || (a == b && !a_excl && !b_excl)) {
                std::string m = magnitude_range(a, a_excl, b, b_excl);
                if (!m.empty()) alts.push_back("\"-\" " + m);
            }
        }
        alts.erase(std::remove(alts.begin(), alts.end(), std::string()), alts.end());
        if (alts.empty()) return unsatisfiable(path, "no number between the bounds");
        return add_rule(hint, join(alts, " | "));
    }

    // A JSON string (with quotes) that is none of `keys` (compared as written).
    std::string key_not_in(const std::vector<std::string>& keys, const std::string& hint) {
        if (keys.empty()) return use("string");
        use("char");
        struct TrieNode {
            std::map<std::string, int> next;  // the character as written in JSON
            bool terminal = false;
        };
        std::vector<TrieNode> trie(1);
        for (const std::string& k : keys) {
            std::string written = json_text(json(k));
            written = written.substr(1, written.size() - 2);
            int cur = 0;
            for (size_t i = 0; i < written.size();) {
                size_t n = 1;
                auto b = static_cast<uint8_t>(written[i]);
                if (written[i] == '\\') {
                    n = written[i + 1] == 'u' ? 6 : 2;
                } else if (b >= 0xF0) {
                    n = 4;
                } else if (b >= 0xE0) {
                    n = 3;
                } else if (b >= 0xC0) {
                    n = 2;
                }
                std::string c = written.substr(i, n);
                i += n;
                auto it = trie[static_cast<size_t>(cur)].next.find(c);
                if (it == trie[static_cast<size_t>(cur)].next.end()) {
                    trie.push_back({});
                    int id = static_cast<int>(trie.size()) - 1;
                    trie[static_cast<size_t>(cur)].next[c] = id;
                    cur = id;
                } else {
                    cur = it->second;
                }
            }
            trie[static_cast<size_t>(cur)].terminal = true;
        }
        std::string rest = add_rule(hint + "-rest", R"(char* "\"")");
        std::vector<std::string> names(trie.size());
        for (size_t i = 0; i < trie.size(); ++i)
            names[i] = fresh_name(hint + "-k" + std::to_string(i));
        for (size_t i = 0; i < trie.size(); ++i) {
            const TrieNode& t = trie[i];
            std::vector<std::string> alts;
            if (!t.terminal) alts.push_back(R"("\"")");
            std::string raw_excluded = "\\\"\\\\\\x00-\\x1F";
            std::string esc_chars = "\\\"\\\\/bfnrt";
            for (const auto& [c, child] : t.next) {
                alts.push_back(gbnf_literal(c) + " " + names[static_cast<size_t>(child)]);
                if (c[0] == '\\') {
                    if (c.size() == 2) {
                        std::string e = c[1] == '"'    ? "\\\""
                                        : c[1] == '\\' ? "\\\\"
                                                       : std::string(1, c[1]);
                        size_t at = esc_chars.find(e);
                        if (at != std::string::npos) esc_chars.erase(at, e.size());
                    }
                } else {
                    uint32_t cp = 0;
                    auto b0 = static_cast<uint8_t>(c[0]);
                    int n = static_cast<int>(c.size());
                    cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
                    for (int k = 1; k < n; ++k)
                        cp = (cp << 6) | (static_cast<uint8_t>(c[static_cast<size_t>(k)]) & 0x3F);
                    char buf[16];
                    if (cp < 0x80 && std::isalnum(static_cast<int>(cp))) {
                        raw_excluded += static_cast<char>(cp);
                    } else if (cp < 0x80) {
                        std::snprintf(buf, sizeof buf, "\\x%02X", cp);
                        raw_excluded += buf;
                    } else if (cp < 0x10000) {
                        std::snprintf(buf, sizeof buf, "\\u%04X", cp);
                        raw_excluded += buf;
                    } else {
                        std::snprintf(buf, sizeof buf, "\\U%08X", cp);
                        raw_excluded += buf;
                    }
                }
            }
            alts.push_back("[^" + raw_excluded + "] " + rest);
            std::string esc = "\"\\\\\" ( " + (esc_chars.empty() ? "" : "[" + esc_chars + "] | ") +
                              "\"u\" [0-9a-fA-F]{4} ) " + rest;
            alts.push_back(esc);
            rules_.push_back({names[i], join(alts, " | ")});
        }
        return add_rule(hint, "\"\\\"\" " + names[0]);
    }

    Expected<std::string> visit_object(const json& s, const std::string& hint,
                                       const std::string& path, int depth) {
        use("ws");
        struct Prop {
            std::string key;
            json schema;
            bool required;
        };
        std::vector<Prop> props;
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) return invalid(path, "required must be an array");
            for (const json& r : s["required"]) {
                if (!r.is_string()) return invalid(path, "required must list strings");
                required.insert(r.get<std::string>());
            }
        }
        json addl = true;
        if (s.contains("additionalProperties")) {
            addl = s["additionalProperties"];
        } else if (s.contains("unevaluatedProperties") && s["unevaluatedProperties"].is_boolean()) {
            addl = s["unevaluatedProperties"];
        } else if (!opts_.extra_properties) {
            addl = false;
        }
        const bool closed = addl.is_boolean() && !addl.get<bool>();
        std::vector<std::string> names;
        if (s.contains("properties")) {
            if (!s["properties"].is_object()) return invalid(path, "properties must be an object");
            for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
                names.push_back(it.key());
                props.push_back({it.key(), it.value(), required.count(it.key()) > 0});
            }
        }
        // Required names the schema does not describe take additionalProperties' schema.
        for (const json& r : s.value("required", json::array())) {
            std::string k = r.get<std::string>();
            if (std::find(names.begin(), names.end(), k) != names.end()) continue;
            if (closed)
                return unsatisfiable(path,
                                     "'" + k + "' is required but additionalProperties is false");
            names.push_back(k);
            props.push_back({k, addl, true});
        }

        std::vector<std::string> kvs;
        std::vector<bool> req;
        for (const Prop& p : props) {
            if (p.schema.is_boolean() && !p.schema.get<bool>()) {
                if (p.required)
                    return unsatisfiable(path,
                                         "'" + p.key + "' is required and its schema is false");
                continue;
            }
            std::string p_path = path + "/properties/" + pointer_escape(p.key);
            FERROX_ASSIGN_OR_RETURN(std::string v,
                                    visit(p.schema, hint + "-" + p.key, p_path, depth + 1));
            kvs.push_back(gbnf_literal(json_text(json(p.key))) + " ws \":\" ws " + v);
            req.push_back(p.required);
        }
        std::string extra;
        if (!closed) {
            std::string v;
            if (addl.is_boolean()) {
                v = use("value");
            } else {
                FERROX_ASSIGN_OR_RETURN(v, visit(addl, hint + "-additional",
                                                 path + "/additionalProperties", depth + 1));
            }
            std::string key = key_not_in(names, hint + "-key");
            extra = add_rule(hint + "-extra", key + " ws \":\" ws " + v);
        }

        // first[i]: the members from i on, at least one, none before; rest[i]: the members from
        // i on after one has been written (each after a comma). Empty string: nothing.
        size_t n = kvs.size();
        std::vector<std::string> first(n + 1), rest(n + 1);
        if (!extra.empty()) {
            rest[n] = add_rule(hint + "-more", "( ws \",\" ws " + extra + " )*");
            first[n] = add_rule(hint + "-extras", extra + " " + rest[n]);
        }
        for (size_t i = n; i-- > 0;) {
            std::string tail = rest[i + 1].empty() ? "" : " " + rest[i + 1];
            std::string r =
                req[i] ? "ws \",\" ws " + kvs[i] + tail : "( ws \",\" ws " + kvs[i] + " )?" + tail;
            rest[i] = add_rule(hint + "-r" + std::to_string(i), r);
            std::string f = kvs[i] + tail;
            if (!req[i] && !first[i + 1].empty()) f += " | " + first[i + 1];
            first[i] = add_rule(hint + "-f" + std::to_string(i), f);
        }
        bool can_be_empty = std::find(req.begin(), req.end(), true) == req.end();
        std::string body;
        if (first[0].empty()) {
            body = R"("{" ws "}")";
        } else if (can_be_empty) {
            body = "\"{\" ws ( " + first[0] + " ws )? \"}\"";
        } else {
            body = "\"{\" ws " + first[0] + " ws \"}\"";
        }
        return add_rule(hint, body);
    }

    Expected<std::string> visit_array(const json& s, const std::string& hint,
                                      const std::string& path, int depth) {
        use("ws");
        std::vector<json> prefix;
        json rest = true;
        std::string rest_path = path + "/items";
        if (s.contains("prefixItems")) {
            if (!s["prefixItems"].is_array()) return invalid(path, "prefixItems must be an array");
            prefix.assign(s["prefixItems"].begin(), s["prefixItems"].end());
            if (s.contains("items")) rest = s["items"];
        } else if (s.contains("items") && s["items"].is_array()) {  // drafts 4 to 2019-09
            prefix.assign(s["items"].begin(), s["items"].end());
            if (s.contains("additionalItems")) rest = s["additionalItems"];
            rest_path = path + "/additionalItems";
        } else if (s.contains("items")) {
            rest = s["items"];
        }
        if (rest.is_boolean() && rest.get<bool>() && s.contains("unevaluatedItems") &&
            s["unevaluatedItems"].is_boolean()) {
            rest = s["unevaluatedItems"];
        }
        FERROX_ASSIGN_OR_RETURN(int64_t min_n, count_keyword(s, "minItems", 0, path));
        FERROX_ASSIGN_OR_RETURN(int64_t max_n, count_keyword(s, "maxItems", -1, path));
        for (size_t i = 0; i < prefix.size(); ++i) {
            if (prefix[i].is_boolean() && !prefix[i].get<bool>()) {
                max_n = max_n < 0 ? static_cast<int64_t>(i)
                                  : std::min<int64_t>(max_n, static_cast<int64_t>(i));
                break;
            }
        }
        bool rest_false = rest.is_boolean() && !rest.get<bool>();
        if (rest_false) {
            auto k = static_cast<int64_t>(prefix.size());
            max_n = max_n < 0 ? k : std::min(max_n, k);
        }
        if (max_n >= 0 && min_n > max_n) return unsatisfiable(path, "minItems > maxItems");
        if (max_n >= 0 && static_cast<int64_t>(prefix.size()) > max_n)
            prefix.resize(static_cast<size_t>(max_n));
        if (min_n > kMaxRepeat || max_n > kMaxRepeat) {
            FERROX_RETURN_IF_ERROR(unsupported(min_n > kMaxRepeat ? "minItems" : "maxItems", path,
                                               "counts above " + std::to_string(kMaxRepeat)));
            min_n = std::min<int64_t>(min_n, kMaxRepeat);
            max_n = max_n > kMaxRepeat ? -1 : max_n;
        }
        if (max_n == 0) return add_rule(hint, R"("[" ws "]")");

        std::vector<std::string> items;
        for (size_t i = 0; i < prefix.size(); ++i) {
            FERROX_ASSIGN_OR_RETURN(std::string r,
                                    visit(prefix[i], hint + "-" + std::to_string(i),
                                          path + "/prefixItems/" + std::to_string(i), depth + 1));
            items.push_back(r);
        }
        const auto k = static_cast<int64_t>(items.size());
        std::string item;
        bool more = max_n < 0 || max_n > k;
        if (more) {
            FERROX_ASSIGN_OR_RETURN(item, visit(rest, hint + "-item", rest_path, depth + 1));
        }
        // The items after the prefix, after at least one item: ( , item ){a,b}.
        auto tail_after = [&](int64_t written) -> std::string {
            if (!more) return "";
            int64_t a = std::max<int64_t>(0, min_n - written);
            int64_t b = max_n < 0 ? -1 : max_n - written;
            if (b == 0) return "";
            std::string unit = "( ws \",\" ws " + item + " )";
            if (b < 0) return unit + (a == 0 ? "*" : a == 1 ? "+" : "{" + std::to_string(a) + ",}");
            if (a == b) return unit + "{" + std::to_string(a) + "}";
            if (a == 0 && b == 1) return unit + "?";
            return unit + "{" + std::to_string(a) + "," + std::to_string(b) + "}";
        };
        std::string elements;
        if (k == 0) {
            std::string t = tail_after(1);
            elements = item + (t.empty() ? "" : " " + t);
        } else {
            // after[i]: the items from position i on, given i items are written.
            std::string after = tail_after(k);
            for (int64_t i = k - 1; i >= 1; --i) {
                std::string body = "ws \",\" ws " + items[static_cast<size_t>(i)] +
                                   (after.empty() ? "" : " " + after);
                if (i >= min_n) body = "( " + body + " )?";
                after = add_rule(hint + "-t" + std::to_string(i), body);
            }
            elements = items[0] + (after.empty() ? "" : " " + after);
        }
        std::string body = min_n == 0 ? "\"[\" ws ( " + elements + " ws )? \"]\""
                                      : "\"[\" ws " + elements + " ws \"]\"";
        return add_rule(hint, body);
    }

    const json& root_;
    const JsonSchemaOptions& opts_;
    std::vector<std::pair<std::string, std::string>> rules_;
    std::map<std::string, std::string> by_body_;
    std::set<std::string> names_;
    std::set<std::string> used_;
    std::map<std::string, std::string> refs_;
    std::vector<std::string> extra_text_;  // rules from the regex compiler
    std::vector<std::string> ignored_;
};

}  // namespace

Expected<JsonSchemaGbnf> json_schema_compile(const nlohmann::ordered_json& schema,
                                             const JsonSchemaOptions& opts) {
    Converter c(schema, opts);
    return c.run();
}

Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                          const JsonSchemaOptions& opts) {
    FERROX_ASSIGN_OR_RETURN(JsonSchemaGbnf g, json_schema_compile(schema, opts));
    return std::move(g.gbnf);
}

std::string json_object_gbnf() {
    auto g = json_schema_to_gbnf(json{{"type", "object"}});
    return g.has_value() ? *g : std::string();
}

std::string json_value_gbnf() {
    auto g = json_schema_to_gbnf(json::object());
    return g.has_value() ? *g : std::string();
}

Expected<std::string> choice_to_gbnf(const std::vector<std::string>& choices) {
    if (choices.empty()) return invalid_argument("choice: the list of choices is empty");
    std::vector<std::string> alts;
    for (const std::string& c : choices) {
        std::string lit = gbnf_literal(c);
        if (std::find(alts.begin(), alts.end(), lit) == alts.end()) alts.push_back(lit);
    }
    return "root ::= " + join(alts, " | ") + "\n";
}

}  // namespace ferrox::grammar
