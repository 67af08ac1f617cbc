// llama.cpp's built-in chat template names as Jinja: each renders what llama.cpp's
// llm_chat_apply_template writes for the same conversation (expected strings written from its
// formatting rules: the system turn, the trimming, the generation prompt of each family).
#include "chat/builtin_templates.h"

#include <gtest/gtest.h>

#include "chat/jinja.h"

namespace ferrox {
namespace {

// A system turn, and an assistant turn with spaces around it: the trimming differs per family.
constexpr const char* kMessages =
    R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},)"
    R"({"role":"assistant","content":" Hello! "},{"role":"user","content":"Who?"}])";

std::string render(const std::string& name, bool add_generation_prompt = true) {
    auto src = builtin_chat_template(name);
    EXPECT_TRUE(src.has_value()) << name;
    if (!src) return "";
    auto t = JinjaTemplate::parse(*src);
    EXPECT_TRUE(t.has_value()) << name << ": " << t.status().message();
    if (!t.has_value()) return "";
    ChatTemplateInputs in;
    in.messages_json = kMessages;
    in.add_generation_prompt = add_generation_prompt;
    auto out = render_chat_template(*t, in);
    EXPECT_TRUE(out.has_value()) << name << ": " << out.status().message();
    return out.has_value() ? *out : "";
}

TEST(BuiltinTemplates, EveryNameParsesAndRenders) {
    const auto names = builtin_chat_template_names();
    EXPECT_GE(names.size(), 12u);
    for (const auto& n : names) EXPECT_FALSE(render(n).empty()) << n;
    EXPECT_FALSE(builtin_chat_template("no-such-template").has_value());
    EXPECT_FALSE(builtin_chat_template("").has_value());
}

TEST(BuiltinTemplates, ChatmlPhiZephyrFalconGranite) {
    EXPECT_EQ(render("chatml"),
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(render("chatml", false),
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n");
    EXPECT_EQ(render("phi3"), "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n Hello! <|end|>\n"
                              "<|user|>\nWho?<|end|>\n<|assistant|>\n");
    EXPECT_EQ(render("zephyr"), "<|system|>\nBe brief.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n"
                                "<|assistant|>\n Hello! <|endoftext|>\n<|user|>\nWho?<|endoftext|>\n<|assistant|>\n");
    EXPECT_EQ(render("falcon3"), "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n Hello! \n<|user|>\nWho?\n<|assistant|>\n");
    EXPECT_EQ(render("granite"),
              "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
              "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
              "<|start_of_role|>assistant<|end_of_role|> Hello! <|end_of_text|>\n"
              "<|start_of_role|>user<|end_of_role|>Who?<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>");
}

TEST(BuiltinTemplates, Llama2Variants) {
    EXPECT_EQ(render("llama2"), "[INST] Be brief.\nHi [/INST] Hello! </s>[INST] Who? [/INST]");
    EXPECT_EQ(render("llama2-sys"), "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s>[INST] Who? [/INST]");
    EXPECT_EQ(render("llama2-sys-bos"),
              "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Who? [/INST]");
    EXPECT_EQ(render("llama2-sys-strip"), "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] Who? [/INST]");
}

TEST(BuiltinTemplates, Mistral) {
    EXPECT_EQ(render("mistral-v1"), " [INST] Be brief.\n\nHi [/INST]  Hello! </s> [INST] Who? [/INST]");
    EXPECT_EQ(render("mistral-v3"), "[INST] Be brief.\n\nHi[/INST] Hello!</s>[INST] Who?[/INST]");
    EXPECT_EQ(render("mistral-v3-tekken"), "[INST]Be brief.\n\nHi[/INST] Hello! </s>[INST]Who?[/INST]");
    EXPECT_EQ(render("mistral-v7"), "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST]  Hello! </s>[INST] Who?[/INST]");
    EXPECT_EQ(render("mistral-v7-tekken"), "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST] Hello! </s>[INST]Who?[/INST]");
}

TEST(BuiltinTemplates, Llama3GemmaCommandR) {
    EXPECT_EQ(render("llama3"),
              "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nWho?<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    EXPECT_EQ(render("gemma"),
              "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
              "<start_of_turn>user\nWho?<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_EQ(render("command-r"),
              "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be brief.<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who?<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
}

TEST(BuiltinTemplates, VicunaDeepseekOpenchat) {
    EXPECT_EQ(render("vicuna"), "Be brief.\n\nUSER: Hi\nASSISTANT:  Hello! </s>\nUSER: Who?\nASSISTANT:");
    EXPECT_EQ(render("vicuna-orca"), "SYSTEM: Be brief.\nUSER: Hi\nASSISTANT:  Hello! </s>\nUSER: Who?\nASSISTANT:");
    EXPECT_EQ(render("deepseek"),
              "Be brief.### Instruction:\nHi\n### Response:\n Hello! \n<|EOT|>\n### Instruction:\nWho?\n### Response:\n");
    EXPECT_EQ(render("deepseek3"),
              "Be brief.\n\n<\xEF\xBD\x9CUser\xEF\xBD\x9C>Hi<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C> Hello! "
              "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C><\xEF\xBD\x9CUser\xEF\xBD\x9C>Who?"
              "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>");
    EXPECT_EQ(render("openchat"),
              "Be brief.<|end_of_turn|>GPT4 Correct User: Hi<|end_of_turn|>GPT4 Correct Assistant:  Hello! "
              "<|end_of_turn|>GPT4 Correct User: Who?<|end_of_turn|>GPT4 Correct Assistant:");
    EXPECT_EQ(render("orion"), "Human: Be brief.\n\nHi\n\nAssistant: </s> Hello! </s>Human: Who?\n\nAssistant: </s>");
    EXPECT_EQ(render("chatglm4"),
              "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n Hello! <|user|>\nWho?<|assistant|>\n");
}

}  // namespace
}  // namespace ferrox
