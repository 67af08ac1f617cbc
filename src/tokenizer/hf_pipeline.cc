#include "tokenizer/hf_pipeline.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace ferrox {

Expected<int32_t> hf_token_id(const nlohmann::json& v, int64_t limit, const char* what) {
    int64_t id = -1;
    if (v.is_number_unsigned()) {
        id = v.get<uint64_t>() >= static_cast<uint64_t>(limit) ? limit : static_cast<int64_t>(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
        id = v.get<int64_t>();
    } else {
        return invalid_argument(std::string("tokenizer.json: ") + what + " id is a " + v.type_name() +
                                ", not an integer");
    }
    if (id < 0 || id >= limit || id > INT32_MAX) {
        return invalid_argument(std::string("tokenizer.json: ") + what + " id " + v.dump() + " is out of range [0, " +
                                std::to_string(limit) + ")");
    }
    return static_cast<int32_t>(id);
}

std::string hf_quote(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status hf_merge_out_of_vocab(const std::string& left, const std::string& right, const std::string& missing) {
    return invalid_argument("tokenizer.json: merge " + hf_quote(left + " " + right) + " names " + hf_quote(missing) +
                            ", which is not in the model vocab");
}

namespace {

using nlohmann::json;

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Oniguruma's Unicode \w (Alphabetic, marks, decimal digits, connector punctuation,
// Join_Control); PCRE2's own \w lacks the marks and ZWNJ/ZWJ.
constexpr const char* kWhitespaceRegex = R"([\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|)"
                                         R"([^\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)";

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

Status unsupported(const std::string& what) {
    return unimplemented("tokenizer.json: " + what + " is not supported");
}

std::string jstr(const json& j, const char* key, const std::string& def = "") {
    if (!j.contains(key) || j.at(key).is_null()) return def;
    return j.at(key).get<std::string>();
}
bool jbool(const json& j, const char* key, bool def) {
    if (!j.contains(key) || j.at(key).is_null()) return def;
    return j.at(key).get<bool>();
}

// ---- small Unicode helpers (Rust char semantics) ----

bool is_ws(uint32_t c) { return unicode_is_whitespace(c); }
bool is_alnum(uint32_t c) { return unicode_is_letter(c) || unicode_is_number(c); }
bool is_ascii_punct(uint32_t c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
}
bool is_bert_punct(uint32_t c) { return is_ascii_punct(c) || unicode_is_punctuation(c); }
bool is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

uint32_t first_cp(std::string_view s) {
    size_t p = 0;
    return utf8_decode(s, &p);
}
uint32_t last_cp(std::string_view s) {
    size_t i = s.size();
    while (i > 0 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) --i;
    if (i > 0) --i;
    size_t p = i;
    return utf8_decode(s, &p);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    if (from.empty()) return std::string(s);
    size_t pos = 0;
    for (;;) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out.append(to);
        pos = hit + from.size();
    }
    out.append(s, pos, std::string::npos);
    return out;
}

// Rust's String::from_utf8_lossy: each maximal invalid prefix becomes one U+FFFD.
std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const uint8_t c = static_cast<uint8_t>(s[i]);
        if (c < 0x80) {
            out.push_back(static_cast<char>(c));
            ++i;
            continue;
        }
        size_t need = 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        }
        size_t k = 1;
        bool ok = need > 0;
        for (; ok && k <= need; ++k) {
            if (i + k >= s.size()) {
                ok = false;
                break;
            }
            const uint8_t b = static_cast<uint8_t>(s[i + k]);
            const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
            if (b < l || b > h) {
                ok = false;
                break;
            }
        }
        if (ok) {
            out.append(s, i, need + 1);
            i += need + 1;
        } else {
            out.append("\xEF\xBF\xBD");
            i += std::max<size_t>(k, 1);
        }
    }
    return out;
}

// ---- patterns (Split, Replace) ----

struct Regex {
    pcre2_code* code = nullptr;
    ~Regex() {
        if (code) pcre2_code_free(code);
    }
};

struct Pattern {
    std::string literal;           // when regex is null
    std::shared_ptr<Regex> regex;  // PCRE2, UTF + UCP
};

Expected<Pattern> parse_pattern(const json& p, const std::string& where) {
    Pattern out;
    if (p.contains("String")) {
        out.literal = p.at("String").get<std::string>();
        return out;
    }
    if (!p.contains("Regex")) return unsupported(where + " pattern " + p.dump());
    const std::string re = p.at("Regex").get<std::string>();
    int err = 0;
    PCRE2_SIZE err_off = 0;
    out.regex = std::make_shared<Regex>();
    out.regex->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
    if (!out.regex->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return invalid_argument("tokenizer.json: " + where + " regex '" + re + "' at " +
                                std::to_string(err_off) + ": " +
                                reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(out.regex->code, PCRE2_JIT_COMPLETE);
    return out;
}

using Span = std::pair<size_t, size_t>;  // [begin, end) bytes

// Non-empty, non-overlapping matches, left to right.
void find_matches(const Pattern& p, std::string_view s, std::vector<Span>& out) {
    out.clear();
    if (!p.regex) {
        if (p.literal.empty()) return;
        size_t pos = 0;
        while ((pos = s.find(p.literal, pos)) != std::string::npos) {
            out.emplace_back(pos, pos + p.literal.size());
            pos += p.literal.size();
        }
        return;
    }
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(p.regex->code, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t pos = 0;
    while (pos <= s.size()) {
        const int rc = pcre2_match(p.regex->code, subject, s.size(), pos, 0, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            pos = ms + 1;
            while (pos < s.size() && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        out.emplace_back(ms, me);
        pos = me;
    }
    pcre2_match_data_free(md);
}

// Each character for which `pred` holds is one match.
void find_char_matches(std::string_view s, const std::function<bool(uint32_t)>& pred,
                       std::vector<Span>& out) {
    out.clear();
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t start = pos;
        const uint32_t cp = utf8_decode(s, &pos);
        if (pred(cp)) out.emplace_back(start, pos);
    }
}

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Expected<Behavior> parse_behavior(const std::string& b, const std::string& where) {
    if (b == "Removed") return Behavior::kRemoved;
    if (b == "Isolated") return Behavior::kIsolated;
    if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return Behavior::kMergedWithNext;
    if (b == "Contiguous") return Behavior::kContiguous;
    return unsupported(where + " behavior '" + b + "'");
}

// HF's NormalizedString::split: matches and the gaps between them, combined per behavior.
std::vector<Span> apply_behavior(size_t len, const std::vector<Span>& matches, Behavior b,
                                 bool invert) {
    std::vector<std::pair<Span, bool>> all;  // (span, is_match)
    size_t prev = 0;
    for (const Span& m : matches) {
        if (m.first > prev) all.push_back({{prev, m.first}, false});
        all.push_back({m, true});
        prev = m.second;
    }
    if (prev < len) all.push_back({{prev, len}, false});
    if (invert) {
        for (auto& a : all) a.second = !a.second;
    }
    std::vector<Span> out;
    switch (b) {
        case Behavior::kIsolated:
            for (auto& a : all) out.push_back(a.first);
            break;
        case Behavior::kRemoved:
            for (auto& a : all) {
                if (!a.second) out.push_back(a.first);
            }
            break;
        case Behavior::kMergedWithPrevious: {
            bool prev_match = false;
            for (auto& a : all) {
                if (a.second && !prev_match && !out.empty()) {
                    out.back().second = a.first.second;
                } else {
                    out.push_back(a.first);
                }
                prev_match = a.second;
            }
            break;
        }
        case Behavior::kMergedWithNext: {
            bool prev_match = false;
            for (size_t i = all.size(); i-- > 0;) {
                auto& a = all[i];
                if (a.second && !prev_match && !out.empty()) {
                    out.back().first = a.first.first;
                } else {
                    out.push_back(a.first);
                }
                prev_match = a.second;
            }
            std::reverse(out.begin(), out.end());
            break;
        }
        case Behavior::kContiguous: {
            bool prev_match = false;
            for (auto& a : all) {
                if (a.second == prev_match && !out.empty()) {
                    out.back().second = a.first.second;
                } else {
                    out.push_back(a.first);
                }
                prev_match = a.second;
            }
            break;
        }
    }
    return out;
}

// ---- normalizers ----

// SentencePiece's precompiled charsmap: a darts-clone double-array trie over UTF-8 keys whose
// values are offsets of NUL-terminated replacements. Blob: u32 (LE) trie size in bytes, the
// trie's u32 units, then the replacement strings.
struct Charsmap {
    std::vector<uint32_t> units;
    std::string normalized;

    // The replacement of the shortest key that is a prefix of `chunk` (what HF uses).
    bool transform(std::string_view chunk, std::string_view* out) const {
        auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
        auto label = [](uint32_t u) { return u & ((1u << 31) | 0xFF); };
        auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1) != 0; };
        if (units.empty()) return false;
        size_t pos = offset(units[0]);
        for (char ch : chunk) {
            const uint8_t c = static_cast<uint8_t>(ch);
            pos ^= c;
            if (pos >= units.size()) return false;
            const uint32_t u = units[pos];
            if (label(u) != c) return false;
            pos ^= offset(u);
            if (pos >= units.size()) return false;
            if (has_leaf(u)) {
                const size_t v = units[pos] & ((1u << 31) - 1);
                if (v >= normalized.size()) return false;
                const size_t end = normalized.find('\0', v);
                *out = std::string_view(normalized)
                           .substr(v, (end == std::string::npos ? normalized.size() : end) - v);
                return true;
            }
        }
        return false;
    }
};

Expected<std::string> base64_decode(std::string_view in) {
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : in) {
        int v;
        if (c >= 'A' && c <= 'Z') {
            v = c - 'A';
        } else if (c >= 'a' && c <= 'z') {
            v = c - 'a' + 26;
        } else if (c >= '0' && c <= '9') {
            v = c - '0' + 52;
        } else if (c == '+') {
            v = 62;
        } else if (c == '/') {
            v = 63;
        } else if (c == '=' || c == '\n' || c == '\r') {
            continue;
        } else {
            return invalid_argument("tokenizer.json: precompiled_charsmap is not base64");
        }
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((acc >> bits) & 0xFF));
        }
    }
    return out;
}

