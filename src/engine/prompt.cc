#include "engine/prompt.h"

#include <nlohmann/json.hpp>

#include "chat/jinja.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kChatMlTemplate =
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// For a Gemma vocabulary without a template (llama.cpp's GGUF-my-repo files of the base models
// carry none): Gemma's turn format, a system message folded into the first user turn.
constexpr const char* kGemmaTemplate =
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first = messages[0]['content'] + '\n\n' -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}{%- set first = '' -%}{%- set rest = messages -%}{%- endif -%}"
    "{%- for message in rest -%}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else 'user' }}\n"
    "{{ (first if loop.first else '') + message['content'] | trim }}<end_of_turn>\n"
    "{% endfor -%}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{% endif -%}";

// The template a model without one gets: by its vocabulary's turn markers, else ChatML.
std::string fallback_template(const Tokenizer& tok) {
    if (tok.token_id("<start_of_turn>") >= 0 && tok.token_id("<end_of_turn>") >= 0) return kGemmaTemplate;
    return kChatMlTemplate;
}

// A tool name no real template prints unless it renders `tools`.
constexpr const char* kProbeTool = "ferrox_probe_tool_3f9c";

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Client JSON text that must be an object (call arguments, tool parameters). Depth is bounded
// by the server's body scan before any of this is parsed.
Expected<json> parse_object(const std::string& text, const std::string& what) {
    if (text.empty()) return json::object();
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(what + " is not a JSON object");
    return j;
}

// The system message that teaches a template without tool support the generic format.
std::string describe_tools(const std::vector<ToolSpec>& tools, const Conversation& conv) {
    std::string s =
        "You can call functions (tools). To call one, answer with exactly\n"
        "<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments object>}\n</tool_call>\n"
        "and nothing else; the result comes back in the next message. The functions:\n";
    for (const ToolSpec& t : tools) {
        json f = {{"name", t.name}, {"description", t.description}};
        auto p = parse_object(t.parameters, "parameters");
        f["parameters"] = p.has_value() ? *p : json::object();
        s += dump(f) + "\n";
    }
    if (conv.tool_choice == ToolChoice::kRequired) s += "You must call one of them.\n";
    if (conv.tool_choice == ToolChoice::kNamed) s += "You must call " + conv.tool_choice_name + ".\n";
    return s;
}

// Markup the vocab may hold as control tokens, which the detokenizer leaves out unless asked.
bool markup_is_control(const Tokenizer& tok, const OutputFormat& f) {
    static const char* kMarkers[] = {"<tool_call>", "[TOOL_CALLS]", "<|channel|>", "<|message|>",
                                     "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                     "<|START_ACTION|>", "<|python_tag|>", "<|START_THINKING|>",
                                     "[THINK]", "[ARGS]"};
    std::vector<std::string> markers(std::begin(kMarkers), std::end(kMarkers));
    markers.push_back(f.think_start);
    markers.push_back(f.think_end);
    for (const std::string& m : markers) {
        if (m.empty()) continue;
        const std::vector<int32_t> ids = tok.encode(m, false, true);
        if (ids.size() == 1 && !tok.is_eog(ids[0]) && tok.token_to_piece(ids[0]).empty()) return true;
    }
    return false;
}

}  // namespace

PromptBuilder::~PromptBuilder() = default;

Expected<std::unique_ptr<PromptBuilder>> PromptBuilder::create(const Tokenizer& tok,
                                                               std::string template_source,
                                                               PromptOptions options) {
    std::unique_ptr<PromptBuilder> b(new PromptBuilder());
    b->tok_ = &tok;
    b->options_ = options;
    b->source_ = template_source.empty() ? fallback_template(tok) : std::move(template_source);
    auto t = JinjaTemplate::parse(b->source_);
    if (!t.has_value()) return Status(t.status().code(), "chat template: " + t.status().message());
    b->tmpl_ = std::make_unique<JinjaTemplate>(std::move(*t));
    b->format_ = detect_output_format(b->source_);
    b->format_.split_reasoning = options.split_reasoning;
    // Does the template show the model its tools? Render a probe; a template that raises on
    // it (some insist on strict role alternation) is taken to render them.
    Conversation probe;
    probe.messages.push_back({.role = "user", .content = "hi"});
    probe.tools.push_back({.name = kProbeTool, .description = "probe", .parameters = "{}"});
    auto text = b->render_json(probe, true, /*describe_tools=*/false);
    b->renders_tools_ = !text.has_value() || text->find(kProbeTool) != std::string::npos;
    if (!b->renders_tools_) b->format_.tools = ToolCallFormat::kGeneric;
    return b;
}

