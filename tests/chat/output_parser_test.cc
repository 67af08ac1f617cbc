// Unit tests of the output stream parsers: every format's well-formed and malformed output,
// reasoning with and without tool calls, chunking independence (each case is parsed whole,
// one byte at a time and at random split points, and must agree), and format detection on
// the real chat templates of ../shared/testdata/chat_templates.
#include "chat/output_parser.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <sstream>

namespace ferrox {

bool operator==(const ChatDelta& a, const ChatDelta& b) {
    return a.kind == b.kind && a.text == b.text && a.name == b.name && a.arguments == b.arguments;
}

void PrintTo(const ChatDelta& d, std::ostream* os) {
    switch (d.kind) {
        case ChatDelta::Kind::kText:
            *os << "T(" << testing::PrintToString(d.text) << ")";
            break;
        case ChatDelta::Kind::kReasoning:
            *os << "R(" << testing::PrintToString(d.text) << ")";
            break;
        case ChatDelta::Kind::kToolCall:
            *os << "C(" << d.name << ", " << d.arguments << ")";
            break;
    }
}

}  // namespace ferrox

namespace {

using ferrox::ChatDelta;
using ferrox::OutputFormat;
using ferrox::OutputParser;
using ferrox::ToolCallFormat;
using Deltas = std::vector<ChatDelta>;

ChatDelta T(std::string s) { return {ChatDelta::Kind::kText, std::move(s), "", ""}; }
ChatDelta R(std::string s) { return {ChatDelta::Kind::kReasoning, std::move(s), "", ""}; }
ChatDelta C(std::string name, std::string args) {
    return {ChatDelta::Kind::kToolCall, "", std::move(name), std::move(args)};
}

OutputFormat fmt(ToolCallFormat tools) {
    OutputFormat f;
    f.tools = tools;
    f.family = tools;
    return f;
}

Deltas merged(const Deltas& in) {
    Deltas out;
    for (const ChatDelta& d : in) {
        if (!out.empty() && d.kind != ChatDelta::Kind::kToolCall && out.back().kind == d.kind) {
            out.back().text += d.text;
        } else {
            out.push_back(d);
        }
    }
    return out;
}

// Feeds text cut at `cuts` (sorted offsets), checking each delta's own contract.
Deltas run_cuts(const OutputFormat& f, std::string_view text, const std::vector<size_t>& cuts) {
    OutputParser p(f);
    Deltas out;
    size_t at = 0;
    for (size_t c : cuts) {
        p.push(text.substr(at, c - at), &out);
        at = c;
    }
    p.push(text.substr(at), &out);
    p.finish(&out);
    int n_calls = 0;
    for (const ChatDelta& d : out) {
        if (d.kind == ChatDelta::Kind::kToolCall) {
            ++n_calls;
            EXPECT_FALSE(d.name.empty());
            EXPECT_TRUE(nlohmann::json::parse(d.arguments, nullptr, false).is_object())
                << d.arguments;
        } else {
            EXPECT_FALSE(d.text.empty());
        }
    }
    EXPECT_EQ(p.n_tool_calls(), n_calls);
    return out;
}

// Parses text whole, one byte at a time and at random split points; all must agree.
Deltas parse(const OutputFormat& f, std::string_view text) {
    Deltas whole = merged(run_cuts(f, text, {}));
    std::vector<size_t> every;
    for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
    EXPECT_EQ(merged(run_cuts(f, text, every)), whole) << "one byte at a time: " << text;
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string_view>{}(text)));
    for (int trial = 0; trial < 30 && text.size() > 1; ++trial) {
        std::vector<size_t> cuts;
        for (size_t i = 1; i < text.size(); ++i) {
            if (rng() % 5 == 0) cuts.push_back(i);
        }
        EXPECT_EQ(merged(run_cuts(f, text, cuts)), whole) << "random split: " << text;
    }
    return whole;
}

Deltas parse(ToolCallFormat tools, std::string_view text) { return parse(fmt(tools), text); }

