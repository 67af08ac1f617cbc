#pragma once
// Stream parsers that split a model's generated text into plain text, reasoning and tool
// calls, for every tool-call format ferrox knows. All protocol adapters share them: the
// server feeds each choice's detokenized, stop-string-checked text through one OutputParser
// and turns the deltas into its own wire events.
//
// Contracts every format keeps:
// - Nothing leaks: a suffix that could still begin a marker is held back until resolved.
// - A tool call is emitted as one kToolCall delta once complete (closing marker seen, or at
//   finish() when its content parses completely), never in pieces.
// - Malformed markup is returned as kText verbatim (markup included); nothing throws.
// - The result does not depend on chunking: merging adjacent text deltas and adjacent
//   reasoning deltas gives the same list for any split of the same text.
//
// Threading: one OutputParser per stream (per choice); it is not thread-safe. The free
// functions are pure and may be called from any thread.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferrox {

// One piece of a model's answer, for every protocol.
struct ChatDelta {
    enum class Kind { kText, kReasoning, kToolCall };
    Kind kind = Kind::kText;
    std::string text;       // kText, kReasoning: the new text
    std::string name;       // kToolCall: the function name
    std::string arguments;  // kToolCall: compact JSON object text, key order kept ("{}" if none)
};

enum class ToolCallFormat {
    kNone,
    kHermes,
    kQwen3Coder,
    kLlama3,
    kMistral,
    kDeepSeekV3,
    kDeepSeekV31,
    kHarmony,
    kFunctionaryV32,
    kCommandR7B,
    kGeneric
};

// "none", "hermes", "qwen3_coder", "llama3", "mistral", "deepseek_v3", "deepseek_v3_1",
// "harmony", "functionary_v3_2", "command_r7b", "generic".
const char* tool_call_format_name(ToolCallFormat f);
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);

// Chosen from the chat template source by the markers each family's template writes
// ("<|channel|>", "<|START_ACTION|>", "<｜tool▁calls▁begin｜>", "<function=", "[TOOL_CALLS]",
// ">>>all", "<tool_call>", "<|python_tag|>"/"ipython"). kGeneric when none is there: the
// server then describes the tools itself and asks for the generic JSON shape.
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

struct OutputFormat {
    ToolCallFormat tools = ToolCallFormat::kNone;  // kNone: tool calls are not parsed (request
                                                   // without tools, or tool_choice none)
    bool split_reasoning = true;                   // false: reasoning markers stay in the text
    std::string think_start = "<think>", think_end = "</think>";
    bool starts_in_reasoning = false;  // the prompt itself opened the think block
    // The model family's output syntax where it carries more than tool calls, so that it is
    // parsed even when `tools` is kNone: harmony channels (gpt-oss), Command R7B's response
    // markers, functionary's ">>>all" recipient. detect_output_format sets it to the detected
    // format; `tools`, when not kNone, takes precedence.
    ToolCallFormat family = ToolCallFormat::kNone;
};

// Fills tools and family (via detect_tool_call_format) and the think markers the template
// uses: <think>/</think> by default, Command R7B's <|START_THINKING|>/<|END_THINKING|>,
// Magistral's [THINK]/[/THINK]. starts_in_reasoning stays false: see prompt_opens_reasoning.
OutputFormat detect_output_format(std::string_view chat_template);

// True when the rendered prompt ends (ignoring trailing whitespace) with f.think_start, i.e.
// the generation prompt opened the think block (DeepSeek-R1, QwQ: "...<think>\n"). Always
// false when f does not split reasoning or is harmony (whose channels say it themselves).
bool prompt_opens_reasoning(std::string_view prompt, const OutputFormat& f);

class OutputParser {
  public:
    explicit OutputParser(OutputFormat format);
    ~OutputParser();
    OutputParser(OutputParser&&) noexcept;
    OutputParser& operator=(OutputParser&&) noexcept;

    // Feeds newly generated text, in any chunking (a marker may be split across pushes).
    // Appends what is now certain to *out; earlier entries of *out are never modified.
    void push(std::string_view text, std::vector<ChatDelta>* out);
    // End of generation: resolves and appends everything held back. The parser then starts
    // over as for a new answer.
    void finish(std::vector<ChatDelta>* out);
    // Tool calls emitted so far.
    int n_tool_calls() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ferrox
