#pragma once
// Lark grammars compiled to GBNF: the format of freeform ("custom") tools in OpenAI's Responses
// API (`format: {type: "grammar", syntax: "lark", definition}`; Codex's apply_patch ships one).
//
// Accepted (Lark's EBNF as such tools write it):
//   name: expansion | expansion ...    rules (lower case) and terminals (UPPER case) alike; a
//                                      leading `?` or `!` and a priority `.N` are read and ignored
//   items: "literal" (escapes \n \r \t \\ \" \' \xHH \uHHHH), "a".."z" (a character range),
//          /regex/ (the regex front end's ECMAScript subset of Python's `re`), rule and terminal
//          references, ( grouping ), [ optional ], each optionally followed by ? * + or ~ n / ~ n..m
//   `-> alias` after an alternative (ignored); alternatives may continue on the next line after
//   a leading `|`, or inside brackets; comments run from `//` or `#` to the end of the line;
//   `%import common.NAME` and `%import common (A, B)` for LF CR CRLF NEWLINE WS WS_INLINE DIGIT
//   HEXDIGIT INT SIGNED_INT DECIMAL NUMBER SIGNED_NUMBER LETTER UCASE_LETTER LCASE_LETTER WORD
//   CNAME ESCAPED_STRING.
// Refused with an error naming the feature: `%ignore` (it lets ignored text in between any two
// terminals, which the grammar here cannot say), `%declare`, `%override`, `%extend`, other
// imports, case-insensitive literals ("..."i), regex flags, rule templates. The start rule is
// `start`.
// Semantics: the language of the grammar read as a context-free grammar over characters. Lark's
// lexer (longest match, terminal priorities) can only narrow it; a grammar that only parses
// because of those rules is refused by nothing here, but by nothing in practice either.
//
// Pure functions; callable from any thread.

#include <string>
#include <string_view>

#include "core/status.h"

namespace ferrox::grammar {

struct LarkOptions {
    // The rule the start rule compiles to; helper rules are named `<rule>-...`.
    std::string rule = "root";
    // true: the text is the inside of a JSON string literal (RegexOptions::json_string): a
    // character JSON must escape is matched as its escape, every other one unescaped.
    bool json_string = false;
};

// GBNF rules (`<rule> ::= ...` first) for the grammar's language. Errors are kInvalidArgument
// and name the line.
Expected<std::string> lark_to_gbnf(std::string_view lark, const LarkOptions& opts = {});

}  // namespace ferrox::grammar
