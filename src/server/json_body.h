#pragma once
// Client JSON, bounded: request bodies are parsed only after a scan that enforces a nesting
// depth limit without recursion, so no client-controlled depth ever reaches a recursive
// function (nlohmann copies, dumps and compares nested values recursively; a body of 80,000
// '[' overflowed the stack). Parsing itself never throws: failures are values.
//
// Threading: pure functions.

#include <string_view>

#include "core/json_depth.h"

namespace ferrox {

// Deeper JSON is refused. Tool schemas nest a few levels per property; 64 leaves room for any
// real one while keeping every recursive walk over a parsed value a few KB of stack.
constexpr int kMaxJsonDepth = 64;

// The nesting depth of a client's JSON text, up to the request limit (core/json_depth.h).
inline int json_nesting_depth(std::string_view text) { return json_nesting_depth(text, kMaxJsonDepth); }

}  // namespace ferrox
