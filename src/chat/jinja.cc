#include "chat/jinja.h"

#include "chat/jinja_parser.h"
#include "chat/jinja_runtime.h"

namespace ferrox {

Expected<JinjaTemplate> JinjaTemplate::parse(std::string_view source, const JinjaOptions& options) {
    auto program = std::make_shared<jinja::Program>();
    program->options = options;
    FERROX_RETURN_IF_ERROR(jinja::parse_template(source, options.max_nesting, &program->body));
    return JinjaTemplate(std::move(program));
}

const JinjaOptions& JinjaTemplate::options() const { return program_->options; }

Expected<std::string> JinjaTemplate::render(const jinja::Value& context) const {
    if (!context.is_object())
        return invalid_argument("jinja: the render context must be an object");
    std::string out;
    Status st;
    {
        jinja::Interp interp(program_->options, context);
        st = interp.render(program_->body, &out);
    }
    if (!st.is_ok()) return st;
    return out;
}

Expected<std::string> JinjaTemplate::render_json(std::string_view context_json) const {
    jinja::Value ctx;
    std::string err;
    if (!jinja::json_parse(context_json, &ctx, &err))
        return invalid_argument("jinja: bad context JSON: " + err);
    return render(ctx);
}

namespace {

Status parse_json_field(const std::string& text, const char* what, jinja::Value* out) {
    std::string err;
    if (!jinja::json_parse(text, out, &err))
        return invalid_argument(std::string("chat template: bad ") + what + " JSON: " + err);
    return Status::ok();
}

}  // namespace

Expected<std::string> render_chat_template(const JinjaTemplate& tmpl,
                                           const ChatTemplateInputs& inputs) {
    using jinja::Value;
    std::vector<std::pair<std::string, Value>> vars;
    Value messages;
    FERROX_RETURN_IF_ERROR(parse_json_field(inputs.messages_json, "messages", &messages));
    if (!messages.is_array())
        return invalid_argument("chat template: messages must be a JSON array");
    Value tools = Value::none();
    if (!inputs.tools_json.empty()) {
        FERROX_RETURN_IF_ERROR(parse_json_field(inputs.tools_json, "tools", &tools));
        if (!tools.is_array() && !tools.is_none())
            return invalid_argument("chat template: tools must be a JSON array");
    }
    vars.emplace_back("messages", std::move(messages));
    vars.emplace_back("tools", std::move(tools));
    vars.emplace_back("documents", Value::none());
    vars.emplace_back("add_generation_prompt", Value::boolean(inputs.add_generation_prompt));
    vars.emplace_back("bos_token", Value::string(inputs.bos_token));
    vars.emplace_back("eos_token", Value::string(inputs.eos_token));
    if (!inputs.extra_context_json.empty()) {
        Value extra;
        FERROX_RETURN_IF_ERROR(
            parse_json_field(inputs.extra_context_json, "extra context", &extra));
        if (!extra.is_object())
            return invalid_argument("chat template: extra context must be a JSON object");
        for (const auto& kv : extra.obj().items) {
            bool replaced = false;
            for (auto& v : vars)
                if (v.first == kv.first) {
                    v.second = kv.second;
                    replaced = true;
                }
            if (!replaced) vars.emplace_back(kv.first, kv.second);
        }
    }
    return tmpl.render(jinja::make_object(std::move(vars)));
}

}  // namespace ferrox
