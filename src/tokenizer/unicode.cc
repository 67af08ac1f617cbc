#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "tokenizer/unicode_data.h"
#include "tokenizer/unicode_extra_data.h"

namespace ferrox {

namespace ud = unicode_data;
namespace uxd = unicode_extra_data;

UnicodeCategory unicode_category(uint32_t cp) {
    // Binary search over sorted, disjoint ranges.
    const ud::CategoryRange* begin = ud::kCategoryRanges;
    const ud::CategoryRange* end = begin + ud::kNumCategoryRanges;
    const ud::CategoryRange* it = std::upper_bound(
        begin, end, cp, [](uint32_t v, const ud::CategoryRange& r) { return v < r.first; });
    if (it == begin) return UnicodeCategory::kCn;
    --it;
    return cp <= it->last ? static_cast<UnicodeCategory>(it->cat) : UnicodeCategory::kCn;
}

bool unicode_is_letter(uint32_t cp) {
    auto c = unicode_category(cp);
    return c >= UnicodeCategory::kLu && c <= UnicodeCategory::kLo;
}
bool unicode_is_mark(uint32_t cp) {
    auto c = unicode_category(cp);
    return c >= UnicodeCategory::kMn && c <= UnicodeCategory::kMe;
}
bool unicode_is_number(uint32_t cp) {
    auto c = unicode_category(cp);
    return c >= UnicodeCategory::kNd && c <= UnicodeCategory::kNo;
}
bool unicode_is_punctuation(uint32_t cp) {
    auto c = unicode_category(cp);
    return c >= UnicodeCategory::kPc && c <= UnicodeCategory::kPo;
}
bool unicode_is_symbol(uint32_t cp) {
    auto c = unicode_category(cp);
    return c >= UnicodeCategory::kSm && c <= UnicodeCategory::kSo;
}
bool unicode_is_other(uint32_t cp) {
    auto c = unicode_category(cp);
    return c == UnicodeCategory::kCn || c >= UnicodeCategory::kCc;
}

bool unicode_is_whitespace(uint32_t cp) {
    switch (cp) {
        case 0x09:
        case 0x0A:
        case 0x0B:
        case 0x0C:
        case 0x0D:
        case 0x20:
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200A;
    }
}

uint8_t unicode_ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    const ud::CccRange* begin = ud::kCccRanges;
    const ud::CccRange* end = begin + ud::kNumCccRanges;
    const ud::CccRange* it = std::upper_bound(
        begin, end, cp, [](uint32_t v, const ud::CccRange& r) { return v < r.first; });
    if (it == begin) return 0;
    --it;
    return cp <= it->last ? it->ccc : 0;
}

void unicode_append_lower(uint32_t cp, std::u32string& out) {
    if (cp < 0x80) {
        out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
        return;
    }
    const ud::LowerEntry* begin = ud::kLowerMap;
    const ud::LowerEntry* end = begin + ud::kNumLowerMap;
    const ud::LowerEntry* it = std::lower_bound(
        begin, end, cp, [](const ud::LowerEntry& e, uint32_t v) { return e.cp < v; });
    if (it == end || it->cp != cp) {
        out.push_back(cp);
        return;
    }
    out.push_back(it->lower0);
    if (it->lower1) out.push_back(it->lower1);
}

uint32_t utf8_decode(std::string_view s, size_t* pos) {
    const size_t i = *pos;
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
        *pos = i + 1;
        return c;
    }
    size_t n = utf8_seq_len(c);
    if (n == 1 || i + n > s.size()) {
        *pos = i + 1;
        return 0xFFFD;
    }
    uint32_t cp = c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
        const uint8_t cc = static_cast<uint8_t>(s[i + k]);
        if ((cc & 0xC0) != 0x80) {
            *pos = i + 1;
            return 0xFFFD;
        }
        cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        *pos = i + 1;
        return 0xFFFD;
    }
    *pos = i + n;
    return cp;
}

void utf8_append(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool utf8_is_valid(std::string_view s) {
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t start = pos;
        if (utf8_decode(s, &pos) == 0xFFFD) {
            // A literal U+FFFD is valid (3 bytes); a replacement from an error advances by 1.
            if (pos - start != 3) return false;
        }
    }
    return true;
}

std::u32string utf8_to_u32(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) out.push_back(utf8_decode(s, &pos));
    return out;
}

std::string u32_to_utf8(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) utf8_append(c, out);
    return out;
}

namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const ud::DecompEntry* find_decomp(uint32_t cp) {
    const ud::DecompEntry* begin = ud::kDecomp;
    const ud::DecompEntry* end = begin + ud::kNumDecomp;
    const ud::DecompEntry* it = std::lower_bound(
        begin, end, cp, [](const ud::DecompEntry& e, uint32_t v) { return e.cp < v; });
    return (it != end && it->cp == cp) ? it : nullptr;
}