// ---- reasoning ----

TEST(Reasoning, ThinkBlockBecomesReasoning) {
    auto f = fmt(ToolCallFormat::kNone);
    EXPECT_EQ(parse(f, "<think>\nLet me see.\n</think>\n\nThe answer is 4."),
              (Deltas{R("Let me see."), T("The answer is 4.")}));
    EXPECT_EQ(parse(f, "Before <think>mid</think> after"),
              (Deltas{T("Before "), R("mid"), T("after")}));
    EXPECT_EQ(parse(f, "<think>a</think>b<think>c</think>d"),
              (Deltas{R("a"), T("b"), R("c"), T("d")}));
}

TEST(Reasoning, StartsInsideAndNeverCloses) {
    auto f = fmt(ToolCallFormat::kNone);
    f.starts_in_reasoning = true;
    EXPECT_EQ(parse(f, "Hmm, 2+2.\n</think>\n\n4"), (Deltas{R("Hmm, 2+2."), T("4")}));
    EXPECT_EQ(parse(f, "still thinking  \n"), (Deltas{R("still thinking")}));
    auto g = fmt(ToolCallFormat::kNone);
    EXPECT_EQ(parse(g, "<think>cut off <thi"), (Deltas{R("cut off <thi")}));
}

TEST(Reasoning, SplitOffKeepsMarkersInText) {
    auto f = fmt(ToolCallFormat::kNone);
    f.split_reasoning = false;
    EXPECT_EQ(parse(f, "<think>a</think>b"), (Deltas{T("<think>a</think>b")}));
    f.starts_in_reasoning = true;
    EXPECT_EQ(parse(f, "a</think>b"), (Deltas{T("a</think>b")}));
}

TEST(Reasoning, StrayAndPartialMarkersAreText) {
    auto f = fmt(ToolCallFormat::kNone);
    EXPECT_EQ(parse(f, "a</think>b"), (Deltas{T("a</think>b")}));
    EXPECT_EQ(parse(f, "ends with <thin"), (Deltas{T("ends with <thin")}));
    EXPECT_EQ(parse(f, "<thinking> is not <think"), (Deltas{T("<thinking> is not <think")}));
}

TEST(Reasoning, CustomMarkers) {
    auto f = fmt(ToolCallFormat::kNone);
    f.think_start = "[THINK]";
    f.think_end = "[/THINK]";
    EXPECT_EQ(parse(f, "[THINK]plan[/THINK]done"), (Deltas{R("plan"), T("done")}));
}

TEST(Reasoning, PromptOpensReasoning) {
    OutputFormat f;
    EXPECT_TRUE(ferrox::prompt_opens_reasoning("<|im_start|>assistant\n<think>\n", f));
    EXPECT_TRUE(ferrox::prompt_opens_reasoning("<｜Assistant｜><think>", f));
    EXPECT_FALSE(ferrox::prompt_opens_reasoning("assistant\n<think>\n\n</think>\n\n", f));
    EXPECT_FALSE(ferrox::prompt_opens_reasoning("<|im_start|>assistant\n", f));
    f.split_reasoning = false;
    EXPECT_FALSE(ferrox::prompt_opens_reasoning("<think>\n", f));
}

// ---- Hermes / Qwen2.5 / Qwen3 ----

TEST(Hermes, CallsWithTextAround) {
    EXPECT_EQ(parse(ToolCallFormat::kHermes,
                    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                    "{\"city\": \"Paris\", \"z\": 1, \"a\": [1, 2]}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": null}\"}\n"
                    "</tool_call>\nDone."),
              (Deltas{T("Let me check."), C("get_weather", R"({"city":"Paris","z":1,"a":[1,2]})"),
                      C("f", R"({"q":null})"), T("Done.")}));
    EXPECT_EQ(parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"now\"}</tool_call>"),
              (Deltas{C("now", "{}")}));
}

