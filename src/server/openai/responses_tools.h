#pragma once
// The Responses API's tool types, as the Codex CLI sends them, mapped onto what a local model
// can call:
//   - `function`: offered as it is;
//   - `namespace` {name, tools: [function...]} (MCP servers, dynamic tools): each function
//     offered as "<namespace>__<name>"; its calls come back as function_call items with
//     `namespace` and the plain `name`;
//   - `custom` (freeform, e.g. apply_patch) {name, description, format: {type: "text"} |
//     {type: "grammar", syntax: "lark" | "regex", definition}}: offered as a function of one
//     string parameter `input` (the grammar is added to its description); its calls come back
//     as custom_tool_call items with `input`. Where the grammar compiles (grammar/lark.h,
//     grammar/regex.h) and the model's tool-call format is JSON, the call's input is
//     constrained by it (custom_tools_constraint);
//   - `local_shell`: offered as a function "local_shell" {command: [string], working_directory,
//     timeout_ms}; its calls come back as local_shell_call items with an exec action;
//   - hosted tools (web_search, web_search_preview, file_search, image_generation,
//     code_interpreter, computer_use_preview, mcp, tool_search, ...): accepted and not offered
//     (ferrox cannot run them), each listed in the response's `ferrox.skipped_tools`.
//
// Threading: pure functions of their arguments; any thread.

#include <memory>
#include <string>
#include <vector>

#include "chat/messages.h"
#include "chat/output_parser.h"
#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/json_util.h"

namespace ferrox {

struct ResponsesTool {
    enum class Kind { kFunction, kCustom, kLocalShell };
    Kind kind = Kind::kFunction;
    std::string model_name;  // as the prompt offers it and the model calls it
    std::string name;        // on the wire (the function's own name inside a namespace)
    std::string ns;          // the namespace, or empty
    std::string syntax;      // kCustom: "lark", "regex", or empty (free text)
    std::string definition;  // kCustom: the grammar's source
};

struct ResponsesTools {
    std::vector<ResponsesTool> offered;
    json skipped = json::array();  // {index, type, name?, reason} per tool not offered
    const ResponsesTool* find(const std::string& model_name) const;
};

// Reads the request's `tools` (null: none) into conv->tools and *out. A 400 only for a tool
// that is not an object or lacks its type, or a function or custom tool without a name.
bool read_responses_tools(const json* tools, Conversation* conv, ResponsesTools* out, ApiError* err);

// "<ns>__<name>" (Codex's own encoding when it speaks Chat Completions), or name.
std::string namespaced_tool_name(const std::string& ns, const std::string& name);

// The grammar that constrains custom tools' inputs where one has a grammar: every call the
// model makes is one of the offered tools in its format, a custom tool's input under its
// grammar, a function's arguments under its schema. With tool_choice auto, text may come
// before, between and after calls (hermes and generic formats: everything but "<tool_call>");
// with required or a named tool, the output is exactly one call. Leaves *out null when no
// custom tool has a grammar that compiles, or the format or another constraint rules it out;
// `notes` gets one entry per custom tool with a grammar: {name, syntax, constrained, reason?}.
bool custom_tools_constraint(const Conversation& conv, const ResponsesTools& tools, ToolCallFormat format,
                             bool other_constraint, std::shared_ptr<const grammar::Grammar>* out, json* notes,
                             ApiError* err);

// A custom tool call's input from the model's arguments ({"input": "..."}; any other object
// is passed on as its JSON text), and back (the history's arguments for a replayed call).
std::string custom_tool_input(const std::string& arguments);
std::string custom_tool_arguments(const std::string& input);

// A local_shell call's action ({type: "exec", command: [...], working_directory?,
// timeout_ms?, env, user}) from the model's arguments, and the history's arguments for an
// action (the action without its type), the same text whichever way the call arrived.
json local_shell_action(const std::string& arguments);
std::string local_shell_arguments(const json& action);

}  // namespace ferrox
