#pragma once
// Lexer and parser for the Jinja dialect HF chat templates use, configured as transformers
// configures jinja2: trim_blocks, lstrip_blocks, loop controls, keep_trailing_newline off,
// plus transformers' {% generation %} tag. Internal to src/chat.

#include <string_view>

#include "chat/jinja_ast.h"
#include "core/status.h"

namespace ferrox::jinja {

// Parses `source` into `out`. Errors (syntax, unknown filter or test, nesting deeper than
// max_nesting) come back as kInvalidArgument with a one-line message naming the line.
Status parse_template(std::string_view source, int max_nesting, StmtList* out);

}  // namespace ferrox::jinja