TEST(Hermes, CallCompleteAtFinishWithoutClosingMarker) {
    EXPECT_EQ(parse(ToolCallFormat::kHermes,
                    "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n"),
              (Deltas{C("f", R"({"x":1})")}));
}

TEST(Hermes, MalformedIsVerbatimText) {
    for (std::string s :
         {"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> tail",
          "<tool_call>{\"foo\": 1}</tool_call>", "<tool_call>\n{\"name\": \"f\", \"argu",
          "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "<tool_call></tool_call>",
          "a <tool_call"}) {
        EXPECT_EQ(parse(ToolCallFormat::kHermes, s), (Deltas{T(s)})) << s;
    }
    // A new call that opens before the broken one closed keeps its own chance.
    EXPECT_EQ(parse(ToolCallFormat::kHermes,
                    "<tool_call>{bad <tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>"),
              (Deltas{T("<tool_call>{bad"), C("g", "{}")}));
}

TEST(Hermes, ReasoningThenCall) {
    auto f = fmt(ToolCallFormat::kHermes);
    EXPECT_EQ(parse(f,
                    "<think>\nI should call it.\n</think>\n\n<tool_call>\n{\"name\": \"f\", "
                    "\"arguments\": {\"s\": \"<think>x</think>\"}}\n</tool_call>"),
              (Deltas{R("I should call it."), C("f", R"({"s":"<think>x</think>"})")}));
    // A held-back "<" before a think block stays before it.
    EXPECT_EQ(parse(f, "a<<think>b</think>c"), (Deltas{T("a<"), R("b"), T("c")}));
}

TEST(Hermes, StreamsWithoutLeakingMarkup) {
    std::string text =
        "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nok";
    OutputParser p(fmt(ToolCallFormat::kHermes));
    Deltas out;
    std::string shown;
    bool call_seen = false;
    for (size_t i = 0; i < text.size(); ++i) {
        size_t before = out.size();
        p.push(text.substr(i, 1), &out);
        for (size_t k = before; k < out.size(); ++k) {
            if (out[k].kind == ChatDelta::Kind::kText) shown += out[k].text;
            if (out[k].kind == ChatDelta::Kind::kToolCall) {
                call_seen = true;
                EXPECT_EQ(text.substr(i - 11, 12), "</tool_call>");  // as soon as it closes
            }
        }
        EXPECT_EQ(shown.find('<'), std::string::npos) << shown;
    }
    p.finish(&out);
    EXPECT_TRUE(call_seen);
    EXPECT_EQ(p.n_tool_calls(), 1);
}

TEST(Hermes, DepthLimit) {
    auto nested = [](int depth) {
        return "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " +
               std::string(depth - 2, '[') + std::string(depth - 2, ']') + "}}</tool_call>";
    };
    EXPECT_EQ(parse(ToolCallFormat::kHermes, nested(64)).at(0).kind, ChatDelta::Kind::kToolCall);
    std::string deep = nested(65);
    EXPECT_EQ(parse(ToolCallFormat::kHermes, deep), (Deltas{T(deep)}));
    std::string huge = "<tool_call>" + std::string(200000, '[');
    EXPECT_EQ(merged(run_cuts(fmt(ToolCallFormat::kHermes), huge, {})), (Deltas{T(huge)}));
}

// ---- Qwen3-Coder ----

TEST(Qwen3Coder, ParametersKeepJsonTypes) {
    EXPECT_EQ(
        parse(ToolCallFormat::kQwen3Coder,
              "I'll search.\n<tool_call>\n<function=search>\n<parameter=query>\nhello "
              "world\n</parameter>\n<parameter=limit>\n5\n</parameter>\n<parameter=opts>\n"
              "{\"deep\": true}\n</parameter>\n<parameter=none>\nnull\n</parameter>\n"
              "<parameter=text>\nline 1\nline 2\n\n</parameter>\n</function>\n</tool_call>"),
        (Deltas{T("I'll search."), C("search",
                                     "{\"query\":\"hello world\",\"limit\":5,\"opts\":{\"deep\":"
                                     "true},\"none\":null,\"text\":\"line 1\\nline 2\\n\"}")}));
    EXPECT_EQ(parse(ToolCallFormat::kQwen3Coder,
                    "<tool_call>\n<function=now>\n</function>\n</tool_call>\n"
                    "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>"),
              (Deltas{C("now", "{}"), C("f", R"({"a":1})")}));
}

