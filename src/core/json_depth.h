#pragma once
// The nesting depth of JSON text, found without recursion, so that text whose depth nobody
// controls (a request body, a model's tokenizer.json or config.json) is checked before it
// reaches a recursive parser: nlohmann parses, copies, dumps and compares nested values
// recursively, and 80,000 '[' overflow the stack.
//
// Threading: pure function.

#include <string_view>

namespace ferrox {

// Model files (tokenizer.json, config.json, a safetensors header) nest a few levels; deeper
// than this is a corrupt or hostile file.
constexpr int kMaxModelJsonDepth = 128;

// The nesting depth of the JSON text (0 for a scalar), counting '[' and '{' outside strings,
// in one pass; stops counting at `limit` + 1. Malformed text gives some depth too: the parser
// rejects it afterwards.
int json_nesting_depth(std::string_view text, int limit);

}  // namespace ferrox
