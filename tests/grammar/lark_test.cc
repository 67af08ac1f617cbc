// Lark -> GBNF: the freeform-tool grammars of the Responses API (a patch format like Codex's
// apply_patch), plain and inside a JSON string, and the features refused by name.

#include "grammar/lark.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace ferrox::grammar {
namespace {

std::shared_ptr<const TokenVocab> byte_vocab() {
    static auto v = [] {
        std::vector<std::string> t;
        for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
        t.push_back("");
        return std::make_shared<TokenVocab>(std::move(t), std::vector<int32_t>{256});
    }();
    return v;
}

struct Lk {
    std::shared_ptr<GrammarRuntime> rt;
    bool matches(std::string_view s) const {
        Matcher m(rt);
        return m.accept_bytes(s) && m.can_end();
    }
};

Lk compile(std::string_view lark, bool json_string = false) {
    LarkOptions o;
    o.json_string = json_string;
    auto r = lark_to_gbnf(lark, o);
    EXPECT_TRUE(r.has_value()) << (r.has_value() ? "" : r.status().message());
    if (!r.has_value()) return {};
    auto g = Grammar::parse(*r);
    EXPECT_TRUE(g.has_value()) << *r << "\n" << (g.has_value() ? "" : g.status().message());
    if (!g.has_value()) return {};
    return {std::make_shared<GrammarRuntime>(*g, byte_vocab())};
}

// A patch envelope in the shape of Codex's apply_patch grammar (written for this test).
constexpr const char* kPatch = R"(start: begin hunk+ end
begin: "*** Begin Patch" LF
end: "*** End Patch" LF?
hunk: add | delete | update
add: "*** Add File: " filename LF add_line+
delete: "*** Delete File: " filename LF
update: "*** Update File: " filename LF change?
# a comment
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
change: (context | change_line)+
context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
%import common.LF
)";

TEST(Lark, PatchGrammarAcceptsPatchesAndRejectsOtherText) {
    Lk g = compile(kPatch);
    EXPECT_TRUE(g.matches("*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"));
    EXPECT_TRUE(g.matches("*** Begin Patch\n*** Update File: b.py\n@@ def f\n-x = 1\n+x = 2\n*** End Patch"));
    EXPECT_TRUE(g.matches("*** Begin Patch\n*** Delete File: c\n*** Delete File: d\n*** End Patch\n"));
    EXPECT_FALSE(g.matches("*** Begin Patch\n*** End Patch\n"));  // hunk+
    EXPECT_FALSE(g.matches("*** Begin Patch\n*** Add File: a.txt\nhello\n*** End Patch\n"));
    EXPECT_FALSE(g.matches("diff --git a/x b/x\n"));
}

TEST(Lark, InsideAJsonStringNewlinesAndQuotesAreEscapes) {
    Lk g = compile(kPatch, true);
    EXPECT_TRUE(g.matches(R"(*** Begin Patch\n*** Add File: a.txt\n+say \"hi\"\n*** End Patch\n)"));
    EXPECT_FALSE(g.matches("*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch\n"));  // raw newlines
    EXPECT_FALSE(g.matches(R"(*** Begin Patch\n*** Add File: a.txt\n+say "hi"\n*** End Patch\n)"));
}

TEST(Lark, RangesRepeatsOptionalsImportsAndContinuationLines) {
    Lk g = compile(R"(
start: greeting ("," NAME)~1..2 [END]
     | DIGIT~3
greeting: "hi" | "hello"
NAME: "a".."z"+
END: "!"
%import common (DIGIT)
)");
    EXPECT_TRUE(g.matches("hi,bob"));
    EXPECT_TRUE(g.matches("hello,ann,eve!"));
    EXPECT_TRUE(g.matches("123"));
    EXPECT_FALSE(g.matches("hi"));
    EXPECT_FALSE(g.matches("hi,a,b,c"));
    EXPECT_FALSE(g.matches("12"));
    EXPECT_FALSE(g.matches("hi,Bob"));
    Lk q = compile("start: \" \"..\"~\"+\n", true);  // the range includes '"' and '\'
    EXPECT_TRUE(q.matches(R"(a\"b\\c)"));
    EXPECT_FALSE(q.matches(R"(a"b)"));
}

TEST(Lark, RefusesWhatItCannotSayByName) {
    auto msg = [](std::string_view lark) {
        auto r = lark_to_gbnf(lark);
        return r.has_value() ? std::string("accepted") : r.status().message();
    };
    EXPECT_NE(msg("start: WORD\n%ignore \" \"\n%import common.WORD\n").find("%ignore"), std::string::npos);
    EXPECT_NE(msg("start: \"a\"i\n").find("flags"), std::string::npos);
    EXPECT_NE(msg("start: /a/i\n").find("flags"), std::string::npos);
    EXPECT_NE(msg("start: x\n").find("'x' is used but not defined"), std::string::npos);
    EXPECT_NE(msg("begin: \"a\"\n").find("no 'start'"), std::string::npos);
    EXPECT_NE(msg("start: \"a\"\nstart: \"b\"\n").find("defined twice"), std::string::npos);
    EXPECT_NE(msg("start: \"a\n").find("line 1"), std::string::npos);
    EXPECT_NE(msg("start: /(?<=a)b/\n").find("line 1"), std::string::npos);
    EXPECT_NE(msg("%import common.NOPE\nstart: NOPE\n").find("NOPE"), std::string::npos);
}

}  // namespace
}  // namespace ferrox::grammar