Expected<std::shared_ptr<const Charsmap>> parse_charsmap(const json& n) {
    if (!n.contains("precompiled_charsmap") || !n.at("precompiled_charsmap").is_string()) {
        return unsupported("normalizer Precompiled without a precompiled_charsmap");
    }
    FERROX_ASSIGN_OR_RETURN(std::string blob,
                            base64_decode(n.at("precompiled_charsmap").get<std::string>()));
    if (blob.size() < 4) return invalid_argument("tokenizer.json: precompiled_charsmap too short");
    const uint32_t size = static_cast<uint8_t>(blob[0]) | (static_cast<uint8_t>(blob[1]) << 8) |
                          (static_cast<uint8_t>(blob[2]) << 16) |
                          (static_cast<uint32_t>(static_cast<uint8_t>(blob[3])) << 24);
    if (size % 4 != 0 || size > blob.size() - 4) {
        return invalid_argument("tokenizer.json: precompiled_charsmap trie size " +
                                std::to_string(size) + " does not fit");
    }
    auto cm = std::make_shared<Charsmap>();
    cm->units.resize(size / 4);
    std::memcpy(cm->units.data(), blob.data() + 4, size);  // little-endian hosts only
    cm->normalized = blob.substr(4 + size);
    return std::shared_ptr<const Charsmap>(std::move(cm));
}

// Approximate extended grapheme cluster: a character and the Extend characters after it
// (marks, ZWJ, emoji modifiers), or CR LF. Only clusters shorter than 6 bytes are looked up
// whole, so the approximation is exact for what Precompiled can see.
size_t grapheme_end(std::string_view s, size_t pos) {
    const uint32_t first = utf8_decode(s, &pos);
    if (first == '\r' && pos < s.size() && s[pos] == '\n') return pos + 1;
    if (unicode_category(first) == UnicodeCategory::kCc) return pos;  // controls take no marks
    while (pos < s.size()) {
        size_t next = pos;
        const uint32_t c = utf8_decode(s, &next);
        const bool extend = unicode_is_mark(c) || c == 0x200D || (c >= 0x1F3FB && c <= 0x1F3FF);
        if (!extend) break;
        pos = next;
    }
    return pos;
}

std::string apply_charsmap(const Charsmap& cm, std::string_view s) {
    std::string out;
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t end = grapheme_end(s, pos);
        std::string_view g = s.substr(pos, end - pos), rep;
        if (g.size() < 6 && cm.transform(g, &rep)) {
            out.append(rep);
        } else {
            size_t q = 0;
            while (q < g.size()) {
                const size_t b = q;
                utf8_decode(g, &q);
                std::string_view ch = g.substr(b, q - b);
                out.append(cm.transform(ch, &rep) ? rep : ch);
            }
        }
        pos = end;
    }
    return out;
}

struct NormStep {
    enum class Kind {
        kNfc,
        kNfd,
        kNfkc,
        kNfkd,
        kLowercase,
        kStrip,
        kStripAccents,
        kReplace,
        kPrepend,
        kBert,
        kByteLevel,
        kPrecompiled
    } kind;
    bool left = false, right = false;  // Strip
    Pattern pattern;                   // Replace
    std::string content;               // Replace, Prepend
    bool clean_text = true, chinese = true, strip_accents = true, lowercase = true;  // Bert
    std::shared_ptr<const Charsmap> charsmap;                                        // Precompiled
};

Status parse_normalizer(const json& n, std::vector<NormStep>& out) {
    if (n.is_null()) return Status::ok();
    const std::string type = jstr(n, "type");
    NormStep s{};
    if (type == "Sequence") {
        for (const json& q : n.at("normalizers")) FERROX_RETURN_IF_ERROR(parse_normalizer(q, out));
        return Status::ok();
    } else if (type == "NFC") {
        s.kind = NormStep::Kind::kNfc;
    } else if (type == "NFD") {
        s.kind = NormStep::Kind::kNfd;
    } else if (type == "NFKC") {
        s.kind = NormStep::Kind::kNfkc;
    } else if (type == "NFKD") {
        s.kind = NormStep::Kind::kNfkd;
    } else if (type == "Lowercase") {
        s.kind = NormStep::Kind::kLowercase;
    } else if (type == "Strip") {
        s.kind = NormStep::Kind::kStrip;
        s.left = jbool(n, "strip_left", true);
        s.right = jbool(n, "strip_right", true);
    } else if (type == "StripAccents") {
        s.kind = NormStep::Kind::kStripAccents;
    } else if (type == "Replace") {
        s.kind = NormStep::Kind::kReplace;
        FERROX_ASSIGN_OR_RETURN(s.pattern, parse_pattern(n.at("pattern"), "normalizer Replace"));
        s.content = jstr(n, "content");
    } else if (type == "Prepend") {
        s.kind = NormStep::Kind::kPrepend;
        s.content = jstr(n, "prepend");
    } else if (type == "BertNormalizer") {
        s.kind = NormStep::Kind::kBert;
        s.clean_text = jbool(n, "clean_text", true);
        s.chinese = jbool(n, "handle_chinese_chars", true);
        s.lowercase = jbool(n, "lowercase", true);
        s.strip_accents = jbool(n, "strip_accents", s.lowercase);
    } else if (type == "ByteLevel") {
        s.kind = NormStep::Kind::kByteLevel;
    } else if (type == "Precompiled") {
        s.kind = NormStep::Kind::kPrecompiled;
        FERROX_ASSIGN_OR_RETURN(s.charsmap, parse_charsmap(n));
    } else {
        return unsupported("normalizer type '" + type + "'");
    }
    out.push_back(std::move(s));
    return Status::ok();
}

std::string lowercase(std::string_view s) {
    std::u32string out;
    for (char32_t c : utf8_to_u32(s)) unicode_append_lower(c, out);
    return u32_to_utf8(out);
}

