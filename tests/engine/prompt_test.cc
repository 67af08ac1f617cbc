// The prompt builder's handling of system messages late in a conversation: rendered in place
// where the template takes them; folded into a neighbouring user turn where it raises, so the
// turns before them render exactly as without them (a cached prefix stays one).
#include <gtest/gtest.h>

#include <string>

#include "engine/prompt.h"
#include "support/bracket_vocab.h"

namespace ferrox {
namespace {

// ChatML, and the same with the check many published templates have.
const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
const char* kStrict =
    "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
    "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

Conversation with_reminder(bool reminder) {
    Conversation c;
    c.messages = {{.role = "system", .content = "S"}, {.role = "user", .content = "U1"},
                  {.role = "assistant", .content = "A1"}};
    if (reminder) c.messages.push_back({.role = "system", .content = "R"});
    c.messages.push_back({.role = "user", .content = "U2"});
    return c;
}

TEST(Prompt, LateSystemMessageStaysInPlaceWhereTheTemplateTakesIt) {
    auto tok = bracket_tokenizer(8);
    auto b = PromptBuilder::create(*tok, kChatMl);
    ASSERT_TRUE(b.has_value()) << b.status().message();
    auto text = (*b)->render(with_reminder(true), true);
    ASSERT_TRUE(text.has_value()) << text.status().message();
    EXPECT_NE(text->find("<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>system\nR<|im_end|>\n<|im_start|>user\nU2"),
              std::string::npos)
        << *text;
}

TEST(Prompt, LateSystemMessageJoinsTheNextUserTurnWhereTheTemplateRefusesIt) {
    auto tok = bracket_tokenizer(8);
    auto b = PromptBuilder::create(*tok, kStrict);
    ASSERT_TRUE(b.has_value()) << b.status().message();
    auto with = (*b)->render(with_reminder(true), true);
    auto without = (*b)->render(with_reminder(false), true);
    ASSERT_TRUE(with.has_value()) << with.status().message();
    ASSERT_TRUE(without.has_value());
    EXPECT_NE(with->find("<|im_start|>user\nR\n\nU2<|im_end|>"), std::string::npos) << *with;
    // Everything before the reminder renders as it did without it.
    const size_t cut = without->find("<|im_start|>user\nU2");
    ASSERT_NE(cut, std::string::npos);
    EXPECT_EQ(with->substr(0, cut), without->substr(0, cut));
    // A template that raises for another reason still fails, folded or not.
    auto always = PromptBuilder::create(*tok, "{{ raise_exception('no') }}");
    ASSERT_TRUE(always.has_value());
    EXPECT_FALSE((*always)->render(with_reminder(true), true).has_value());
}

}  // namespace
}  // namespace ferrox
