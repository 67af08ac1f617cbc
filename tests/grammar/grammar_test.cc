// GBNF parsing, the byte matcher and token masks (against a brute-force check).

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace ferrox::grammar {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& g) {
    auto r = Grammar::parse(g);
    EXPECT_TRUE(r.has_value()) << (r.has_value() ? "" : r.status().message());
    return r.has_value() ? *r : nullptr;
}

std::shared_ptr<const TokenVocab> byte_vocab() {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
    t.push_back("");  // an end-of-generation token
    return std::make_shared<TokenVocab>(std::move(t), std::vector<int32_t>{256});
}

// Whether the grammar matches `s` completely.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    Matcher m(std::make_shared<GrammarRuntime>(g, byte_vocab()));
    return m.accept_bytes(s) && m.can_end();
}
// Whether `s` is a prefix of something the grammar matches.
bool prefix_ok(const std::shared_ptr<const Grammar>& g, std::string_view s) {
    Matcher m(std::make_shared<GrammarRuntime>(g, byte_vocab()));
    return m.accept_bytes(s);
}

TEST(Gbnf, LiteralsClassesAndRepetition) {
    auto g = compile("root ::= \"a\" [b-d]+ (\"x\" | \"yz\")?  # trailing comment\n");
    ASSERT_TRUE(g);
    EXPECT_TRUE(matches(g, "ab"));
    EXPECT_TRUE(matches(g, "abcdx"));
    EXPECT_TRUE(matches(g, "adyz"));
    EXPECT_FALSE(matches(g, "a"));      // [b-d]+ needs one
    EXPECT_FALSE(matches(g, "abe"));
    EXPECT_FALSE(matches(g, "aby"));    // "yz" unfinished
    EXPECT_TRUE(prefix_ok(g, "aby"));
    EXPECT_FALSE(matches(g, "abxx"));
}

TEST(Gbnf, CountedRepetition) {
    auto g = compile("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,}");
    ASSERT_TRUE(g);
    EXPECT_FALSE(matches(g, "abbbc"));
    EXPECT_TRUE(matches(g, "aabbbc"));
    EXPECT_TRUE(matches(g, "aaaabbbccc"));
    EXPECT_FALSE(matches(g, "aaaaabbbc"));
    EXPECT_FALSE(matches(g, "aabbc"));
    EXPECT_FALSE(matches(g, "aabbb"));
}

