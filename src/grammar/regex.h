#pragma once
// Regular expressions compiled to GBNF: `guided_regex` / `structured_outputs.regex` (the whole
// output must match) and JSON Schema `pattern` (the decoded string value must contain a match).
//
// Syntax (ECMAScript flavour, as JSON Schema specifies): literals; escapes \n \r \t \f \v \0
// \xHH \uHHHH \u{H...} and escaped punctuation; `.` (any character but \n \r U+2028 U+2029);
// classes [...] and [^...] with ranges, \d \w \s and their negations \D \W \S (also inside
// classes; where ECMAScript and Python's Unicode classes differ, their intersection: \s is
// ECMAScript's white space but U+FEFF, \D and \W match ASCII only); groups ( ), (?: ) and
// (?<name> ); alternation;
// quantifiers * + ? {m} {m,} {m,n}, lazy variants (*? ...) compiled as the greedy ones (the set
// of matched strings is the same); ^ at the start and $ at the end of a top-level alternative.
// Refused with an error naming the feature: backreferences (\1, \k<name>), lookahead and
// lookbehind, word boundaries \b \B, Unicode property escapes \p{...}, inline flags (?i), and
// anchors anywhere else.
//
// Pure functions of their arguments; callable from any thread.

#include <string>
#include <string_view>

#include "core/status.h"

namespace ferrox::grammar {

struct RegexOptions {
    // The rule the pattern compiles to; helper rules are named `<rule>-...`. Must be a valid GBNF
    // rule name (letters, digits, '-').
    std::string rule = "root";
    // false: the text must match as a whole (^ and $ change nothing).
    // true: search semantics, as JSON Schema `pattern` means it: a top-level alternative without
    // ^ may be preceded by any text, one without $ may be followed by any text.
    bool search = false;
    // true: the text is the inside of a JSON string literal (without the quotes). The pattern
    // matches the decoded value: a character JSON must escape (", \, U+0000..U+001F) is matched
    // as its escape (\" \\ \b \f \n \r \t, else \u00XX in lower case); every other character
    // is matched unescaped. Text added by `search` may use any JSON escape.
    bool json_string = false;
    // {m,n} bounds above this are an error (the grammar engine's repetition limit).
    int max_repeat = 10000;
};

// GBNF rules (one per line, `<rule> ::= ...` first) that accept exactly the texts described
// above. Errors are kInvalidArgument and name the offending feature and its offset.
Expected<std::string> regex_to_gbnf(std::string_view pattern, const RegexOptions& opts = {});

// A GBNF string literal for `bytes` ("..." with escapes), for the other front ends.
std::string gbnf_literal(std::string_view bytes);

}  // namespace ferrox::grammar
