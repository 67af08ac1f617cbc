#pragma once
// ferrox's own Jinja engine, for Hugging Face chat templates (tokenizer.chat_template).
//
// It renders what HF transformers renders: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and the loopcontrols extension (break/continue), transformers'
// `tojson` override (json.dumps with ensure_ascii=False, optional indent/separators/sort_keys),
// `raise_exception(msg)`, `strftime_now(fmt)` and the `{% generation %}` tag. Values follow
// Python: truthiness, ==, int/float arithmetic (`//` and `%` floor), float repr, slicing with
// negative steps, str/list/dict methods, and jinja's default Undefined (prints empty, is falsy,
// but `+`, attribute access or calls on it are errors). Lists and dicts are immutable as in the
// sandbox (`.append` is an error); `namespace()` attributes are the one mutable state.
//
// Not supported (a parse error, never a wrong output): template inheritance and includes
// (extends/block/include/import), `{% for ... recursive %}`, *args/**kwargs in calls, the
// `do` and `with` tags, and a few rarely used filters (groupby, slice, striptags, wordwrap,
// xmlattr, urlencode, pprint). Case mapping (upper/lower/title/capitalize) is ASCII-only.
//
// Safety: every failure is a Status with a one-line message naming the template line:
// kInvalidArgument for syntax and template errors (including raise_exception), kResourceExhausted
// when a limit in JinjaOptions is hit. Nothing throws out of this API and no input can crash it
// or make it run unbounded: a step budget bounds time, the output, allocation and range() caps
// bound memory, and nesting/recursion caps bound the stack.
//
// Threading: a parsed JinjaTemplate is immutable; any number of threads may render it at once.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ferrox {

struct JinjaOptions {
    // Bytes of rendered text (also the cap on any one macro's or block's output).
    size_t max_output_bytes = size_t{1} << 24;
    // Evaluation steps (one per expression node or statement executed): about 20-40 M steps a
    // second on one core, so the default stops a runaway template in well under a second.
    uint64_t max_steps = 10'000'000;
    // Macro call depth (a macro calling itself) and template syntax nesting.
    int max_depth = 64;
    int max_nesting = 100;
    // Bytes of strings and list slots created during one render, cumulative: bounds memory
    // even when a template keeps every intermediate value alive.
    size_t max_alloc_bytes = size_t{1} << 28;
    // Largest range() a template may build.
    int64_t max_range_length = 1'000'000;
    // strftime_now's clock: Unix seconds shown in UTC when >= 0 (deterministic tests);
    // otherwise the local wall clock, as transformers' datetime.now().
    int64_t fixed_now_unix = -1;
};

namespace jinja {
struct Program;
class Value;
}  // namespace jinja

class JinjaTemplate {
  public:
    // Parses (and checks filter/test names of) a template. The options are kept for render.
    static Expected<JinjaTemplate> parse(std::string_view source, const JinjaOptions& options = {});

    // Renders with the variables of a JSON object (key order preserved), e.g.
    // {"messages": [...], "add_generation_prompt": true, "bos_token": "<s>"}.
    Expected<std::string> render_json(std::string_view context_json) const;
    // Renders with an already parsed context (must be an object).
    Expected<std::string> render(const jinja::Value& context) const;

    const JinjaOptions& options() const;

  private:
    explicit JinjaTemplate(std::shared_ptr<const jinja::Program> program)
        : program_(std::move(program)) {}
    std::shared_ptr<const jinja::Program> program_;
};

// The variables transformers' apply_chat_template passes to a chat template.
struct ChatTemplateInputs {
    std::string messages_json;  // JSON array of messages (OpenAI/HF shape)
    std::string tools_json;     // JSON array of tools; empty: `tools` is None, as in HF
    bool add_generation_prompt = true;
    std::string bos_token;
    std::string eos_token;
    // A JSON object of extra template variables (HF's **kwargs: enable_thinking,
    // date_string, reasoning_effort, ...); empty for none. They override the ones above.
    std::string extra_context_json;
};

// Renders a chat template as HF does: messages, tools (None when absent), documents=None,
// add_generation_prompt, bos_token, eos_token, then the extra variables.
Expected<std::string> render_chat_template(const JinjaTemplate& tmpl,
                                           const ChatTemplateInputs& inputs);

}  // namespace ferrox