TEST(Gbnf, NegatedUnicodeClassesMatchWholeCharactersAcrossSplits) {
    auto g = compile(R"(root ::= "\"" [^"\\\n]* "\"")");
    ASSERT_TRUE(g);
    EXPECT_TRUE(matches(g, "\"h\xc3\xa9llo \xf0\x9f\x98\x80 \xe4\xb8\xad\""));  // é, 😀, 中
    EXPECT_FALSE(matches(g, "\"a\"b\""));
    EXPECT_FALSE(matches(g, "\"a\nb\""));
    EXPECT_FALSE(matches(g, "\"\xff\""));         // not UTF-8
    EXPECT_FALSE(matches(g, "\"\xed\xa0\x80\""));  // a surrogate
    EXPECT_FALSE(matches(g, "\"\xc0\xaf\""));      // overlong
    // The 4-byte character fed one byte at a time.
    Matcher m(std::make_shared<GrammarRuntime>(g, byte_vocab()));
    for (char c : std::string("\"\xf0\x9f\x98\x80\"")) ASSERT_TRUE(m.accept_bytes(std::string(1, c)));
    EXPECT_TRUE(m.can_end());
    // A class with a range above ASCII and an escape.
    auto h = compile(R"(root ::= [\u00e0-\u00ff\x41]+)");
    ASSERT_TRUE(h);
    EXPECT_TRUE(matches(h, "A\xc3\xa9\xc3\xbf"));
    EXPECT_FALSE(matches(h, "\xc3\x9f"));  // ß is U+00DF
}

TEST(Gbnf, RecursionAndMultilineRules) {
    auto g = compile(
        "root ::= item (\",\" item)*\n"
        "item ::= \"(\" inner \")\"\n"
        "  | [0-9]+\n"
        "inner ::= (\n"
        "    item\n"
        "  | \"\"\n"
        ")\n");
    ASSERT_TRUE(g);
    EXPECT_TRUE(matches(g, "((((1))))"));
    EXPECT_TRUE(matches(g, "(),12,(3)"));
    EXPECT_FALSE(matches(g, "((1)"));
    EXPECT_FALSE(matches(g, "(1))"));
    EXPECT_TRUE(prefix_ok(g, "((((((("));
}

TEST(Gbnf, JsonGrammar) {
    auto g = compile(R"(
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ("," ws string ws ":" ws value ws)* )? "}"
array  ::= "[" ws ( value ws ("," ws value ws)* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,15})?
ws     ::= [ \t\n]{0,20}
)");
    ASSERT_TRUE(g);
    EXPECT_TRUE(matches(g, R"({"a": [1, 2.5, -3e10, {"b": null}], "c\u00e9": "x\"y"})"));
    EXPECT_TRUE(matches(g, "[[[[[[]]]]]]"));
    EXPECT_FALSE(matches(g, R"({"a": 01})"));
    EXPECT_FALSE(matches(g, R"({"a" 1})"));
    EXPECT_FALSE(matches(g, R"(["\x"])"));
    EXPECT_FALSE(matches(g, "[1,]"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
    auto err = [](const std::string& g) {
        auto r = Grammar::parse(g);
        return r.has_value() ? std::string("(accepted)") : r.status().message();
    };
    EXPECT_NE(err("root ::= foo").find("'foo' is used but never defined"), std::string::npos);
    EXPECT_NE(err("start ::= \"a\"").find("no rule 'root'"), std::string::npos);
    EXPECT_NE(err("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
    // Left recursion hidden behind a rule that can match nothing.
    EXPECT_NE(err("root ::= e root \"a\" | \"b\"\ne ::= \"x\"?").find("left-recursive"), std::string::npos);
    EXPECT_NE(err("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);
    EXPECT_NE(err("root ::= \"abc").find("unterminated string"), std::string::npos);
    EXPECT_NE(err("root ::= [a-").find("line 1"), std::string::npos);
    EXPECT_NE(err("root ::= \"a\" \\q").find("line 1"), std::string::npos);
    EXPECT_NE(err("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
    EXPECT_NE(err("root ::= [z-a]").find("out of order"), std::string::npos);
    EXPECT_NE(err("root ::= \"a\"{3,2}").find("n < m"), std::string::npos);
    EXPECT_NE(err("root ::= \"a\"{99999999}").find("repetition count"), std::string::npos);
    EXPECT_NE(err("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
    EXPECT_NE(err("root ::= \"a\"\n\nx ::= \"b\" )").find("line 3"), std::string::npos);
    EXPECT_NE(err("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')')).find("nested too deep"),
              std::string::npos);
    // A long chain of rules is not recursion over the C++ stack.
    std::string chain = "root ::= r0\n";
    for (int i = 0; i < 20000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
    chain += "r20000 ::= \"z\"\n";
    auto g = Grammar::parse(chain);
    ASSERT_TRUE(g.has_value()) << g.status().message();
    EXPECT_TRUE(matches(*g, "z"));
}

// Token masks agree with advancing each token's bytes one by one, on random walks.
TEST(TokenMask, EqualsBruteForceOnRandomStates) {
    std::mt19937 rng(7);
    // Tokens: single bytes, ASCII words, JSON punctuation runs, pieces of multi-byte
    // characters (so characters split across tokens) and a few empty ones.
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    const std::string alphabet = "{}[]\":, abcnrtule0123456789.-\\\xc3\xa9\xe4\xb8\xad";
    for (int i = 0; i < 3000; ++i) {
        std::string t;
        const int n = 1 + static_cast<int>(rng() % 6);
        for (int k = 0; k < n; ++k) t += alphabet[rng() % alphabet.size()];
        toks.push_back(t);
    }
    toks.push_back("\"name\": \"");
    toks.push_back("");
    toks.push_back("true");
    toks.push_back("null}");
    const int32_t eos = static_cast<int32_t>(toks.size());
    toks.push_back("<eos>");
    auto vocab = std::make_shared<TokenVocab>(toks, std::vector<int32_t>{eos});
    auto g = compile(R"(
root   ::= object
value  ::= object | array | string | [0-9]+ | "true" | "null"
object ::= "{" ( string ":" " "? value ("," " "? string ":" " "? value)* )? "}"
array  ::= "[" ( value ("," " "? value)* )? "]"
string ::= "\"" ( [^"\\] | "\\" ["\\nrt] )* "\""
)");
    ASSERT_TRUE(g);
    auto rt = std::make_shared<GrammarRuntime>(g, vocab);
    int checked = 0, ended = 0;
    for (int walk = 0; walk < 40; ++walk) {
        GrammarRuntime::State s = rt->initial();
        for (int step = 0; step < 60; ++step) {
            const TokenMask& m = rt->mask(s);
            std::vector<int32_t> allowed;
            for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
                bool brute;
                if (id == eos) {
                    brute = GrammarRuntime::can_end(s);
                } else {
                    brute = !toks[id].empty() && !rt->advance(s, toks[id]).empty();
                }
                ASSERT_EQ(m.test(id), brute) << "token " << id << " '" << toks[id] << "' walk " << walk;
                if (brute) allowed.push_back(id);
                ++checked;
            }
            ASSERT_FALSE(allowed.empty());
            const int32_t pick = allowed[rng() % allowed.size()];
            if (pick == eos) {
                ++ended;
                break;
            }
            s = rt->advance(s, toks[pick]);
        }
    }
    EXPECT_GT(checked, 100000);
    EXPECT_GT(rt->n_cached_masks(), 10u);
    (void)ended;
}

TEST(TokenMask, MatcherMasksLogitsAndEndsOnlyWhereComplete) {
    std::vector<std::string> toks = {"ye", "s", "yes", "no", "n", "o", "x", ""};
    auto vocab = std::make_shared<TokenVocab>(toks, std::vector<int32_t>{7});
    auto g = compile("root ::= \"yes\" | \"no\"");
    Matcher m(std::make_shared<GrammarRuntime>(g, vocab));
    std::vector<float> lg(8, 1.0f);
    m.apply(lg);
    EXPECT_EQ(lg[0], 1.0f);             // "ye"
    EXPECT_TRUE(std::isinf(lg[1]));     // "s"
    EXPECT_EQ(lg[2], 1.0f);             // "yes"
    EXPECT_EQ(lg[3], 1.0f);
    EXPECT_EQ(lg[4], 1.0f);
    EXPECT_TRUE(std::isinf(lg[5]));
    EXPECT_TRUE(std::isinf(lg[7]));     // end of generation: not yet
    EXPECT_FALSE(m.accept_token(7));
    EXPECT_TRUE(m.accept_token(0));
    EXPECT_FALSE(m.can_end());
    EXPECT_FALSE(m.accept_token(3));
    EXPECT_TRUE(m.accept_token(1));
    EXPECT_TRUE(m.must_end());
    EXPECT_EQ(m.mask().count(), 1);
    EXPECT_TRUE(m.mask().test(7));
}

}  // namespace
}  // namespace ferrox::grammar