std::string apply_normalizer(const NormStep& n, std::string s) {
    switch (n.kind) {
        case NormStep::Kind::kNfc:
            return u32_to_utf8(unicode_nfc(utf8_to_u32(s)));
        case NormStep::Kind::kNfd:
            return u32_to_utf8(unicode_nfd(utf8_to_u32(s)));
        case NormStep::Kind::kNfkc:
            return u32_to_utf8(unicode_nfkc(utf8_to_u32(s)));
        case NormStep::Kind::kNfkd:
            return u32_to_utf8(unicode_nfkd(utf8_to_u32(s)));
        case NormStep::Kind::kLowercase:
            return lowercase(s);
        case NormStep::Kind::kStrip: {
            std::u32string u = utf8_to_u32(s);
            size_t b = 0, e = u.size();
            if (n.left) {
                while (b < e && is_ws(u[b])) ++b;
            }
            if (n.right) {
                while (e > b && is_ws(u[e - 1])) --e;
            }
            return u32_to_utf8(std::u32string_view(u).substr(b, e - b));
        }
        case NormStep::Kind::kStripAccents: {
            std::u32string out;
            for (char32_t c : utf8_to_u32(s)) {
                if (!unicode_is_mark(c)) out.push_back(c);
            }
            return u32_to_utf8(out);
        }
        case NormStep::Kind::kReplace: {
            std::vector<Span> m;
            find_matches(n.pattern, s, m);
            std::string out;
            size_t prev = 0;
            for (const Span& sp : m) {
                out.append(s, prev, sp.first - prev);
                out.append(n.content);
                prev = sp.second;
            }
            out.append(s, prev, std::string::npos);
            return out;
        }
        case NormStep::Kind::kPrepend:
            return s.empty() ? s : n.content + s;
        case NormStep::Kind::kBert: {
            std::u32string u;
            for (char32_t c : utf8_to_u32(s)) {
                if (n.clean_text) {
                    if (c == 0 || c == 0xFFFD) continue;
                    const bool ws = c == '\t' || c == '\n' || c == '\r' || is_ws(c);
                    if (ws) {
                        u.push_back(' ');
                        continue;
                    }
                    // HF's is_control: Cc, Cf, Co, Cs; unassigned code points stay.
                    if (unicode_is_other(c) && unicode_category(c) != UnicodeCategory::kCn) {
                        continue;
                    }
                }
                if (n.chinese && is_cjk(c)) {
                    u.push_back(' ');
                    u.push_back(c);
                    u.push_back(' ');
                    continue;
                }
                u.push_back(c);
            }
            if (n.strip_accents) {
                std::u32string d = unicode_nfd(u);
                u.clear();
                for (char32_t c : d) {
                    if (unicode_category(c) != UnicodeCategory::kMn) u.push_back(c);
                }
            }
            if (n.lowercase) {
                std::u32string l;
                for (char32_t c : u) unicode_append_lower(c, l);
                u.swap(l);
            }
            return u32_to_utf8(u);
        }
        case NormStep::Kind::kByteLevel: {
            std::string out;
            for (char c : s) out += byte_to_unicode_utf8(static_cast<uint8_t>(c));
            return out;
        }
        case NormStep::Kind::kPrecompiled:
            return apply_charsmap(*n.charsmap, s);
    }
    return s;
}

// ---- pre-tokenizers ----

enum class Prepend { kAlways, kFirst, kNever };

