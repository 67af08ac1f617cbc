#pragma once
// The one conversation type every protocol parses into (OpenAI chat and Responses, Anthropic
// Messages): what a chat template needs, nothing of any wire format. JSON payloads that a
// template reads as objects (tool parameters, call arguments) are kept as JSON text in the
// client's key order; the prompt builder parses them.

#include <string>
#include <vector>

namespace ferrox {

struct ToolCall {
    std::string id;         // the protocol's call id (call_..., toolu_...), echoed in results
    std::string name;
    std::string arguments;  // a JSON object, as text
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant" or "tool"
    std::string content;
    std::string reasoning;              // assistant: its earlier thinking (templates may show it)
    std::vector<ToolCall> tool_calls;   // assistant
    std::string tool_call_id;           // tool: the call this result answers
    std::string name;                   // tool: the function's name, when known
};

struct ToolSpec {
    std::string name;
    std::string description;
    std::string parameters;  // JSON Schema object, as text ("{}" when none)
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct Conversation {
    std::vector<ChatMessage> messages;
    std::vector<ToolSpec> tools;  // function tools only; other kinds never reach the prompt
    ToolChoice tool_choice = ToolChoice::kAuto;
    std::string tool_choice_name;  // kNamed
    bool parallel_tool_calls = true;
    // Extra template variables as a JSON object text (enable_thinking, reasoning_effort, ...).
    std::string template_kwargs;
    // The prompt ends with the template's generation prompt (false: right after the last
    // message, OpenAI-compatible servers' add_generation_prompt).
    bool add_generation_prompt = true;
    // A trailing assistant message with text (and no tool calls) is continued, not closed: the
    // answer goes on from its last character (Anthropic's prefill, llama-server's default,
    // vLLM's continue_final_message).
    bool continue_final = true;
};

}  // namespace ferrox