Expected<std::string> PromptBuilder::render_json(const Conversation& conv, bool add_generation_prompt,
                                                 bool describe) const {
    const bool with_tools = !conv.tools.empty() && conv.tool_choice != ToolChoice::kNone;
    json messages = json::array();
    if (with_tools && describe) {
        // Into the first system message, or a new one in front.
        if (!conv.messages.empty() && conv.messages[0].role == "system") {
            messages.push_back({{"role", "system"},
                                {"content", conv.messages[0].content + "\n\n" + describe_tools(conv.tools, conv)}});
        } else {
            messages.push_back({{"role", "system"}, {"content", describe_tools(conv.tools, conv)}});
        }
    }
    for (size_t i = 0; i < conv.messages.size(); ++i) {
        const ChatMessage& m = conv.messages[i];
        if (i == 0 && with_tools && describe && m.role == "system") continue;
        const std::string where = "messages[" + std::to_string(i) + "]";
        json jm = {{"role", m.role}, {"content", m.content}};
        if (!m.reasoning.empty()) jm["reasoning_content"] = m.reasoning;
        if (!m.tool_calls.empty()) {
            json calls = json::array();
            for (size_t k = 0; k < m.tool_calls.size(); ++k) {
                const ToolCall& c = m.tool_calls[k];
                auto args = parse_object(c.arguments, where + ".tool_calls[" + std::to_string(k) + "].arguments");
                if (!args.has_value()) return args.status();
                calls.push_back({{"id", c.id}, {"type", "function"},
                                 {"function", {{"name", c.name}, {"arguments", *args}}}});
            }
            jm["tool_calls"] = calls;
        }
        if (!m.tool_call_id.empty()) jm["tool_call_id"] = m.tool_call_id;
        if (!m.name.empty()) jm["name"] = m.name;
        messages.push_back(std::move(jm));
    }
    ChatTemplateInputs in;
    in.messages_json = dump(messages);
    if (with_tools && !describe) {
        json tools = json::array();
        for (const ToolSpec& t : conv.tools) {
            auto p = parse_object(t.parameters, "tools[" + t.name + "].parameters");
            if (!p.has_value()) return p.status();
            tools.push_back({{"type", "function"},
                             {"function", {{"name", t.name}, {"description", t.description}, {"parameters", *p}}}});
        }
        in.tools_json = dump(tools);
    }
    in.add_generation_prompt = add_generation_prompt;
    if (tok_->bos() >= 0) in.bos_token = std::string(tok_->token_text(tok_->bos()));
    if (tok_->eos() >= 0) in.eos_token = std::string(tok_->token_text(tok_->eos()));
    in.extra_context_json = conv.template_kwargs;
    if (!options_.default_template_kwargs.empty()) {
        // The server's defaults under the request's own variables.
        auto defaults = parse_object(options_.default_template_kwargs, "default template variables");
        if (!defaults.has_value()) return defaults.status();
        auto own = parse_object(conv.template_kwargs, "chat_template_kwargs");
        if (!own.has_value()) return own.status();
        for (auto& [k, v] : own->items()) (*defaults)[k] = v;
        in.extra_context_json = dump(*defaults);
    }
    auto r = render_chat_template(*tmpl_, in);
    if (!r.has_value()) return Status(r.status().code(), "chat template: " + r.status().message());
    return r;
}