Expected<Prepend> parse_prepend_scheme(const json& p, const std::string& where) {
    if (p.contains("prepend_scheme") && !p.at("prepend_scheme").is_null()) {
        const std::string s = p.at("prepend_scheme").get<std::string>();
        if (s == "always") return Prepend::kAlways;
        if (s == "first") return Prepend::kFirst;
        if (s == "never") return Prepend::kNever;
        return unsupported(where + " prepend_scheme '" + s + "'");
    }
    return jbool(p, "add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
}

std::string metaspace_replacement(const json& p) {
    if (p.contains("replacement")) return p.at("replacement").get<std::string>();
    return "\xE2\x96\x81";
}

struct PreStep {
    enum class Kind {
        kByteLevel,
        kSplit,
        kMetaspace,
        kWhitespace,
        kWhitespaceSplit,
        kPunctuation,
        kDigits,
        kCharDelimiter,
        kBert,
        kUnicodeScripts,
        kFixedLength,
    } kind;
    bool add_prefix_space = false, use_regex = true;  // ByteLevel
    Pattern pattern;                                  // Split
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    std::string replacement;  // Metaspace
    Prepend prepend = Prepend::kAlways;
    bool split = true;
    bool individual_digits = false;  // Digits
    uint32_t delimiter = 0;          // CharDelimiterSplit
    size_t length = 5;               // FixedLength, in characters
};

Status parse_pre(const json& p, std::vector<PreStep>& out) {
    if (p.is_null()) return Status::ok();
    const std::string type = jstr(p, "type");
    PreStep s{};
    if (type == "Sequence") {
        for (const json& q : p.at("pretokenizers")) FERROX_RETURN_IF_ERROR(parse_pre(q, out));
        return Status::ok();
    } else if (type == "ByteLevel") {
        s.kind = PreStep::Kind::kByteLevel;
        s.add_prefix_space = jbool(p, "add_prefix_space", true);
        s.use_regex = jbool(p, "use_regex", true);
        FERROX_ASSIGN_OR_RETURN(s.pattern, parse_pattern(json{{"Regex", kGpt2Regex}}, "ByteLevel"));
    } else if (type == "Split") {
        s.kind = PreStep::Kind::kSplit;
        FERROX_ASSIGN_OR_RETURN(s.pattern, parse_pattern(p.at("pattern"), "pre_tokenizer Split"));
        FERROX_ASSIGN_OR_RETURN(s.behavior,
                                parse_behavior(jstr(p, "behavior"), "pre_tokenizer Split"));
        s.invert = jbool(p, "invert", false);
    } else if (type == "Metaspace") {
        s.kind = PreStep::Kind::kMetaspace;
        s.replacement = metaspace_replacement(p);
        FERROX_ASSIGN_OR_RETURN(s.prepend, parse_prepend_scheme(p, "pre_tokenizer Metaspace"));
        s.split = jbool(p, "split", true);
    } else if (type == "Whitespace") {
        s.kind = PreStep::Kind::kWhitespace;
        FERROX_ASSIGN_OR_RETURN(s.pattern,
                                parse_pattern(json{{"Regex", kWhitespaceRegex}}, "Whitespace"));
    } else if (type == "WhitespaceSplit") {
        s.kind = PreStep::Kind::kWhitespaceSplit;
    } else if (type == "Punctuation") {
        s.kind = PreStep::Kind::kPunctuation;
        FERROX_ASSIGN_OR_RETURN(s.behavior, parse_behavior(jstr(p, "behavior", "Isolated"),
                                                           "pre_tokenizer Punctuation"));
    } else if (type == "Digits") {
        s.kind = PreStep::Kind::kDigits;
        s.individual_digits = jbool(p, "individual_digits", false);
    } else if (type == "CharDelimiterSplit") {
        s.kind = PreStep::Kind::kCharDelimiter;
        const std::string d = jstr(p, "delimiter");
        s.delimiter = first_cp(d);
    } else if (type == "BertPreTokenizer") {
        s.kind = PreStep::Kind::kBert;
    } else if (type == "UnicodeScripts") {
        s.kind = PreStep::Kind::kUnicodeScripts;
    } else if (type == "FixedLength") {
        s.kind = PreStep::Kind::kFixedLength;
        s.length = p.value("length", 5);
        if (s.length == 0) return unsupported("pre_tokenizer FixedLength length 0");
    } else {
        return unsupported("pre_tokenizer type '" + type + "'");
    }
    out.push_back(std::move(s));
    return Status::ok();
}

// HF's script of a character for UnicodeScripts: Hiragana, Katakana and U+30FC count as Han;
// U+0020 and unassigned code points are "Any" (kAnyScript), which never starts a new piece.
constexpr int32_t kAnyScript = -2;
int32_t hf_script(uint32_t c) {
    if (c == 0x30FC) return unicode_script_han();
    if (c == ' ') return kAnyScript;
    const int32_t s = unicode_script(c);
    if (s < 0) return kAnyScript;  // unassigned
    if (s == unicode_script_hiragana() || s == unicode_script_katakana()) {
        return unicode_script_han();
    }
    return s;
}

// A piece of normalized text being pre-tokenized; `at_start`: it begins at offset 0 of the
// input (Metaspace prepend_scheme "first").
struct Piece {
    std::string text;
    bool at_start = false;
};

void split_piece(const Piece& p, const std::vector<Span>& matches, Behavior b, bool invert,
                 std::vector<Piece>& out) {
    for (const Span& sp : apply_behavior(p.text.size(), matches, b, invert)) {
        if (sp.second <= sp.first) continue;
        out.push_back({p.text.substr(sp.first, sp.second - sp.first), p.at_start && sp.first == 0});
    }
}

void apply_pre(const PreStep& s, std::vector<Piece>& pieces) {
    std::vector<Piece> out;
    std::vector<Span> m;
    for (Piece& p : pieces) {
        switch (s.kind) {
            case PreStep::Kind::kByteLevel: {
                if (s.add_prefix_space && (p.text.empty() || p.text[0] != ' ')) {
                    p.text.insert(0, " ");
                }
                std::vector<Piece> parts;
                if (s.use_regex) {
                    find_matches(s.pattern, p.text, m);
                    split_piece(p, m, Behavior::kIsolated, false, parts);
                } else {
                    parts.push_back(p);
                }
                for (Piece& q : parts) {
                    std::string mapped;
                    for (char c : q.text) mapped += byte_to_unicode_utf8(static_cast<uint8_t>(c));
                    out.push_back({std::move(mapped), q.at_start});
                }
                break;
            }
            case PreStep::Kind::kSplit:
                find_matches(s.pattern, p.text, m);
                split_piece(p, m, s.behavior, s.invert, out);
                break;
            case PreStep::Kind::kMetaspace: {
                Piece q{replace_all(p.text, " ", s.replacement), p.at_start};
                if (q.text.compare(0, s.replacement.size(), s.replacement) != 0 &&
                    (s.prepend == Prepend::kAlways ||
                     (s.prepend == Prepend::kFirst && q.at_start))) {
                    q.text.insert(0, s.replacement);
                }
                if (s.split) {
                    find_matches(Pattern{s.replacement, nullptr}, q.text, m);
                    split_piece(q, m, Behavior::kMergedWithNext, false, out);
                } else if (!q.text.empty()) {
                    out.push_back(std::move(q));
                }
                break;
            }
            case PreStep::Kind::kWhitespace:
                find_matches(s.pattern, p.text, m);
                split_piece(p, m, Behavior::kRemoved, true, out);
                break;
            case PreStep::Kind::kWhitespaceSplit:
                find_char_matches(p.text, is_ws, m);
                split_piece(p, m, Behavior::kRemoved, false, out);
                break;
            case PreStep::Kind::kPunctuation:
                find_char_matches(p.text, is_bert_punct, m);
                split_piece(p, m, s.behavior, false, out);
                break;
            case PreStep::Kind::kDigits:
                find_char_matches(p.text, unicode_is_number, m);
                split_piece(p, m, s.individual_digits ? Behavior::kIsolated : Behavior::kContiguous,
                            false, out);
                break;
            case PreStep::Kind::kCharDelimiter: {
                const uint32_t d = s.delimiter;
                find_char_matches(
                    p.text, [d](uint32_t c) { return c == d; }, m);
                split_piece(p, m, Behavior::kRemoved, false, out);
                break;
            }
            case PreStep::Kind::kUnicodeScripts: {
                // A piece starts where the script changes (ignoring spaces); text before the
                // first such point (leading spaces) is dropped, as HF does.
                std::vector<size_t> starts;
                int32_t last = kAnyScript;
                bool have_last = false;
                size_t pos = 0;
                while (pos < p.text.size()) {
                    const size_t at = pos;
                    const int32_t sc = hf_script(utf8_decode(p.text, &pos));
                    if (sc == kAnyScript) continue;
                    if (!have_last || last != sc) starts.push_back(at);
                    last = sc;
                    have_last = true;
                }
                for (size_t k = 0; k < starts.size(); ++k) {
                    const size_t e = k + 1 < starts.size() ? starts[k + 1] : p.text.size();
                    out.push_back(
                        {p.text.substr(starts[k], e - starts[k]), p.at_start && starts[k] == 0});
                }
                break;
            }
            case PreStep::Kind::kFixedLength: {
                size_t pos = 0;
                while (pos < p.text.size()) {
                    const size_t start = pos;
                    for (size_t k = 0; k < s.length && pos < p.text.size(); ++k) {
                        utf8_decode(p.text, &pos);
                    }
                    out.push_back({p.text.substr(start, pos - start), p.at_start && start == 0});
                }
                break;
            }
            case PreStep::Kind::kBert: {
                std::vector<Piece> words;
                find_char_matches(p.text, is_ws, m);
                split_piece(p, m, Behavior::kRemoved, false, words);
                for (const Piece& w : words) {
                    find_char_matches(w.text, is_bert_punct, m);
                    split_piece(w, m, Behavior::kIsolated, false, out);
                }
                break;
            }
        }
    }
    pieces.swap(out);
}

// ---- decoders ----

struct DecStep {
    enum class Kind {
        kByteLevel,
        kMetaspace,
        kWordPiece,
        kBpe,
        kByteFallback,
        kFuse,
        kStrip,
        kReplace,
        kCtc,
    } kind;
    std::string text;   // Metaspace replacement, WordPiece prefix, BPE suffix, Strip content,
                        // Replace content, CTC pad token
    std::string text2;  // CTC word delimiter
    Prepend prepend = Prepend::kAlways;
    bool cleanup = false;
    Pattern pattern;
    size_t start = 0, stop = 0;
};

Status parse_decoder(const json& d, std::vector<DecStep>& out) {
    if (d.is_null()) return Status::ok();
    const std::string type = jstr(d, "type");
    DecStep s{};
    if (type == "Sequence") {
        for (const json& q : d.at("decoders")) FERROX_RETURN_IF_ERROR(parse_decoder(q, out));
        return Status::ok();
    } else if (type == "ByteLevel") {
        s.kind = DecStep::Kind::kByteLevel;
    } else if (type == "Metaspace") {
        s.kind = DecStep::Kind::kMetaspace;
        s.text = metaspace_replacement(d);
        FERROX_ASSIGN_OR_RETURN(s.prepend, parse_prepend_scheme(d, "decoder Metaspace"));
    } else if (type == "WordPiece") {
        s.kind = DecStep::Kind::kWordPiece;
        s.text = jstr(d, "prefix", "##");
        s.cleanup = jbool(d, "cleanup", true);
    } else if (type == "BPEDecoder") {
        s.kind = DecStep::Kind::kBpe;
        s.text = jstr(d, "suffix", "</w>");
    } else if (type == "ByteFallback") {
        s.kind = DecStep::Kind::kByteFallback;
    } else if (type == "Fuse") {
        s.kind = DecStep::Kind::kFuse;
    } else if (type == "Strip") {
        s.kind = DecStep::Kind::kStrip;
        s.text = jstr(d, "content", " ");
        s.start = d.value("start", 0);
        s.stop = d.value("stop", 0);
    } else if (type == "Replace") {
        s.kind = DecStep::Kind::kReplace;
        FERROX_ASSIGN_OR_RETURN(s.pattern, parse_pattern(d.at("pattern"), "decoder Replace"));
        s.text = jstr(d, "content");
    } else if (type == "CTC") {
        s.kind = DecStep::Kind::kCtc;
        s.text = jstr(d, "pad_token", "<pad>");
        s.text2 = jstr(d, "word_delimiter_token", "|");
        s.cleanup = jbool(d, "cleanup", true);
    } else {
        return unsupported("decoder type '" + type + "'");
    }
    out.push_back(std::move(s));
    return Status::ok();
}

// HF's decoder clean-up of tokenization spaces (WordPiece, CTC).
std::string cleanup_spaces(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) s = replace_all(s, from, to);
    return s;
}

