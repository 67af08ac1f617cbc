#pragma once
// The chat formats ferrox knows without a template engine: enough to wrap one user turn for
// `ferrox run --chat`. The server renders the model's real Jinja template instead.

#include <optional>
#include <string>

namespace ferrox {

enum class BuiltinChatFormat { kChatML, kLlama3, kGemma, kMistral };

// Guesses the format from a model's tokenizer.chat_template text (nullopt: unknown).
std::optional<BuiltinChatFormat> detect_chat_format(const std::string& chat_template);

// A single user turn followed by the assistant prompt, e.g. for ChatML:
// "<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n".
std::string format_single_user_turn(BuiltinChatFormat format, const std::string& text);

}  // namespace ferrox