TEST(Qwen3Coder, MalformedIsVerbatimText) {
    for (std::string s : {"<tool_call>\n<foo>\n</tool_call>",
                          "<tool_call>\n<function=f>\n<parameter=a>\n1\n</tool_call>",
                          "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n",
                          "<tool_call>\n<function=>\n</function>\n</tool_call>"}) {
        EXPECT_EQ(parse(ToolCallFormat::kQwen3Coder, s), (Deltas{T(s)})) << s;
    }
}

TEST(Qwen3Coder, InvalidUtf8ValueDoesNotThrow) {
    auto out = parse(ToolCallFormat::kQwen3Coder,
                     "<tool_call><function=f><parameter=a>\xff\xfe</parameter></function>"
                     "</tool_call>");
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].name, "f");
}

// ---- Llama 3.x ----

TEST(Llama3, JsonAnswerAndPythonTag) {
    EXPECT_EQ(parse(ToolCallFormat::kLlama3,
                    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"),
              (Deltas{C("get_weather", R"({"city":"Paris"})")}));
    EXPECT_EQ(parse(ToolCallFormat::kLlama3,
                    "<|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"arguments\": {}}"),
              (Deltas{C("f", "{}")}));
    EXPECT_EQ(parse(ToolCallFormat::kLlama3,
                    " {\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", "
                    "\"parameters\": {}}"),
              (Deltas{C("a", R"({"x":1})"), C("b", "{}")}));
}

TEST(Llama3, BuiltinCall) {
    EXPECT_EQ(parse(ToolCallFormat::kLlama3,
                    "<|python_tag|>brave_search.call(query=\"weather in (Paris)\", count=3, "
                    "safe=True, lang='en')"),
              (Deltas{C("brave_search",
                        R"j({"query":"weather in (Paris)","count":3,"safe":true,"lang":"en"})j")}));
}

TEST(Llama3, TextAndMalformed) {
    EXPECT_EQ(parse(ToolCallFormat::kLlama3, "Hello there {not json}"),
              (Deltas{T("Hello there {not json}")}));
    for (std::string s :
         {"{\"answer\": 42} ok", "{\"name\": \"Bob\", \"age\": 3}",
          "<|python_tag|>{\"name\": \"f\", \"parameters\": {", "<|python_tag|>print(1)",
          "<|python_tag|>f.call(x=)", "<|python_tag|>", "{\"name\": \"f\"]"}) {
        EXPECT_EQ(parse(ToolCallFormat::kLlama3, s), (Deltas{T(s)})) << s;
    }
    EXPECT_EQ(parse(ToolCallFormat::kLlama3, "{\"name\": \"f\", \"parameters\": {}}\nThat is all."),
              (Deltas{C("f", "{}"), T("That is all.")}));
}

// ---- Mistral ----

TEST(Mistral, ListAndV11Forms) {
    EXPECT_EQ(parse(ToolCallFormat::kMistral,
                    "Sure. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris\"}, \"id\": \"abc123xyz\"}, {\"name\": \"t\", \"arguments\": {}}]"),
              (Deltas{T("Sure."), C("get_weather", R"({"city":"Paris"})"), C("t", "{}")}));
    EXPECT_EQ(parse(ToolCallFormat::kMistral,
                    "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]"
                    " {}"),
              (Deltas{C("get_weather", R"({"city":"Paris"})"), C("get_time", "{}")}));
}

TEST(Mistral, MalformedIsVerbatimText) {
    for (std::string s : {"[TOOL_CALLS][{\"name\": 1}]", "[TOOL_CALLS]bad name[ARGS]{}",
                          "[TOOL_CALLS]f[ARGS]{\"a\":", "[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS]",
                          "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": 3}] [TOOL_CA"}) {
        EXPECT_EQ(parse(ToolCallFormat::kMistral, s), (Deltas{T(s)})) << s;
    }
}

// ---- DeepSeek ----

TEST(DeepSeek, V3FencedCallsAfterReasoning) {
    auto f = fmt(ToolCallFormat::kDeepSeekV3);
    f.starts_in_reasoning = true;
    EXPECT_EQ(parse(f,
                    "Weather and time.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
                    "function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
                    "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
                    "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
              (Deltas{R("Weather and time."), C("get_weather", R"({"city":"Paris"})"),
                      C("get_time", "{}")}));
}

TEST(DeepSeek, V31BareArguments) {
    EXPECT_EQ(parse(ToolCallFormat::kDeepSeekV31,
                    "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"
                    "<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
              (Deltas{T("Let me look."), C("get_weather", R"({"city":"Paris"})")}));
    // Cut off before the end markers: complete content still makes the call.
    EXPECT_EQ(parse(ToolCallFormat::kDeepSeekV31,
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}"),
              (Deltas{C("f", R"({"a":1})")}));
}

TEST(DeepSeek, MalformedIsVerbatimText) {
    for (std::string s :
         {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{bad}<｜tool▁call▁end｜>"
          "<｜tool▁calls▁end｜>",
          "<｜tool▁calls▁begin｜>oops", "<｜tool▁call▁begin｜>f{}<｜tool▁call▁end｜>",
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\":",
          "x<｜tool▁calls▁end｜>"}) {
        EXPECT_EQ(parse(ToolCallFormat::kDeepSeekV3, s), (Deltas{T(s)})) << s;
    }
}

// ---- gpt-oss harmony ----

TEST(Harmony, ChannelsAndCalls) {
    EXPECT_EQ(parse(ToolCallFormat::kHarmony,
                    "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant"
                    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                    "{\"city\": \"Paris\"}<|call|>"),
              (Deltas{R("User wants weather."), C("get_weather", R"({"city":"Paris"})")}));
    EXPECT_EQ(parse(ToolCallFormat::kHarmony,
                    "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>"
                    "final<|message|>Hello!<|return|>"),
              (Deltas{R("Simple."), T("Hello!")}));
}

TEST(Harmony, RecipientInRoleAndMissingEndMarkers) {
    EXPECT_EQ(parse(ToolCallFormat::kHarmony,
                    " to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}"),
              (Deltas{C("f", R"({"a":1})")}));
    EXPECT_EQ(
        parse(ToolCallFormat::kHarmony, "<|channel|>analysis to=functions.g<|message|>{}<|call|>"),
        (Deltas{C("g", "{}")}));
    EXPECT_EQ(parse(ToolCallFormat::kHarmony,
                    "<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final"
                    "<|message|>Hi"),
              (Deltas{R("hmm"), T("Hi")}));
}

TEST(Harmony, WithoutToolsOrReasoningSplit) {
    OutputFormat f;
    f.family = ToolCallFormat::kHarmony;  // request without tools: channels still parsed
    EXPECT_EQ(parse(f,
                    "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final"
                    "<|message|>b"),
              (Deltas{R("a"), T("b")}));
    std::string call = "<|channel|>commentary to=functions.f<|message|>{}<|call|>";
    EXPECT_EQ(parse(f, call), (Deltas{T(call)}));
    f.split_reasoning = false;
    EXPECT_EQ(parse(f,
                    "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final"
                    "<|message|>b"),
              (Deltas{T("<|channel|>analysis<|message|>a<|end|>b")}));
}

TEST(Harmony, MalformedIsVerbatimText) {
    for (std::string s : {"<|channel|>commentary to=functions.f <|constrain|>json<|message|>"
                          "{bad<|call|>",
                          "Hello, no header at all.", "<|channel|>final no message",
                          "<|start|>assistant\n<|channel|>final<|message|>x"}) {
        auto out = parse(ToolCallFormat::kHarmony, s);
        ASSERT_EQ(out.size(), 1u) << s;
        EXPECT_EQ(out[0].kind, ChatDelta::Kind::kText) << s;
    }
    std::string s = "<|channel|>commentary to=functions.f<|message|>{bad<|call|>";
    EXPECT_EQ(parse(ToolCallFormat::kHarmony, s), (Deltas{T(s)}));
}

// ---- functionary v3.2 ----

TEST(Functionary, RecipientsAndCalls) {
    EXPECT_EQ(
        parse(ToolCallFormat::kFunctionaryV32, "get_weather\n{\"city\": \"Paris\"}>>>get_time\n{}"),
        (Deltas{C("get_weather", R"({"city":"Paris"})"), C("get_time", "{}")}));
    EXPECT_EQ(parse(ToolCallFormat::kFunctionaryV32,
                    "all\nLet me check.>>>get_weather\n{\"city\": \"Paris\"}"),
              (Deltas{T("Let me check."), C("get_weather", R"({"city":"Paris"})")}));
    EXPECT_EQ(parse(ToolCallFormat::kFunctionaryV32, ">>>all\nHi there"), (Deltas{T("Hi there")}));
    EXPECT_EQ(parse(ToolCallFormat::kFunctionaryV32, "python\nprint(1)"),
              (Deltas{C("python", R"j({"code":"print(1)"})j")}));
    OutputFormat none;
    none.family = ToolCallFormat::kFunctionaryV32;
    EXPECT_EQ(parse(none, "all\nHello"), (Deltas{T("Hello")}));
}

TEST(Functionary, MalformedIsVerbatimText) {
    for (std::string s : {"get_weather\n{\"city\": ", "Sure\nthing", "all>>> print(x)",
                          "Hello world", "f\n[1]", ">>>f\n{bad}"}) {
        EXPECT_EQ(parse(ToolCallFormat::kFunctionaryV32, s), (Deltas{T(s)})) << s;
    }
}

// ---- Command R7B ----

TEST(CommandR7B, ThinkingActionAndResponse) {
    std::ifstream in(std::filesystem::path(FERROX_TESTDATA_DIR) /
                     "chat_templates/CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja");
    std::stringstream ss;
    ss << in.rdbuf();
    OutputFormat f = ferrox::detect_output_format(ss.str());
    ASSERT_EQ(f.tools, ToolCallFormat::kCommandR7B);
    EXPECT_EQ(parse(f,
                    "<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n"
                    "    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", "
                    "\"parameters\": {\"city\": \"Paris\"}}\n]<|END_ACTION|>"),
              (Deltas{R("I will look it up."), C("get_weather", R"({"city":"Paris"})")}));
    EXPECT_EQ(parse(f, "<|START_RESPONSE|>Hello!<|END_RESPONSE|>"), (Deltas{T("Hello!")}));
    f.tools = ToolCallFormat::kNone;
    EXPECT_EQ(parse(f, "<|START_RESPONSE|>Hi<|END_RESPONSE|>"), (Deltas{T("Hi")}));
}

TEST(CommandR7B, MalformedIsVerbatimText) {
    for (std::string s : {"<|START_ACTION|>[{\"tool_name\": 3}]<|END_ACTION|>",
                          "<|START_ACTION|>[]<|END_ACTION|>", "<|START_ACTION|>[{\"tool_n"}) {
        EXPECT_EQ(parse(ToolCallFormat::kCommandR7B, s), (Deltas{T(s)})) << s;
    }
}

// ---- generic ----

TEST(Generic, WholeAnswerAndTaggedCalls) {
    EXPECT_EQ(parse(ToolCallFormat::kGeneric,
                    "\n{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, "
                    "{\"name\": \"b\", \"arguments\": {}}]}\n"),
              (Deltas{C("a", R"({"x":1})"), C("b", "{}")}));
    EXPECT_EQ(parse(ToolCallFormat::kGeneric, "{\"name\": \"a\", \"arguments\": {\"x\": 1}}"),
              (Deltas{C("a", R"({"x":1})")}));
    EXPECT_EQ(parse(ToolCallFormat::kGeneric,
                    "Calling. <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"),
              (Deltas{T("Calling."), C("a", "{}")}));
}

TEST(Generic, NotExactlyACallIsText) {
    for (std::string s :
         {"{\"name\": \"a\", \"arguments\": {}} and more", "{\"city\": \"Paris\"}",
          "{\"tool_calls\": []}", "{\"tool_calls\": [{\"name\": \"a\"", "Plain answer."}) {
        EXPECT_EQ(parse(ToolCallFormat::kGeneric, s), (Deltas{T(s)})) << s;
    }
}

// ---- facade ----

TEST(OutputParser, NoToolsIsPlainTextAndRestartsAfterFinish) {
    std::string s = "<tool_call>{\"name\": \"f\"}</tool_call>";
    EXPECT_EQ(parse(ToolCallFormat::kNone, s), (Deltas{T(s)}));
    OutputParser p(fmt(ToolCallFormat::kHermes));
    Deltas out;
    p.push("<tool_call>{\"name\": \"f\"}", &out);
    p.push("", nullptr);  // a null out is allowed
    p.finish(&out);
    p.push("<think>x</think>y", &out);
    p.finish(&out);
    EXPECT_EQ(out, (Deltas{C("f", "{}"), R("x"), T("y")}));
    EXPECT_EQ(p.n_tool_calls(), 1);
}

TEST(OutputParser, LongHeldInputStaysLinear) {
    // An unclosed call of 1 MiB pushed 4 bytes at a time: quadratic rescans would hang here.
    std::string body =
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"" + std::string(1 << 20, 'x');
    for (auto tools : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kHarmony,
                       ToolCallFormat::kDeepSeekV31}) {
        std::string text = tools == ToolCallFormat::kLlama3 ? body.substr(11) : body;
        if (tools == ToolCallFormat::kHarmony) {
            text = "<|channel|>commentary to=functions.f<|message|>" + body.substr(11);
        }
        if (tools == ToolCallFormat::kDeepSeekV31) {
            text = "<｜tool▁call▁begin｜>f<｜tool▁sep｜>" + body.substr(11);
        }
        OutputParser p(fmt(tools));
        Deltas out;
        for (size_t i = 0; i < text.size(); i += 4)
            p.push(std::string_view(text).substr(i, 4), &out);
        EXPECT_TRUE(out.empty());
        p.finish(&out);
        EXPECT_EQ(merged(out), (Deltas{T(text)})) << ferrox::tool_call_format_name(tools);
    }
}

TEST(Formats, NamesRoundTrip) {
    for (int i = 0; i <= static_cast<int>(ToolCallFormat::kGeneric); ++i) {
        auto f = static_cast<ToolCallFormat>(i);
        EXPECT_EQ(ferrox::tool_call_format_from_name(ferrox::tool_call_format_name(f)), f);
    }
    EXPECT_STREQ(ferrox::tool_call_format_name(ToolCallFormat::kQwen3Coder), "qwen3_coder");
    EXPECT_FALSE(ferrox::tool_call_format_from_name("nope").has_value());
}

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    EXPECT_TRUE(in.good()) << p;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(Formats, DetectedFromRealTemplates) {
    const std::pair<const char*, ToolCallFormat> kCases[] = {
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", ToolCallFormat::kCommandR7B},
        {"HuggingFaceTB-SmolLM3-3B", ToolCallFormat::kGeneric},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::kHermes},
        {"Qwen-QwQ-32B", ToolCallFormat::kHermes},
        {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::kHermes},
        {"Qwen-Qwen3-0.6B", ToolCallFormat::kHermes},
        {"Qwen3-Coder", ToolCallFormat::kQwen3Coder},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolCallFormat::kDeepSeekV3},
        {"deepseek-ai-DeepSeek-V3.1", ToolCallFormat::kDeepSeekV31},
        {"fireworks-ai-llama-3-firefunction-v2", ToolCallFormat::kGeneric},
        {"google-gemma-2-2b-it", ToolCallFormat::kGeneric},
        {"ibm-granite-granite-3.3-2B-Instruct", ToolCallFormat::kGeneric},
        {"meetkai-functionary-medium-v3.2", ToolCallFormat::kFunctionaryV32},
        {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::kLlama3},
        {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::kLlama3},
        {"microsoft-Phi-3.5-mini-instruct", ToolCallFormat::kGeneric},
        {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::kMistral},
        {"openai-gpt-oss-120b", ToolCallFormat::kHarmony},
    };
    auto dir = std::filesystem::path(FERROX_TESTDATA_DIR) / "chat_templates";
    for (const auto& [name, expected] : kCases) {
        std::string src = read_file(dir / (std::string(name) + ".jinja"));
        ASSERT_FALSE(src.empty()) << name;
        EXPECT_EQ(ferrox::tool_call_format_name(ferrox::detect_tool_call_format(src)),
                  std::string(ferrox::tool_call_format_name(expected)))
            << name;
        OutputFormat f = ferrox::detect_output_format(src);
        EXPECT_EQ(f.tools, expected) << name;
        EXPECT_EQ(f.family, expected) << name;
        EXPECT_EQ(f.think_start,
                  expected == ToolCallFormat::kCommandR7B ? "<|START_THINKING|>" : "<think>");
    }
    std::string smollm2 = read_file(std::filesystem::path(FERROX_SOURCE_DIR) /
                                    "tests/chat/golden/SmolLM2-135M-Instruct.jinja");
    EXPECT_EQ(ferrox::detect_tool_call_format(smollm2), ToolCallFormat::kGeneric);
    EXPECT_EQ(ferrox::detect_output_format("{{ '[THINK]' }}").think_end, "[/THINK]");
}