int parse_byte_token(std::string_view t) {
    auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    const int hi = hex(t[3]), lo = hex(t[4]);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// One decoder over the token list. `raw`: keep invalid UTF-8 bytes (per-token pieces).
void apply_decoder(const DecStep& d, std::vector<std::string>& toks, bool raw) {
    switch (d.kind) {
        case DecStep::Kind::kByteLevel: {
            std::string bytes;
            for (const std::string& t : toks) {
                std::string mapped;
                bool ok = true;
                size_t pos = 0;
                while (pos < t.size()) {
                    const int b = unicode_to_byte(utf8_decode(t, &pos));
                    if (b < 0) {
                        ok = false;
                        break;
                    }
                    mapped.push_back(static_cast<char>(b));
                }
                bytes += ok ? mapped : t;
            }
            toks.assign(1, raw ? bytes : utf8_lossy(bytes));
            break;
        }
        case DecStep::Kind::kMetaspace:
            for (size_t i = 0; i < toks.size(); ++i) {
                std::string t = replace_all(toks[i], d.text, " ");
                if (i == 0 && d.prepend != Prepend::kNever && !t.empty() && t[0] == ' ') {
                    t.erase(0, 1);
                }
                toks[i] = std::move(t);
            }
            break;
        case DecStep::Kind::kWordPiece:
            for (size_t i = 0; i < toks.size(); ++i) {
                std::string& t = toks[i];
                if (i != 0) {
                    if (t.compare(0, d.text.size(), d.text) == 0) {
                        t.erase(0, d.text.size());
                    } else {
                        t.insert(0, " ");
                    }
                }
                if (d.cleanup) t = cleanup_spaces(t);
            }
            break;
        case DecStep::Kind::kBpe:
            for (size_t i = 0; i < toks.size(); ++i) {
                toks[i] = replace_all(toks[i], d.text, i + 1 == toks.size() ? "" : " ");
            }
            break;
        case DecStep::Kind::kByteFallback: {
            std::vector<std::string> out;
            std::string pending;
            bool in_bytes = false;
            auto flush = [&]() {
                if (!in_bytes) return;
                if (raw || utf8_is_valid(pending)) {
                    out.push_back(pending);
                } else {
                    for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
                }
                pending.clear();
                in_bytes = false;
            };
            for (std::string& t : toks) {
                const int b = parse_byte_token(t);
                if (b >= 0) {
                    pending.push_back(static_cast<char>(b));
                    in_bytes = true;
                } else {
                    flush();
                    out.push_back(std::move(t));
                }
            }
            flush();
            toks.swap(out);
            break;
        }
        case DecStep::Kind::kFuse: {
            std::string all;
            for (const std::string& t : toks) all += t;
            toks.assign(1, all);
            break;
        }
        case DecStep::Kind::kStrip: {
            // On bytes, so raw pieces with partial UTF-8 pass through unchanged.
            const std::string ch = d.text.empty() ? " " : d.text.substr(0, utf8_seq_len(d.text[0]));
            for (std::string& t : toks) {
                size_t b = 0, e = t.size();
                for (size_t k = 0;
                     k < d.start && e - b >= ch.size() && t.compare(b, ch.size(), ch) == 0; ++k) {
                    b += ch.size();
                }
                for (size_t k = 0; k < d.stop && e - b >= ch.size() &&
                                   t.compare(e - ch.size(), ch.size(), ch) == 0;
                     ++k) {
                    e -= ch.size();
                }
                t = t.substr(b, e - b);
            }
            break;
        }
        case DecStep::Kind::kReplace:
            for (std::string& t : toks) {
                std::vector<Span> m;
                find_matches(d.pattern, t, m);
                std::string out;
                size_t prev = 0;
                for (const Span& sp : m) {
                    out.append(t, prev, sp.first - prev);
                    out.append(d.text);
                    prev = sp.second;
                }
                out.append(t, prev, std::string::npos);
                t = std::move(out);
            }
            break;
        case DecStep::Kind::kCtc: {
            std::vector<std::string> out;
            for (size_t i = 0; i < toks.size(); ++i) {
                if (i > 0 && toks[i] == toks[i - 1]) continue;
                if (toks[i] == d.text) continue;
                // HF cleans up before turning delimiters into spaces.
                std::string t = d.cleanup ? cleanup_spaces(toks[i]) : toks[i];
                out.push_back(replace_all(t, d.text2, " "));
            }
            toks.swap(out);
            break;
        }
    }
}

// ---- added tokens ----

struct AddedToken {
    int32_t id;
    std::string content;  // as matched: normalized when `normalized`
    bool single_word, lstrip, rstrip, normalized, special;
};

}  // namespace

// ---- the pipeline ----

struct HfPipeline::Impl {
    enum class Model { kBpe, kWordPiece, kUnigram, kWordLevel } model;
    std::vector<std::string> id_to_token;
    std::vector<std::string> decode_text;  // id_to_token, but normalized added tokens as matched
    std::vector<TokenType> types;
    std::vector<float> scores;
    std::vector<uint8_t> is_special;  // special added token
    TokenMap vocab;                   // model vocabulary
    TokenMap added_map;               // added tokens' content -> id
    int32_t unk = -1;
    // BPE
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (l,r) -> (rank, id)
    std::string prefix, suffix;  // continuing_subword_prefix, end_of_word_suffix
    bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
    // WordPiece
    size_t max_chars = 100;
    // Unigram
    size_t max_piece_bytes = 0;
    double min_score = 0;

    std::vector<NormStep> norm;
    std::vector<PreStep> pre;
    std::vector<DecStep> dec;
    std::vector<AddedToken> added;  // longest first
    // Post-processor (add_special): ids before and after the sequence.
    std::vector<int32_t> post_before, post_after;
    // Two ordinary tokens (ASCII letters) that piece() decodes a token after; -1 if none.
    int32_t piece_ctx[2] = {-1, -1};