// A system message after the conversation's first other message, for a template that refuses
// one there (many raise "System message must be at the beginning"): its text joins the next
// user message (or, with none after it, the previous one), so the turns before it render as
// they did without it and stay a cached prefix.
static bool fold_late_system_messages(Conversation* conv) {
    std::vector<ChatMessage>& msgs = conv->messages;
    size_t first_other = 0;
    while (first_other < msgs.size() && msgs[first_other].role == "system") ++first_other;
    bool folded = false;
    for (size_t i = first_other; i < msgs.size();) {
        if (msgs[i].role != "system") {
            ++i;
            continue;
        }
        size_t j = i + 1;
        while (j < msgs.size() && msgs[j].role != "user") ++j;
        if (j < msgs.size()) {
            msgs[j].content = msgs[i].content + "\n\n" + msgs[j].content;
        } else {
            size_t k = i;
            while (k > 0 && msgs[k - 1].role != "user") --k;
            if (k == 0) {
                msgs[i].role = "user";  // no user turn at all: the closest form
                ++i;
                folded = true;
                continue;
            }
            msgs[k - 1].content += "\n\n" + msgs[i].content;
        }
        msgs.erase(msgs.begin() + static_cast<std::ptrdiff_t>(i));
        folded = true;
    }
    return folded;
}

Expected<std::string> PromptBuilder::render(const Conversation& conv, bool add_generation_prompt) const {
    auto text = render_json(conv, add_generation_prompt, /*describe_tools=*/!renders_tools_);
    if (text.has_value()) return text;
    Conversation folded = conv;
    if (!fold_late_system_messages(&folded)) return text;
    auto retry = render_json(folded, add_generation_prompt, /*describe_tools=*/!renders_tools_);
    return retry.has_value() ? retry : text;
}

std::vector<int32_t> PromptBuilder::tokenize(std::string_view text) const {
    bool add_special = true;
    if (tok_->add_bos() && tok_->bos() >= 0) {
        const std::string_view bos = tok_->token_text(tok_->bos());
        if (!bos.empty() && text.substr(0, bos.size()) == bos) add_special = false;
    }
    return tok_->encode(text, add_special, /*parse_special=*/true);
}

namespace {

// The text of a trailing assistant message to continue (prefill), or null.
const ChatMessage* prefill_of(const Conversation& conv) {
    if (!conv.continue_final || conv.messages.empty()) return nullptr;
    const ChatMessage& last = conv.messages.back();
    if (last.role != "assistant" || last.content.empty() || !last.tool_calls.empty()) return nullptr;
    return &last;
}

// Whether the answer starts inside a think block: the prompt's generation prompt opened one
// (and a prefill did not close it), or the prefill opened one of its own.
bool starts_in_reasoning(const std::string& before_prefill, std::string_view prefill, const OutputFormat& f) {
    if (!f.split_reasoning) return false;
    const size_t open = prefill.rfind(f.think_start), close = prefill.rfind(f.think_end);
    if (open != std::string_view::npos && (close == std::string_view::npos || close < open)) return true;
    return close == std::string_view::npos && prompt_opens_reasoning(before_prefill, f);
}

}  // namespace

// The conversation through the template, then, for a prefill, the trailing assistant message's
// text after the generation prompt (as llama-server continues one: the turn the template would
// open for the answer, already begun).
Expected<ChatPrompt> PromptBuilder::build(const Conversation& conv) const {
    const ChatMessage* prefill = prefill_of(conv);
    std::string text;
    if (prefill) {
        Conversation head = conv;
        head.messages.pop_back();
        FERROX_ASSIGN_OR_RETURN(text, render(head, true));
    } else {
        FERROX_ASSIGN_OR_RETURN(text, render(conv, conv.add_generation_prompt));
    }
    ChatPrompt p;
    p.output = format_;
    // Without tools the answer has no calls to parse, except in formats whose channels carry
    // the reasoning and the text too (harmony, Command R7B).
    const bool channels = format_.tools == ToolCallFormat::kHarmony || format_.tools == ToolCallFormat::kCommandR7B;
    if ((conv.tools.empty() || conv.tool_choice == ToolChoice::kNone) && !channels) {
        p.output.tools = ToolCallFormat::kNone;
    }
    const std::string_view continued = prefill ? std::string_view(prefill->content) : std::string_view();
    p.output.starts_in_reasoning = starts_in_reasoning(text, continued, p.output);
    p.text = std::move(text);
    p.text += continued;
    p.tokens = tokenize(p.text);
    p.special_markup = markup_is_control(*tok_, p.output);
    return p;
}

}  // namespace ferrox
