// Fuzz target: parse arbitrary bytes as a template and render it with a small chat context,
// under tight limits. Any outcome but a crash, hang or sanitizer report is fine.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    ferrox::JinjaOptions opts;
    opts.max_steps = 200'000;
    opts.max_output_bytes = 1 << 16;
    opts.max_alloc_bytes = 1 << 22;
    opts.max_range_length = 10'000;
    opts.max_depth = 16;
    opts.fixed_now_unix = 0;
    std::string_view src(reinterpret_cast<const char*>(data), size);
    auto tmpl = ferrox::JinjaTemplate::parse(src, opts);
    if (!tmpl.has_value()) return 0;
    ferrox::ChatTemplateInputs in;
    in.messages_json =
        R"([{"role":"system","content":"sys"},{"role":"user","content":"héllo"},)"
        R"({"role":"assistant","content":"","tool_calls":[{"id":"call00001","type":"function",)"
        R"("function":{"name":"f","arguments":{"x":1.5,"y":[1,2]}}}]},)"
        R"({"role":"tool","tool_call_id":"call00001","content":"42"}])";
    in.tools_json = R"([{"type":"function","function":{"name":"f","description":"d",)"
                    R"("parameters":{"type":"object","properties":{"x":{"type":"number"}}}}}])";
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    (void)ferrox::render_chat_template(*tmpl, in);
    return 0;
}