    int32_t vocab_id(std::string_view s) const {
        auto it = vocab.find(s);
        return it == vocab.end() ? -1 : it->second;
    }
    std::string normalize(std::string s) const {
        for (const NormStep& n : norm) s = apply_normalizer(n, std::move(s));
        return s;
    }
    void split_added(std::string_view text, bool normalized_pass, bool parse_special,
                     std::vector<std::pair<int32_t, std::string>>& out) const;
    void encode_text(const std::string& text, bool at_start, bool parse_special,
                     std::vector<int32_t>& out) const;
    void model_encode(std::string_view word, std::vector<int32_t>& out) const;
    void bpe(std::string_view word, std::vector<int32_t>& out) const;
    void wordpiece(std::string_view word, std::vector<int32_t>& out) const;
    void unigram(std::string_view word, std::vector<int32_t>& out) const;
    std::string decode_raw(std::initializer_list<int32_t> ids) const;
    Status parse_model(const json& m);
    Status parse_post(const json& p);
};

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Status HfPipeline::Impl::parse_model(const json& m) {
    const std::string type = jstr(m, "type");
    auto add_vocab = [&](const std::string& text, int32_t id) {
        if (static_cast<size_t>(id) >= id_to_token.size()) id_to_token.resize(id + 1);
        id_to_token[id] = text;
        vocab.emplace(text, id);
    };
    // A vocab object: text -> id. Two texts with one id are a corrupt file: decoding that id
    // could give back only one of them (HF's tokenizers keeps whichever its hash map visits
    // last), so encode and decode would disagree.
    auto add_vocab_map = [&](const json& v) -> Status {
        if (!v.is_object()) return invalid_argument("tokenizer.json: model vocab is not an object");
        const int64_t limit = static_cast<int64_t>(v.size()) + kHfMaxIdHoles;
        std::vector<uint8_t> taken;
        for (auto it = v.begin(); it != v.end(); ++it) {
            FERROX_ASSIGN_OR_RETURN(const int32_t id, hf_token_id(it.value(), limit, "model vocab"));
            if (static_cast<size_t>(id) >= taken.size()) taken.resize(static_cast<size_t>(id) + 1, 0);
            if (taken[id]) {
                return invalid_argument("tokenizer.json: model vocab gives id " + std::to_string(id) + " to both " +
                                        hf_quote(id_to_token[id]) + " and " + hf_quote(it.key()));
            }
            taken[id] = 1;
            add_vocab(it.key(), id);
        }
        return Status::ok();
    };
    if (type == "BPE" || (type.empty() && m.contains("merges"))) {
        model = Model::kBpe;
        if (m.contains("dropout") && !m.at("dropout").is_null()) {
            return unsupported("model BPE dropout " + m.at("dropout").dump());
        }
        FERROX_RETURN_IF_ERROR(add_vocab_map(m.at("vocab")));
        prefix = jstr(m, "continuing_subword_prefix");
        suffix = jstr(m, "end_of_word_suffix");
        byte_fallback = jbool(m, "byte_fallback", false);
        ignore_merges = jbool(m, "ignore_merges", false);
        fuse_unk = jbool(m, "fuse_unk", false);
        if (m.contains("unk_token") && m.at("unk_token").is_string()) {
            unk = vocab_id(m.at("unk_token").get<std::string>());
        }
        const json& ms = m.at("merges");
        for (size_t r = 0; r < ms.size(); ++r) {
            std::string l, rt;
            if (ms[r].is_string()) {
                const std::string s = ms[r].get<std::string>();
                const size_t sp = s.find(' ', 1);
                if (sp == std::string::npos) return invalid_argument("tokenizer.json: merge " + s);
                l = s.substr(0, sp);
                rt = s.substr(sp + 1);
            } else {
                l = ms[r].at(0).get<std::string>();
                rt = ms[r].at(1).get<std::string>();
            }
            const int32_t a = vocab_id(l), b = vocab_id(rt);
            std::string joined = l;
            joined += (!prefix.empty() && rt.compare(0, prefix.size(), prefix) == 0)
                          ? rt.substr(prefix.size())
                          : rt;
            const int32_t c = vocab_id(joined);
            if (a < 0 || b < 0 || c < 0) return hf_merge_out_of_vocab(l, rt, a < 0 ? l : b < 0 ? rt : joined);
            merges.emplace(pair_key(a, b), std::make_pair(static_cast<int32_t>(r), c));
        }
        return Status::ok();
    }
    if (type == "WordPiece") {
        model = Model::kWordPiece;
        FERROX_RETURN_IF_ERROR(add_vocab_map(m.at("vocab")));
        prefix = jstr(m, "continuing_subword_prefix", "##");
        max_chars = m.value("max_input_chars_per_word", 100);
        unk = vocab_id(jstr(m, "unk_token", "[UNK]"));
        return Status::ok();
    }
    if (type == "WordLevel") {
        model = Model::kWordLevel;
        FERROX_RETURN_IF_ERROR(add_vocab_map(m.at("vocab")));
        if (m.contains("unk_token") && m.at("unk_token").is_string()) {
            unk = vocab_id(m.at("unk_token").get<std::string>());
        }
        return Status::ok();
    }
    if (type == "Unigram") {
        model = Model::kUnigram;
        const json& v = m.at("vocab");
        scores.resize(v.size(), 0.0f);
        min_score = std::numeric_limits<double>::max();
        for (size_t i = 0; i < v.size(); ++i) {
            const std::string piece = v[i].at(0).get<std::string>();
            const double score = v[i].at(1).get<double>();
            add_vocab(piece, static_cast<int32_t>(i));
            scores[i] = static_cast<float>(score);
            min_score = std::min(min_score, score);
            max_piece_bytes = std::max(max_piece_bytes, piece.size());
        }
        if (m.contains("unk_id") && !m.at("unk_id").is_null()) {
            FERROX_ASSIGN_OR_RETURN(unk, hf_token_id(m.at("unk_id"), static_cast<int64_t>(v.size()), "model unk_id"));
        }
        byte_fallback = jbool(m, "byte_fallback", false);
        return Status::ok();
    }
    return unsupported("model type '" + type + "'");
}

Status HfPipeline::Impl::parse_post(const json& p) {
    if (p.is_null()) return Status::ok();
    const std::string type = jstr(p, "type");
    if (type == "Sequence") {
        for (const json& q : p.at("processors")) FERROX_RETURN_IF_ERROR(parse_post(q));
        return Status::ok();
    }
    if (type == "ByteLevel") return Status::ok();  // offsets only
    if (type == "BertProcessing" || type == "RobertaProcessing") {
        FERROX_ASSIGN_OR_RETURN(const int32_t cls, hf_token_id(p.at("cls").at(1), INT32_MAX, "post_processor cls"));
        FERROX_ASSIGN_OR_RETURN(const int32_t sep, hf_token_id(p.at("sep").at(1), INT32_MAX, "post_processor sep"));
        post_before.push_back(cls);
        post_after.push_back(sep);
        return Status::ok();
    }
    if (type == "TemplateProcessing") {
        const json& special = p.at("special_tokens");
        bool seen_seq = false;
        for (const json& item : p.at("single")) {
            if (item.contains("Sequence")) {
                if (seen_seq || item.at("Sequence").at("id").get<std::string>() != "A") {
                    return unsupported("post_processor TemplateProcessing single " +
                                       p.at("single").dump());
                }
                seen_seq = true;
                continue;
            }
            const std::string name = item.at("SpecialToken").at("id").get<std::string>();
            if (!special.contains(name)) {
                return invalid_argument("tokenizer.json: template token '" + name + "' undefined");
            }
            for (const json& id : special.at(name).at("ids")) {
                FERROX_ASSIGN_OR_RETURN(const int32_t i, hf_token_id(id, INT32_MAX, "post_processor special token"));
                (seen_seq ? post_after : post_before).push_back(i);
            }
        }
        return Status::ok();
    }
    return unsupported("post_processor type '" + type + "'");
}

// HF's AddedVocabulary split: leftmost-longest matches of the added tokens of this pass
// (raw text: normalized == false; normalized text: normalized == true). Text between matches
// gets id -1.
void HfPipeline::Impl::split_added(std::string_view text, bool normalized_pass, bool parse_special,
                                   std::vector<std::pair<int32_t, std::string>>& out) const {
    size_t emit = 0, i = 0;
    while (i < text.size()) {
        const AddedToken* hit = nullptr;
        for (const AddedToken& a : added) {  // longest first
            if (a.normalized != normalized_pass || (a.special && !parse_special)) continue;
            if (a.content.empty() || text.compare(i, a.content.size(), a.content) != 0) continue;
            hit = &a;
            break;
        }
        if (!hit) {
            ++i;
            continue;
        }
        size_t start = i, stop = i + hit->content.size();
        if (hit->single_word) {
            const bool ok_left = start == 0 || !(is_alnum(last_cp(text.substr(0, start))) ||
                                                 last_cp(text.substr(0, start)) == '_');
            const uint32_t nc = stop < text.size() ? first_cp(text.substr(stop)) : 0;
            const bool ok_right = stop == text.size() || !(is_alnum(nc) || nc == '_');
            if (!ok_left || !ok_right) {
                i = stop;  // the match is consumed, as HF's non-overlapping search does
                continue;
            }
        }
        if (hit->lstrip) {
            while (start > emit) {
                size_t b = start - 1;
                while (b > emit && (static_cast<uint8_t>(text[b]) & 0xC0) == 0x80) --b;
                if (!is_ws(first_cp(text.substr(b)))) break;
                start = b;
            }
        }
        if (hit->rstrip) {
            while (stop < text.size()) {
                size_t p = stop;
                if (!is_ws(utf8_decode(text, &p))) break;
                stop = p;
            }
        }
        if (start > emit) out.push_back({-1, std::string(text.substr(emit, start - emit))});
        out.push_back({hit->id, {}});
        emit = i = stop;
    }
    if (emit < text.size()) out.push_back({-1, std::string(text.substr(emit))});
}

