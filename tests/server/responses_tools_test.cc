// The Responses route's helpers: the reasoning seal (SHA-256 and HMAC against their RFC test
// vectors, tampering refused), the tool mappings a replay and the store must agree on, and the
// grammar that constrains custom tools' calls.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "server/openai/reasoning_seal.h"
#include "server/openai/responses_tools.h"

namespace ferrox {
namespace {

std::string hex(const std::string& raw) {
    static const char* k = "0123456789abcdef";
    std::string s;
    for (char c : raw) {
        s += k[(static_cast<unsigned char>(c) >> 4) & 15];
        s += k[static_cast<unsigned char>(c) & 15];
    }
    return s;
}

TEST(ReasoningSeal, Sha256AndHmacMatchTheRfcVectors) {
    EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(hex(sha256(std::string(1000000, 'a'))),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    EXPECT_EQ(hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
              "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(ReasoningSeal, RoundTripsAndRefusesAnythingAltered) {
    const std::string text = "Two plus two is four.\n\"quoted\" and \xc3\xa9";
    const std::string blob = reasoning_seal(text);
    ASSERT_EQ(blob.rfind("fxr1.", 0), 0u);
    EXPECT_EQ(blob.find("Two plus"), std::string::npos);
    EXPECT_EQ(reasoning_unseal(blob).value_or("<none>"), text);
    for (size_t i = 5; i < blob.size(); i += 7) {
        std::string b = blob;
        b[i] = b[i] == 'A' ? 'B' : 'A';
        EXPECT_FALSE(reasoning_unseal(b).has_value()) << i;
    }
    EXPECT_FALSE(reasoning_unseal(blob.substr(0, blob.size() - 4)).has_value());
    EXPECT_FALSE(reasoning_unseal("gAAAAABo-an-openai-blob").has_value());
    EXPECT_FALSE(reasoning_unseal("fxr1.").has_value());
}

TEST(ResponsesTools, ReplayedAndStoredCallsRenderTheSameArguments) {
    const json action = local_shell_action(R"({"working_directory":"/r","command":["ls","-la"],"timeout_ms":5})");
    EXPECT_EQ(dump(action), R"({"type":"exec","command":["ls","-la"],"timeout_ms":5,"working_directory":"/r","env":{},"user":null})");
    // Codex replays the action in its own key order, with nulls: the same arguments.
    const json codex = json::parse(R"({"type":"exec","command":["ls","-la"],"timeout_ms":5,"working_directory":"/r","env":null,"user":null})");
    EXPECT_EQ(local_shell_arguments(action), local_shell_arguments(codex));
    EXPECT_EQ(local_shell_arguments(action), R"({"command":["ls","-la"],"working_directory":"/r","timeout_ms":5})");
    EXPECT_EQ(local_shell_action(R"({"command":"ls | wc"})")["command"], json::parse(R"(["bash","-lc","ls | wc"])"));
    EXPECT_EQ(custom_tool_input(custom_tool_arguments("a\n\"b\"")), "a\n\"b\"");
    EXPECT_EQ(custom_tool_input(R"({"patch":"x"})"), "x");
    EXPECT_EQ(custom_tool_input("not json"), "not json");
}

std::shared_ptr<const grammar::TokenVocab> byte_vocab() {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
    t.push_back("");
    return std::make_shared<grammar::TokenVocab>(std::move(t), std::vector<int32_t>{256});
}

TEST(ResponsesTools, CustomToolGrammarConstrainsCallsAndLeavesTextFree) {
    const json tools = json::parse(R"([
        {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
        {"type": "custom", "name": "code", "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{3}"}},
        {"type": "namespace", "name": "mcp__docs", "tools": [{"type": "function", "name": "search"}]},
        {"type": "web_search"}])");
    Conversation conv;
    ResponsesTools rt;
    ApiError err;
    ASSERT_TRUE(read_responses_tools(&tools, &conv, &rt, &err)) << err.message;
    ASSERT_EQ(conv.tools.size(), 3u);
    EXPECT_EQ(conv.tools[2].name, "mcp__docs__search");
    EXPECT_EQ(rt.find("mcp__docs__search")->ns, "mcp__docs");
    EXPECT_EQ(rt.skipped.size(), 1u);
    std::shared_ptr<const grammar::Grammar> g;
    json notes = json::array();
    ASSERT_TRUE(custom_tools_constraint(conv, rt, ToolCallFormat::kHermes, false, &g, &notes, &err)) << err.message;
    ASSERT_TRUE(g);
    EXPECT_EQ(notes[0]["constrained"], true);
    auto rtm = std::make_shared<grammar::GrammarRuntime>(g, byte_vocab());
    auto ok = [&](const std::string& s) {
        grammar::Matcher m(rtm);
        return m.accept_bytes(s) && m.can_end();
    };
    EXPECT_TRUE(ok("Sure, here it is. <tool_" "call is a tag"));  // text without the marker is free
    EXPECT_TRUE(ok("<tool_call>\n{\"name\": \"code\", \"arguments\": {\"input\": \"123\"}}\n</tool_call>"));
    EXPECT_FALSE(ok("<tool_call>\n{\"name\": \"code\", \"arguments\": {\"input\": \"12a\"}}\n</tool_call>"));
    EXPECT_TRUE(ok("ok <tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}\n</tool_call> then"));
    EXPECT_FALSE(ok("<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    // Forced by name: exactly that call.
    conv.tool_choice = ToolChoice::kNamed;
    conv.tool_choice_name = "code";
    notes = json::array();
    ASSERT_TRUE(custom_tools_constraint(conv, rt, ToolCallFormat::kHermes, false, &g, &notes, &err));
    rtm = std::make_shared<grammar::GrammarRuntime>(g, byte_vocab());
    EXPECT_FALSE(ok("text first"));
    EXPECT_TRUE(ok("<tool_call>\n{\"name\": \"code\", \"arguments\": {\"input\": \"999\"}}\n</tool_call>"));
    // A format without a JSON call under auto: not constrained, and said why.
    conv.tool_choice = ToolChoice::kAuto;
    notes = json::array();
    g = nullptr;
    ASSERT_TRUE(custom_tools_constraint(conv, rt, ToolCallFormat::kQwen3Coder, false, &g, &notes, &err));
    EXPECT_FALSE(g);
    EXPECT_EQ(notes[0]["constrained"], false);
    EXPECT_NE(notes[0]["reason"].get<std::string>().find("qwen3_coder"), std::string::npos);
}

}  // namespace
}  // namespace ferrox
