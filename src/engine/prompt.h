#pragma once
// The prompt step, one function for every caller (the server's routes and `ferrox run
// --chat`): a conversation goes through the model's chat template and the tokenizer under one
// BOS rule, and comes back with the format its answer must be parsed with (tool-call family,
// reasoning markers, whether the prompt opened a think block).
//
// Templates that ignore `tools` (SmolLM2's, for one) still get tools: the builder describes
// them in a system message and asks for <tool_call>{json}</tool_call>, parsed by the generic
// format.
//
// Threading: immutable after create(); any thread may build prompts at once. The tokenizer
// must outlive the builder.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/messages.h"
#include "chat/output_parser.h"
#include "core/status.h"

namespace ferrox {

class Tokenizer;
class JinjaTemplate;

struct PromptOptions {
    bool split_reasoning = true;  // false (--reasoning-format none): thinking stays in the text
    // A JSON object of template variables every conversation gets unless its own template_kwargs
    // set them (llama-server's --reasoning on|off: {"enable_thinking": true|false}); "" for none.
    std::string default_template_kwargs;
};

struct ChatPrompt {
    std::string text;
    std::vector<int32_t> tokens;
    OutputFormat output;     // how the answer is parsed
    bool special_markup = false;  // the format's markers are control tokens: render them
};

class PromptBuilder {
  public:
    // `template_source` empty: ChatML. Fails on a template that does not parse.
    static Expected<std::unique_ptr<PromptBuilder>> create(const Tokenizer& tok,
                                                           std::string template_source,
                                                           PromptOptions options = {});
    ~PromptBuilder();

    // The conversation through the template (tools dropped when tool_choice is none).
    // kInvalidArgument: the template raised, or call arguments / tool parameters are not JSON.
    Expected<std::string> render(const Conversation& conv, bool add_generation_prompt = true) const;
    // The BOS rule: BOS when the vocabulary adds one, unless the text already starts with it
    // (templates that write it themselves); special tokens written in the text are parsed.
    std::vector<int32_t> tokenize(std::string_view text) const;
    // render + tokenize + the output format.
    Expected<ChatPrompt> build(const Conversation& conv) const;

    const std::string& template_source() const { return source_; }
    ToolCallFormat tool_format() const { return format_.tools; }
    bool template_renders_tools() const { return renders_tools_; }

  private:
    PromptBuilder() = default;
    Expected<std::string> render_json(const Conversation& conv, bool add_generation_prompt,
                                      bool describe_tools) const;

    const Tokenizer* tok_ = nullptr;
    std::string source_;
    std::unique_ptr<JinjaTemplate> tmpl_;
    OutputFormat format_;       // detected from the template
    bool renders_tools_ = true; // the template shows `tools` to the model itself
    PromptOptions options_;
};

}  // namespace ferrox