void HfPipeline::Impl::encode_text(const std::string& text, bool at_start, bool parse_special,
                                   std::vector<int32_t>& out) const {
    std::vector<std::pair<int32_t, std::string>> parts;
    split_added(normalize(text), true, parse_special, parts);
    for (size_t k = 0; k < parts.size(); ++k) {
        if (parts[k].first >= 0) {
            out.push_back(parts[k].first);
            continue;
        }
        std::vector<Piece> pieces{{parts[k].second, at_start && k == 0}};
        for (const PreStep& s : pre) apply_pre(s, pieces);
        for (const Piece& p : pieces) model_encode(p.text, out);
    }
}

void HfPipeline::Impl::model_encode(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    switch (model) {
        case Model::kBpe:
            bpe(word, out);
            break;
        case Model::kWordPiece:
            wordpiece(word, out);
            break;
        case Model::kUnigram:
            unigram(word, out);
            break;
        case Model::kWordLevel: {
            const int32_t id = vocab_id(word);
            if (id >= 0) {
                out.push_back(id);
            } else if (unk >= 0) {
                out.push_back(unk);
            }
            break;
        }
    }
}

void HfPipeline::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges) {
        const int32_t id = vocab_id(word);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    std::vector<int32_t> syms;
    bool has_pending = false;
    std::string s;
    size_t pos = 0;
    while (pos < word.size()) {
        const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(word[pos])), word.size() - pos);
        const bool first = pos == 0, last = pos + n == word.size();
        s.clear();
        if (!first) s += prefix;
        s.append(word.substr(pos, n));
        if (last) s += suffix;
        pos += n;
        const int32_t id = vocab_id(s);
        if (id >= 0) {
            if (has_pending) syms.push_back(unk);
            has_pending = false;
            syms.push_back(id);
            continue;
        }
        if (byte_fallback) {
            std::vector<int32_t> bytes;
            for (char c : s) {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<uint8_t>(c));
                const int32_t b = vocab_id(buf);
                if (b < 0) break;
                bytes.push_back(b);
            }
            if (bytes.size() == s.size()) {
                syms.insert(syms.end(), bytes.begin(), bytes.end());
                continue;
            }
        }
        if (unk >= 0) {
            if (has_pending && !fuse_unk) syms.push_back(unk);
            has_pending = true;
        }
    }
    if (has_pending) syms.push_back(unk);

    // Merge the lowest-ranked adjacent pair (leftmost on ties) until none applies.
    const int32_t ns = static_cast<int32_t>(syms.size());
    std::vector<int32_t> next(ns), prev(ns);
    std::vector<uint8_t> alive(ns, 1);
    for (int32_t i = 0; i < ns; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1 < ns ? i + 1 : -1;
    }
    struct Cand {
        int32_t rank, left, left_id, right_id;
        bool operator<(const Cand& o) const {
            return rank != o.rank ? rank > o.rank : left > o.left;
        }
    };
    std::vector<Cand> heap;
    auto try_add = [&](int32_t l) {
        if (l < 0 || next[l] < 0) return;
        auto it = merges.find(pair_key(syms[l], syms[next[l]]));
        if (it == merges.end()) return;
        heap.push_back({it->second.first, l, syms[l], syms[next[l]]});
        std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 0; i + 1 < ns; ++i) try_add(i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end());
        const Cand c = heap.back();
        heap.pop_back();
        if (!alive[c.left] || syms[c.left] != c.left_id || next[c.left] < 0) continue;
        const int32_t r = next[c.left];
        if (syms[r] != c.right_id) continue;
        syms[c.left] = merges.find(pair_key(c.left_id, c.right_id))->second.second;
        alive[r] = 0;
        next[c.left] = next[r];
        if (next[r] >= 0) prev[next[r]] = c.left;
        try_add(prev[c.left]);
        try_add(c.left);
    }
    for (int32_t i = 0; i >= 0 && i < ns; i = next[i]) out.push_back(syms[i]);
}

void HfPipeline::Impl::wordpiece(std::string_view word, std::vector<int32_t>& out) const {
    size_t n_chars = 0;
    for (char c : word) n_chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    if (n_chars > max_chars) {
        if (unk >= 0) out.push_back(unk);
        return;
    }
    const size_t before = out.size();
    size_t start = 0;
    std::string sub;
    while (start < word.size()) {
        size_t end = word.size();
        int32_t id = -1;
        while (start < end) {
            sub.clear();
            if (start > 0) sub += prefix;
            sub.append(word.substr(start, end - start));
            id = vocab_id(sub);
            if (id >= 0) break;
            --end;
            while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80) --end;
        }
        if (id < 0) {
            out.resize(before);
            if (unk >= 0) out.push_back(unk);
            return;
        }
        out.push_back(id);
        start = end;
    }
}

void HfPipeline::Impl::unigram(std::string_view word, std::vector<int32_t>& out) const {
    constexpr double kUnkPenalty = 10.0;
    const double unk_score = min_score - kUnkPenalty;
    const size_t len = word.size();
    // best[e]: best score of a segmentation of word[0, e); from[e]: (start, id) of its last
    // piece, id -1 for an unknown character.
    std::vector<double> best(len + 1, 0.0);
    std::vector<uint8_t> reached(len + 1, 0);
    std::vector<std::pair<size_t, int32_t>> from(len + 1, {0, -1});
    reached[0] = 1;
    for (size_t b = 0; b < len;) {
        const size_t n1 = std::min(utf8_seq_len(static_cast<uint8_t>(word[b])), len - b);
        if (reached[b]) {
            bool single = false;
            size_t e = b;
            while (e < len && e - b < max_piece_bytes) {
                e += std::min(utf8_seq_len(static_cast<uint8_t>(word[e])), len - e);
                if (e - b > max_piece_bytes) break;
                const int32_t id = vocab_id(word.substr(b, e - b));
                if (id < 0 || types[id] == TokenType::kUndefined) continue;
                if (e == b + n1) single = true;
                const double sc = best[b] + scores[id];
                if (!reached[e] || sc > best[e]) {
                    reached[e] = 1;
                    best[e] = sc;
                    from[e] = {b, id};
                }
            }
            if (!single) {
                const size_t e1 = b + n1;
                const double sc = best[b] + unk_score;
                if (!reached[e1] || sc > best[e1]) {
                    reached[e1] = 1;
                    best[e1] = sc;
                    from[e1] = {b, -1};
                }
            }
        }
        b += n1;
    }
    std::vector<std::pair<size_t, int32_t>> path;  // (start, id), reversed
    for (size_t e = len; e > 0;) {
        path.push_back(from[e]);
        e = from[e].first;
    }
    std::reverse(path.begin(), path.end());
    // Fuse runs of unknown characters, then byte fallback or unk.
    for (size_t k = 0; k < path.size();) {
        if (path[k].second >= 0) {
            out.push_back(path[k].second);
            ++k;
            continue;
        }
        size_t j = k;
        while (j < path.size() && path[j].second < 0) ++j;
        const size_t b = path[k].first, e = j < path.size() ? path[j].first : len;
        std::vector<int32_t> bytes;
        if (byte_fallback) {
            for (size_t q = b; q < e; ++q) {
                char buf[8];
                std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<uint8_t>(word[q]));
                const int32_t id = vocab_id(buf);
                if (id < 0) break;
                bytes.push_back(id);
            }
        }
        if (byte_fallback && bytes.size() == e - b) {
            out.insert(out.end(), bytes.begin(), bytes.end());
        } else if (unk >= 0) {
            out.push_back(unk);
        }
        k = j;
    }
}

HfPipeline::HfPipeline() : impl_(std::make_unique<Impl>()) {}
HfPipeline::~HfPipeline() = default;

