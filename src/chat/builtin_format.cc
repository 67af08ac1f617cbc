#include "chat/builtin_format.h"

namespace ferrox {

std::optional<BuiltinChatFormat> detect_chat_format(const std::string& t) {
    if (t.find("<|im_start|>") != std::string::npos) return BuiltinChatFormat::kChatML;
    if (t.find("<|start_header_id|>") != std::string::npos) return BuiltinChatFormat::kLlama3;
    if (t.find("<start_of_turn>") != std::string::npos) return BuiltinChatFormat::kGemma;
    if (t.find("[INST]") != std::string::npos) return BuiltinChatFormat::kMistral;
    return std::nullopt;
}

std::string format_single_user_turn(BuiltinChatFormat format, const std::string& text) {
    switch (format) {
        case BuiltinChatFormat::kChatML:
            return "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n";
        case BuiltinChatFormat::kLlama3:
            return "<|start_header_id|>user<|end_header_id|>\n\n" + text +
                   "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
        case BuiltinChatFormat::kGemma:
            return "<start_of_turn>user\n" + text + "<end_of_turn>\n<start_of_turn>model\n";
        case BuiltinChatFormat::kMistral:
            return "[INST] " + text + " [/INST]";
    }
    return text;
}

}  // namespace ferrox