void decompose(uint32_t cp, std::u32string& out) {
    if (cp >= kSBase && cp < kSBase + kSCount) {
        const uint32_t s = cp - kSBase;
        out.push_back(kLBase + s / kNCount);
        out.push_back(kVBase + (s % kNCount) / kTCount);
        if (s % kTCount) out.push_back(kTBase + s % kTCount);
        return;
    }
    const ud::DecompEntry* d = cp < 0xC0 ? nullptr : find_decomp(cp);
    if (!d) {
        out.push_back(cp);
        return;
    }
    decompose(d->d0, out);
    if (d->d1) decompose(d->d1, out);
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
        return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    }
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
        b < kTBase + kTCount) {
        return a + (b - kTBase);
    }
    const ud::ComposeEntry* begin = ud::kCompose;
    const ud::ComposeEntry* end = begin + ud::kNumCompose;
    const ud::ComposeEntry* it =
        std::lower_bound(begin, end, std::make_pair(a, b),
                         [](const ud::ComposeEntry& e, const std::pair<uint32_t, uint32_t>& v) {
                             return e.first != v.first ? e.first < v.first : e.second < v.second;
                         });
    return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

namespace {

// Canonical ordering: stable sort of each run of non-starters by combining class.
void canonical_order(std::u32string& out) {
    size_t i = 0;
    while (i < out.size()) {
        if (unicode_ccc(out[i]) == 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < out.size() && unicode_ccc(out[j]) != 0) ++j;
        std::stable_sort(out.begin() + i, out.begin() + j,
                         [](char32_t x, char32_t y) { return unicode_ccc(x) < unicode_ccc(y); });
        i = j;
    }
}

const uxd::CompatEntry* find_compat(uint32_t cp) {
    const uxd::CompatEntry* begin = uxd::kCompat;
    const uxd::CompatEntry* end = begin + uxd::kNumCompat;
    const uxd::CompatEntry* it = std::lower_bound(
        begin, end, cp, [](const uxd::CompatEntry& e, uint32_t v) { return e.cp < v; });
    return (it != end && it->cp == cp) ? it : nullptr;
}

// Canonical composition of a decomposed, canonically ordered string.
std::u32string compose(const std::u32string& d) {
    if (d.empty()) return d;
    std::u32string out;
    out.reserve(d.size());
    size_t starter = std::u32string::npos;  // index in `out` of the last starter
    int last_ccc = -1;
    for (char32_t c : d) {
        const int ccc = unicode_ccc(c);
        if (starter != std::u32string::npos) {
            // Blocked if a character between has ccc 0 or ccc >= this one's.
            const bool blocked = (last_ccc != -1) && (last_ccc == 0 || last_ccc >= ccc);
            if (!blocked) {
                const uint32_t comp = compose_pair(out[starter], c);
                if (comp) {
                    out[starter] = comp;
                    continue;
                }
            }
        }
        if (ccc == 0) {
            starter = out.size();
            last_ccc = -1;
        } else {
            last_ccc = ccc;
        }
        out.push_back(c);
    }
    return out;
}

}  // namespace

std::u32string unicode_nfd(std::u32string_view s) {
    std::u32string out;
    out.reserve(s.size() + 8);
    for (char32_t c : s) decompose(c, out);
    canonical_order(out);
    return out;
}

std::u32string unicode_nfc(std::u32string_view s) { return compose(unicode_nfd(s)); }

std::u32string unicode_nfkd(std::u32string_view s) {
    std::u32string out;
    out.reserve(s.size() + 8);
    for (char32_t c : s) {
        const uxd::CompatEntry* e = c < 0xA0 ? nullptr : find_compat(c);
        if (e) {
            out.append(reinterpret_cast<const char32_t*>(uxd::kCompatSeq + e->offset), e->len);
        } else {
            decompose(c, out);
        }
    }
    canonical_order(out);
    return out;
}

std::u32string unicode_nfkc(std::u32string_view s) { return compose(unicode_nfkd(s)); }

int32_t unicode_script(uint32_t cp) {
    const uxd::ScriptRange* begin = uxd::kScriptRanges;
    const uxd::ScriptRange* end = begin + uxd::kNumScriptRanges;
    const uxd::ScriptRange* it = std::upper_bound(
        begin, end, cp, [](uint32_t v, const uxd::ScriptRange& r) { return v < r.first; });
    if (it == begin) return -1;
    --it;
    return cp <= it->last ? it->script : -1;
}

int32_t unicode_script_han() { return uxd::kScriptHan; }
int32_t unicode_script_hiragana() { return uxd::kScriptHiragana; }
int32_t unicode_script_katakana() { return uxd::kScriptKatakana; }

std::string utf8_nfc(std::string_view s) {
    bool ascii = true;
    for (char c : s) {
        if (static_cast<uint8_t>(c) >= 0x80) {
            ascii = false;
            break;
        }
    }
    if (ascii) return std::string(s);
    return u32_to_utf8(unicode_nfc(utf8_to_u32(s)));
}

namespace {

struct ByteTables {
    std::array<uint32_t, 256> to_cp{};
    std::array<std::string, 256> to_utf8;
    std::array<int16_t, 324> from_cp{};  // every mapped code point is below 324
    ByteTables() {
        from_cp.fill(-1);
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_cp[b] = printable ? b : 256 + n++;
        }
        for (int b = 0; b < 256; ++b) {
            utf8_append(to_cp[b], to_utf8[b]);
            from_cp[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteTables& byte_tables() {
    static const ByteTables t;
    return t;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return byte_tables().to_cp[b]; }
const std::string& byte_to_unicode_utf8(uint8_t b) { return byte_tables().to_utf8[b]; }
int unicode_to_byte(uint32_t cp) {
    return cp < byte_tables().from_cp.size() ? byte_tables().from_cp[cp] : -1;
}

}  // namespace ferrox