Expected<std::shared_ptr<const HfPipeline>> HfPipeline::from_json(const json& tj) {
    std::shared_ptr<HfPipeline> p(new HfPipeline());
    Impl& m = *p->impl_;
    auto field = [&](const char* k) { return tj.contains(k) ? tj.at(k) : json(); };
    FERROX_RETURN_IF_ERROR(m.parse_model(tj.at("model")));
    FERROX_RETURN_IF_ERROR(parse_normalizer(field("normalizer"), m.norm));
    FERROX_RETURN_IF_ERROR(parse_pre(field("pre_tokenizer"), m.pre));
    FERROX_RETURN_IF_ERROR(parse_decoder(field("decoder"), m.dec));
    FERROX_RETURN_IF_ERROR(m.parse_post(field("post_processor")));

    size_t n = m.id_to_token.size();
    const json added = field("added_tokens");
    if (!added.is_null() && !added.is_array()) return invalid_argument("tokenizer.json: added_tokens is not an array");
    std::vector<int32_t> added_ids;
    if (!added.is_null()) {
        const int64_t limit = static_cast<int64_t>(n + added.size()) + kHfMaxIdHoles;
        for (const json& a : added) {
            FERROX_ASSIGN_OR_RETURN(const int32_t id, hf_token_id(a.at("id"), limit, "added token"));
            added_ids.push_back(id);
            n = std::max<size_t>(n, static_cast<size_t>(id) + 1);
        }
    }
    std::vector<uint8_t> present(n, 0);
    m.id_to_token.resize(n);
    for (const auto& [text, id] : m.vocab) present[id] = 1;
    m.types.assign(n, TokenType::kNormal);
    m.is_special.assign(n, 0);
    if (!added.is_null()) {
        for (size_t i = 0; i < added.size(); ++i) {
            const json& a = added[i];
            AddedToken t;
            t.id = added_ids[i];
            const std::string content = a.at("content").get<std::string>();
            t.special = jbool(a, "special", false);
            t.single_word = jbool(a, "single_word", false);
            t.lstrip = jbool(a, "lstrip", false);
            t.rstrip = jbool(a, "rstrip", false);
            t.normalized = jbool(a, "normalized", !t.special);
            t.content = t.normalized ? m.normalize(content) : content;
            m.id_to_token[t.id] = content;
            present[t.id] = 1;
            m.types[t.id] = t.special ? TokenType::kControl : TokenType::kUserDefined;
            m.is_special[t.id] = t.special;
            m.added_map.emplace(content, t.id);
            m.added.push_back(std::move(t));
        }
    }
    std::stable_sort(m.added.begin(), m.added.end(), [](const AddedToken& a, const AddedToken& b) {
        return a.content.size() > b.content.size();
    });
    for (size_t i = 0; i < n; ++i) {
        if (!present[i]) {
            m.id_to_token[i] = "<ferrox:unassigned:" + std::to_string(i) + ">";
            m.types[i] = TokenType::kUndefined;
        }
    }
    m.decode_text = m.id_to_token;
    for (const AddedToken& t : m.added) m.decode_text[t.id] = t.content;
    for (size_t i = 0, k = 0; i < n && k < 2; ++i) {
        const std::string& t = m.id_to_token[i];
        if (m.types[i] != TokenType::kNormal || t.empty()) continue;
        if (std::all_of(t.begin(), t.end(),
                        [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); })) {
            m.piece_ctx[k++] = static_cast<int32_t>(i);
        }
    }
    if (m.unk >= static_cast<int32_t>(n)) return invalid_argument("tokenizer.json: unk_id range");
    if (m.unk >= 0 && m.types[m.unk] == TokenType::kNormal) m.types[m.unk] = TokenType::kUnknown;
    if (m.model == Impl::Model::kUnigram) m.scores.resize(n, 0.0f);
    for (int32_t id : m.post_before) {
        if (id < 0 || static_cast<size_t>(id) >= n) return invalid_argument("post_processor id");
    }
    for (int32_t id : m.post_after) {
        if (id < 0 || static_cast<size_t>(id) >= n) return invalid_argument("post_processor id");
    }
    return std::shared_ptr<const HfPipeline>(std::move(p));
}

void HfPipeline::encode(std::string_view text, bool add_special, bool parse_special,
                        std::vector<int32_t>& out) const {
    const Impl& m = *impl_;
    if (add_special) out.insert(out.end(), m.post_before.begin(), m.post_before.end());
    std::vector<std::pair<int32_t, std::string>> parts;
    m.split_added(text, false, parse_special, parts);
    for (size_t k = 0; k < parts.size(); ++k) {
        if (parts[k].first >= 0) {
            out.push_back(parts[k].first);
        } else {
            m.encode_text(parts[k].second, k == 0, parse_special, out);
        }
    }
    if (add_special) out.insert(out.end(), m.post_after.begin(), m.post_after.end());
}

std::string HfPipeline::decode(std::span<const int32_t> ids, bool skip_special) const {
    const Impl& m = *impl_;
    std::vector<std::string> toks;
    for (int32_t id : ids) {
        if (id < 0 || static_cast<size_t>(id) >= m.id_to_token.size()) continue;
        if (m.types[id] == TokenType::kUndefined) continue;
        if (skip_special && m.is_special[id]) continue;
        toks.push_back(m.decode_text[id]);
    }
    if (m.dec.empty()) {
        std::string out;
        for (size_t i = 0; i < toks.size(); ++i) {
            if (i) out += ' ';
            out += toks[i];
        }
        return out;
    }
    for (const DecStep& d : m.dec) apply_decoder(d, toks, false);
    std::string out;
    for (const std::string& t : toks) out += t;
    return out;
}

std::string HfPipeline::Impl::decode_raw(std::initializer_list<int32_t> ids) const {
    std::vector<std::string> toks;
    for (int32_t id : ids) toks.push_back(decode_text[id]);
    for (const DecStep& d : dec) apply_decoder(d, toks, true);
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) {
        if (i && dec.empty()) out += ' ';
        out += toks[i];
    }
    return out;
}

std::string HfPipeline::piece(int32_t id) const {
    const Impl& m = *impl_;
    if (id < 0 || static_cast<size_t>(id) >= m.id_to_token.size()) return {};
    if (m.types[id] == TokenType::kUndefined) return {};
    // What the token adds after an ordinary token: decoders that treat the first token
    // specially (Metaspace, WordPiece, Strip) then give the mid-stream text, so a stream's
    // pieces concatenate to its decode (up to that first-token treatment).
    const int32_t ctx = m.piece_ctx[0] == id ? m.piece_ctx[1] : m.piece_ctx[0];
    if (ctx >= 0) {
        const std::string base = m.decode_raw({ctx});
        const std::string with = m.decode_raw({ctx, id});
        if (with.compare(0, base.size(), base) == 0) return with.substr(base.size());
    }
    return m.decode_raw({id});
}

std::optional<std::string> HfPipeline::stream_piece(int32_t prev, int32_t id, bool skip_special) const {
    const Impl& m = *impl_;
    if (id < 0 || static_cast<size_t>(id) >= m.id_to_token.size()) return std::nullopt;
    if (m.types[id] == TokenType::kUndefined) return std::nullopt;
    if (skip_special && m.is_special[id]) return std::nullopt;
    if (prev == -2) return piece(id);
    if (prev < 0 || static_cast<size_t>(prev) >= m.id_to_token.size()) return m.decode_raw({id});
    const std::string base = m.decode_raw({prev});
    std::string with = m.decode_raw({prev, id});
    if (with.compare(0, base.size(), base) == 0) return with.substr(base.size());
    return piece(id);  // the pair rewrites the previous token's text: its usual piece
}

const std::vector<std::string>& HfPipeline::tokens() const { return impl_->id_to_token; }
const std::vector<TokenType>& HfPipeline::token_types() const { return impl_->types; }
const std::vector<float>& HfPipeline::scores() const { return impl_->scores; }
int32_t HfPipeline::unk_id() const { return impl_->unk; }
bool HfPipeline::byte_level() const {
    return std::any_of(impl_->dec.begin(), impl_->dec.end(),
                       [](const DecStep& d) { return d.kind == DecStep::Kind::kByteLevel; });
}
VocabKind HfPipeline::kind() const {
    switch (impl_->model) {
        case Impl::Model::kBpe:
            return VocabKind::kBpe;
        case Impl::Model::kWordPiece:
            return VocabKind::kWpm;
        case Impl::Model::kWordLevel:
            return VocabKind::kBpe;
        case Impl::Model::kUnigram:
            return VocabKind::kSpm;
    }
    return VocabKind::kBpe;
}

}  // namespace ferrox
