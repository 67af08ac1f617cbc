#include "chat/builtin_templates.h"

#include <map>
#include <utility>

namespace ferrox {
namespace {

// Each template follows the branch of llama.cpp's llm_chat_apply_template for its name: the
// same strings, the same trimming, the same handling of a system message (merged into the next
// user turn where the format has none), the same generation prompt (none where llama.cpp adds
// none). `c` below is a message's content.

std::string llama2(bool system, bool bos_inside, bool strip) {
    const std::string c = strip ? "(message.content | trim)" : "message.content";
    return std::string("{%- set ns = namespace(inside=true) -%}{{ '[INST] ' }}"
                       "{%- for message in messages -%}"
                       "{%- if not ns.inside -%}{%- set ns.inside = true -%}{{ '") +
           (bos_inside ? "<s>[INST] " : "[INST] ") +
           "' }}{%- endif -%}"
           "{%- if message.role == 'system' -%}" +
           (system ? "{{ '<<SYS>>\\n' + " + c + " + '\\n<</SYS>>\\n\\n' }}" : "{{ " + c + " + '\\n' }}") +
           "{%- elif message.role == 'user' -%}{{ " + c + " + ' [/INST]' }}"
           "{%- else -%}{{ " + c + " + '</s>' }}{%- set ns.inside = false -%}"
           "{%- endif -%}{%- endfor -%}";
}

std::string mistral_v1_v3(const std::string& lead, const std::string& trail, bool trim_assistant) {
    return "{%- set ns = namespace(inside=false) -%}"
           "{%- for message in messages -%}"
           "{%- if not ns.inside -%}{{ '" + lead + "[INST]" + trail + "' }}{%- set ns.inside = true -%}{%- endif -%}"
           "{%- if message.role == 'system' -%}{{ message.content + '\\n\\n' }}"
           "{%- elif message.role == 'user' -%}{{ message.content + '" + lead + "[/INST]' }}"
           "{%- else -%}{{ '" + trail + "' + " + (trim_assistant ? "(message.content | trim)" : "message.content") +
           " + '</s>' }}{%- set ns.inside = false -%}"
           "{%- endif -%}{%- endfor -%}";
}

std::string mistral_v7(const std::string& sp) {
    return "{%- for message in messages -%}"
           "{%- if message.role == 'system' -%}{{ '[SYSTEM_PROMPT]" + sp + "' + message.content + '[/SYSTEM_PROMPT]' }}"
           "{%- elif message.role == 'user' -%}{{ '[INST]" + sp + "' + message.content + '[/INST]' }}"
           "{%- else -%}{{ '" + sp + "' + message.content + '</s>' }}"
           "{%- endif -%}{%- endfor -%}";
}

// Every message as `before role middle content after`, then `gen` as the generation prompt.
std::string per_message(const std::string& body, const std::string& gen) {
    return "{%- for message in messages -%}{{ " + body + " }}{%- endfor -%}"
           "{%- if add_generation_prompt -%}{{ '" + gen + "' }}{%- endif -%}";
}

// By role: system / user / assistant bodies (an empty one writes nothing), then `gen`.
std::string by_role(const std::string& system, const std::string& user, const std::string& assistant,
                    const std::string& gen) {
    std::string s = "{%- for message in messages -%}{%- if message.role == 'system' -%}";
    if (!system.empty()) s += "{{ " + system + " }}";
    s += "{%- elif message.role == 'user' -%}";
    if (!user.empty()) s += "{{ " + user + " }}";
    s += "{%- elif message.role == 'assistant' -%}";
    if (!assistant.empty()) s += "{{ " + assistant + " }}";
    s += "{%- endif -%}{%- endfor -%}";
    if (!gen.empty()) s += "{%- if add_generation_prompt -%}{{ '" + gen + "' }}{%- endif -%}";
    return s;
}

const std::vector<std::pair<std::string, std::string>>& templates() {
    static const std::vector<std::pair<std::string, std::string>> kTemplates = [] {
        std::vector<std::pair<std::string, std::string>> t;
        t.emplace_back("chatml", per_message("'<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n'",
                                             "<|im_start|>assistant\\n"));
        t.emplace_back("llama2", llama2(false, false, false));
        t.emplace_back("llama2-sys", llama2(true, false, false));
        t.emplace_back("llama2-sys-bos", llama2(true, true, false));
        t.emplace_back("llama2-sys-strip", llama2(true, false, true));
        t.emplace_back("mistral-v1", mistral_v1_v3(" ", " ", false));
        t.emplace_back("mistral-v3", mistral_v1_v3("", " ", true));
        t.emplace_back("mistral-v3-tekken", mistral_v1_v3("", "", false));
        t.emplace_back("mistral-v7", mistral_v7(" "));
        t.emplace_back("mistral-v7-tekken", mistral_v7(""));
        t.emplace_back("phi3", per_message("'<|' + message.role + '|>\\n' + message.content + '<|end|>\\n'",
                                           "<|assistant|>\\n"));
        t.emplace_back("phi4", per_message("'<|im_start|>' + message.role + '<|im_sep|>' + message.content + '<|im_end|>'",
                                           "<|im_start|>assistant<|im_sep|>"));
        t.emplace_back("falcon3", per_message("'<|' + message.role + '|>\\n' + message.content + '\\n'", "<|assistant|>\\n"));
        t.emplace_back("zephyr", per_message("'<|' + message.role + '|>\\n' + message.content + '<|endoftext|>\\n'",
                                             "<|assistant|>\\n"));
        t.emplace_back("monarch", per_message("('' if loop.first else '<s>') + message.role + '\\n' + message.content + '</s>\\n'",
                                              "<s>assistant\\n"));
        // Gemma has no system turn: the system text (trimmed) opens the next user turn.
        t.emplace_back("gemma",
                       "{%- set ns = namespace(sys='') -%}"
                       "{%- for message in messages -%}"
                       "{%- if message.role == 'system' -%}{%- set ns.sys = ns.sys + (message.content | trim) -%}"
                       "{%- else -%}"
                       "{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
                       "{{ '<start_of_turn>' + role + '\\n' }}"
                       "{%- if ns.sys and role != 'model' -%}{{ ns.sys + '\\n\\n' }}{%- set ns.sys = '' -%}{%- endif -%}"
                       "{{ (message.content | trim) + '<end_of_turn>\\n' }}"
                       "{%- endif -%}{%- endfor -%}"
                       "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}");
        t.emplace_back("orion",
                       "{%- set ns = namespace(sys='') -%}"
                       "{%- for message in messages -%}"
                       "{%- if message.role == 'system' -%}{%- set ns.sys = ns.sys + message.content -%}"
                       "{%- elif message.role == 'user' -%}{{ 'Human: ' }}"
                       "{%- if ns.sys -%}{{ ns.sys + '\\n\\n' }}{%- set ns.sys = '' -%}{%- endif -%}"
                       "{{ message.content + '\\n\\nAssistant: </s>' }}"
                       "{%- else -%}{{ message.content + '</s>' }}"
                       "{%- endif -%}{%- endfor -%}");
        t.emplace_back("openchat",
                       "{%- for message in messages -%}"
                       "{%- if message.role == 'system' -%}{{ message.content + '<|end_of_turn|>' }}"
                       "{%- else -%}{{ 'GPT4 Correct ' + (message.role | capitalize) + ': ' + message.content + "
                       "'<|end_of_turn|>' }}"
                       "{%- endif -%}{%- endfor -%}"
                       "{%- if add_generation_prompt -%}{{ 'GPT4 Correct Assistant:' }}{%- endif -%}");
        t.emplace_back("vicuna", by_role("message.content + '\\n\\n'", "'USER: ' + message.content + '\\n'",
                                         "'ASSISTANT: ' + message.content + '</s>\\n'", "ASSISTANT:"));
        t.emplace_back("vicuna-orca", by_role("'SYSTEM: ' + message.content + '\\n'", "'USER: ' + message.content + '\\n'",
                                              "'ASSISTANT: ' + message.content + '</s>\\n'", "ASSISTANT:"));
        t.emplace_back("deepseek", by_role("message.content", "'### Instruction:\\n' + message.content + '\\n'",
                                           "'### Response:\\n' + message.content + '\\n<|EOT|>\\n'", "### Response:\\n"));
        t.emplace_back("deepseek2", by_role("message.content + '\\n\\n'", "'User: ' + message.content + '\\n\\n'",
                                            "'Assistant: ' + message.content + '<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>'",
                                            "Assistant:"));
        t.emplace_back("deepseek3", by_role("message.content + '\\n\\n'", "'<\xEF\xBD\x9CUser\xEF\xBD\x9C>' + message.content",
                                            "'<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>' + message.content + "
                                            "'<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>'",
                                            "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"));
        t.emplace_back("command-r",
                       by_role("'<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + (message.content | trim) + '<|END_OF_TURN_TOKEN|>'",
                               "'<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + (message.content | trim) + '<|END_OF_TURN_TOKEN|>'",
                               "'<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + (message.content | trim) + '<|END_OF_TURN_TOKEN|>'",
                               "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"));
        t.emplace_back("llama3", per_message("'<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + "
                                             "(message.content | trim) + '<|eot_id|>'",
                                             "<|start_header_id|>assistant<|end_header_id|>\\n\\n"));
        t.emplace_back("chatglm3", "{{ '[gMASK]sop' }}" + per_message("'<|' + message.role + '|>\\n ' + message.content",
                                                                     "<|assistant|>"));
        t.emplace_back("chatglm4", "{{ '[gMASK]<sop>' }}" + per_message("'<|' + message.role + '|>\\n' + message.content",
                                                                        "<|assistant|>\\n"));
        t.emplace_back("glmedge", per_message("'<|' + message.role + '|>\\n' + message.content", "<|assistant|>"));
        t.emplace_back("minicpm",
                       "{%- for message in messages -%}"
                       "{%- if message.role == 'user' -%}{{ '<\xE7\x94\xA8\xE6\x88\xB7>' + (message.content | trim) + '<AI>' }}"
                       "{%- else -%}{{ message.content | trim }}"
                       "{%- endif -%}{%- endfor -%}");
        t.emplace_back("granite",
                       per_message("'<|start_of_role|>' + message.role + '<|end_of_role|>' + "
                                   "('<|tool_call|>' if message.role == 'assistant_tool_call' else '') + "
                                   "message.content + '<|end_of_text|>\\n'",
                                   "<|start_of_role|>assistant<|end_of_role|>"));
        return t;
    }();
    return kTemplates;
}

}  // namespace

std::optional<std::string_view> builtin_chat_template(std::string_view name) {
    for (const auto& [n, src] : templates()) {
        if (n == name) return std::string_view(src);
    }
    return std::nullopt;
}

std::vector<std::string> builtin_chat_template_names() {
    std::vector<std::string> names;
    for (const auto& [n, src] : templates()) names.push_back(n);
    return names;
}

}  // namespace ferrox
