#pragma once
// Output constraints of a request, compiled to the grammar the engine decodes under:
//   - Chat Completions (and /v1/completions): `response_format` {text, json_object, json_schema},
//     vLLM's `structured_outputs` {json, regex, choice, grammar} and `guided_json`,
//     `guided_regex`, `guided_choice`, `guided_grammar`, llama-server's `grammar` / `json_schema`;
//   - Responses: `text.format` {text, json_object, json_schema};
//   - Anthropic Messages: `output_format` {json_schema};
//   - llama.cpp `/completion`: `grammar` (GBNF) and `json_schema`;
//   - `tool_choice` required / any / a named function on every chat protocol: the call is
//     generated in the model's own tool-call format, its arguments under the tool's parameters
//     schema, so the route's output parser reads it back as a tool call.
// At most one constraint per request. Compiled grammars are cached by their GBNF text, so a
// schema sent on many requests compiles once (and the engine keeps its token masks).
//
// Threading: any thread (the cache is locked).

#include <memory>
#include <string>

#include "chat/messages.h"
#include "chat/output_parser.h"
#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/json_util.h"

namespace ferrox {

// GBNF -> grammar, through the cache; a bad grammar is a 400 on `param`.
bool compile_constraint(const std::string& gbnf, const std::string& param,
                        std::shared_ptr<const grammar::Grammar>* out, ApiError* err);

// Chat Completions / legacy completions: reads every OpenAI- and vLLM-style field above (and
// llama-server's grammar / json_schema). Leaves *out null when the request has none.
bool read_openai_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err);
// Responses: text.format.
bool read_responses_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err);
// Anthropic Messages: output_format.
bool read_anthropic_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err);
// llama.cpp /completion: grammar, json_schema (and response_format, as llama-server reads it).
bool read_llamacpp_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err);

// tool_choice required / named: the grammar of exactly one call (of any tool, or the named one) in
// `format`. Leaves *out null when the choice is auto or none, or when the format has no
// grammar here (Qwen3-Coder's XML parameters, DeepSeek, harmony, functionary, Command R7B:
// their prompt still says that a call is required). `param` names the field for errors.
bool forced_tool_call_constraint(const Conversation& conv, ToolCallFormat format, const std::string& param,
                                 std::shared_ptr<const grammar::Grammar>* out, ApiError* err);

// The GBNF of a forced call (for tests and the README's examples).
Expected<std::string> tool_call_gbnf(const Conversation& conv, ToolCallFormat format);

// `gbnf` with every rule name prefixed (to combine several grammars into one).
std::string prefix_gbnf_rules(const std::string& gbnf, const std::string& prefix);

}  // namespace ferrox
