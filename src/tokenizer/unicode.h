#pragma once
// Unicode helpers for the tokenizers: UTF-8 coding, general categories, lowercasing,
// NFD/NFC, and the GPT-2 byte <-> unicode mapping used by byte-level BPE.
// All functions are pure and thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferrox {

enum class UnicodeCategory : uint8_t {
    kCn,
    kLu,
    kLl,
    kLt,
    kLm,
    kLo,
    kMn,
    kMc,
    kMe,
    kNd,
    kNl,
    kNo,
    kPc,
    kPd,
    kPs,
    kPe,
    kPi,
    kPf,
    kPo,
    kSm,
    kSc,
    kSk,
    kSo,
    kZs,
    kZl,
    kZp,
    kCc,
    kCf,
    kCs,
    kCo,
};

UnicodeCategory unicode_category(uint32_t cp);
bool unicode_is_letter(uint32_t cp);       // L*
bool unicode_is_mark(uint32_t cp);         // M*
bool unicode_is_number(uint32_t cp);       // N*
bool unicode_is_punctuation(uint32_t cp);  // P*
bool unicode_is_symbol(uint32_t cp);       // S*
bool unicode_is_other(uint32_t cp);        // C* (Cc, Cf, Cs, Co, Cn)
// The White_Space property (what Rust's char::is_whitespace tests).
bool unicode_is_whitespace(uint32_t cp);
uint8_t unicode_ccc(uint32_t cp);  // canonical combining class

// Full lowercase mapping (one or two code points), appended to `out`.
void unicode_append_lower(uint32_t cp, std::u32string& out);

// Decodes one code point at s[*pos] and advances *pos. Invalid or truncated sequences yield
// 0xFFFD and advance by one byte.
uint32_t utf8_decode(std::string_view s, size_t* pos);
void utf8_append(uint32_t cp, std::string& out);
// Length of the sequence that starts with lead byte `c` (1 for invalid lead bytes).
inline size_t utf8_seq_len(uint8_t c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}
bool utf8_is_valid(std::string_view s);
std::u32string utf8_to_u32(std::string_view s);
std::string u32_to_utf8(std::u32string_view s);

// Canonical decomposition / composition of a whole string.
std::u32string unicode_nfd(std::u32string_view s);
std::u32string unicode_nfc(std::u32string_view s);
// Compatibility decomposition / composition (NFKD, NFKC).
std::u32string unicode_nfkd(std::u32string_view s);
std::u32string unicode_nfkc(std::u32string_view s);
// The Unicode Script property as an opaque id (-1: Unknown), and the ids of Han, Hiragana
// and Katakana (HF's UnicodeScripts pre-tokenizer treats the three alike).
int32_t unicode_script(uint32_t cp);
int32_t unicode_script_han();
int32_t unicode_script_hiragana();
int32_t unicode_script_katakana();
// NFC of UTF-8 text; returns the input unchanged (no table work) when it is all ASCII.
std::string utf8_nfc(std::string_view s);

// GPT-2's byte-level alphabet: every byte maps to one printable code point.
uint32_t byte_to_unicode(uint8_t b);
// The UTF-8 text of byte_to_unicode(b).
const std::string& byte_to_unicode_utf8(uint8_t b);
// Inverse mapping; -1 when `cp` is not in the alphabet.
int unicode_to_byte(uint32_t cp);

}  // namespace ferrox
