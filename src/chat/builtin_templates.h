#pragma once
// llama.cpp's built-in chat template names (`--chat-template chatml`, `llama3`, ...), each written
// as a Jinja template that renders what llama.cpp's hand-written formatter for that name
// (llm_chat_apply_template) produces for the same messages: plain text roles and contents,
// no tools. llama-server takes these names where a model's own template is missing or wrong.
//
// Threading: immutable data; any thread.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferrox {

// The Jinja source for a built-in name, or nullopt for a name llama.cpp does not know.
std::optional<std::string_view> builtin_chat_template(std::string_view name);

// Every built-in name, in llama.cpp's order (for help and error messages).
std::vector<std::string> builtin_chat_template_names();

}  // namespace ferrox