// The generation prompts jinja2 rendered for the golden tests, with thinking on and off.
TEST(Formats, PromptOpensReasoningOnRenderedPrompts) {
    const std::pair<const char*, bool> kOpens[] = {
        {"Qwen-QwQ-32B", true},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", true},
        {"deepseek-ai-DeepSeek-V3.1", true},
        {"Qwen-Qwen3-0.6B", false},  // Qwen3 lets the model open the block itself
        {"HuggingFaceTB-SmolLM3-3B", false},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", false},
        {"openai-gpt-oss-120b", false},
    };
    auto golden = std::filesystem::path(FERROX_SOURCE_DIR) / "tests/chat/golden";
    auto templates = std::filesystem::path(FERROX_TESTDATA_DIR) / "chat_templates";
    for (const auto& [name, opens] : kOpens) {
        OutputFormat f =
            ferrox::detect_output_format(read_file(templates / (std::string(name) + ".jinja")));
        auto doc = nlohmann::json::parse(read_file(golden / (std::string(name) + ".json")));
        int n_checked = 0;
        for (const auto& c : doc["cases"]) {
            std::string case_name = c["name"].get<std::string>();
            if (!c.contains("expected")) continue;
            std::string prompt = c["expected"].get<std::string>();
            if (case_name == "user_only/thinking") {
                EXPECT_EQ(ferrox::prompt_opens_reasoning(prompt, f), opens) << name;
                ++n_checked;
            } else if (case_name == "user_only/no_thinking") {
                EXPECT_FALSE(ferrox::prompt_opens_reasoning(prompt, f)) << name;
                ++n_checked;
            }
        }
        EXPECT_EQ(n_checked, 2) << name;
    }
}

}  // namespace
