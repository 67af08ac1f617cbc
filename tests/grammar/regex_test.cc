// Regex -> GBNF: whole-text matching (guided_regex), search semantics inside JSON strings
// (JSON Schema `pattern`), and the features refused by name.

#include "grammar/regex.h"

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

struct Rx {
    std::shared_ptr<GrammarRuntime> rt;
    std::string gbnf;
    bool matches(std::string_view s) const {
        Matcher m(rt);
        return m.accept_bytes(s) && m.can_end();
    }
};

Rx compile(std::string_view pattern, bool search = false, bool json_string = false) {
    RegexOptions o;
    o.search = search;
    o.json_string = json_string;
    auto r = regex_to_gbnf(pattern, o);
    EXPECT_TRUE(r.has_value()) << pattern << ": " << (r.has_value() ? "" : r.status().message());
    if (!r.has_value()) return {};
    auto g = Grammar::parse(*r);
    EXPECT_TRUE(g.has_value()) << (g.has_value() ? "" : g.status().message()) << "\n" << *r;
    if (!g.has_value()) return {};
    return {std::make_shared<GrammarRuntime>(*g, byte_vocab()), *r};
}

struct Case {
    const char* pattern;
    std::vector<const char*> yes, no;
};

TEST(Regex, WholeTextMatching) {
    const std::vector<Case> cases = {
        {"abc", {"abc"}, {"ab", "abcd", "", "xabc"}},
        {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
        {"colou?r", {"color", "colour"}, {"colouur", "colr"}},
        {"a*b+", {"b", "aab", "abbb"}, {"", "a", "ba"}},
        {"x{3}", {"xxx"}, {"xx", "xxxx"}},
        {"x{2,}", {"xx", "xxxxx"}, {"x"}},
        {"x{1,3}y", {"xy", "xxxy"}, {"y", "xxxxy"}},
        {"x{0}y", {"y"}, {"xy"}},
        {"a+?b*?", {"a", "aabb"}, {"b"}},
        {"(ab)+", {"ab", "abab"}, {"aba", ""}},
        {"(?:ab|cd){2}", {"abcd", "cdcd"}, {"ab", "abcdab"}},
        {"(?<year>\\d{4})-(?<m>\\d\\d)", {"2024-05"}, {"24-05", "2024-5"}},
        {"[a-c]+", {"abc", "cab"}, {"abd", ""}},
        {"[^a-c]", {"d", "Z", "\xC3\xA9"}, {"a", "b", ""}},
        {"[-a]", {"-", "a"}, {"b"}},
        {"[a-]", {"-", "a"}, {"b"}},
        {"\\d\\D", {"1a", "9-"}, {"12", "ab"}},
        {"\\w+", {"a_1Z"}, {"a-b", ""}},
        {"\\W", {"-", " "}, {"a", "_"}},
        {"a\\sb", {"a b", "a\tb", "a\nb"}, {"ab", "a_b"}},
        {"\\S+", {"abc"}, {"a b"}},
        {"[\\d.]+", {"1.5", "..."}, {"1,5"}},
        {"[^\\d]", {"a"}, {"5"}},
        {"a.c",
         {"abc", "a.c",
          "a\xE2\x82\xAC"
          "c"},
         {"a\nc", "ac"}},
        {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/\\^\\$", {".*+?()[]{}|\\/^$"}, {}},
        {"\\x41\\u00e9\\u{1F600}\\t", {"A\xC3\xA9\xF0\x9F\x98\x80\t"}, {"A\xC3\xA9"}},
        {"^abc$", {"abc"}, {"abcd"}},
        {"^a|b$", {"a", "b"}, {"ab"}},
        {"a{,2}", {"a{,2}"}, {"a", "aa"}},  // not a quantifier in ECMAScript: literal text
        {"\xE6\x97\xA5+", {"\xE6\x97\xA5\xE6\x97\xA5"}, {"\xE6\x97"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.pattern);
        Rx rx = compile(c.pattern);
        ASSERT_TRUE(rx.rt);
        for (const char* s : c.yes)
            EXPECT_TRUE(rx.matches(s)) << "should match: " << s << "\n" << rx.gbnf;
        for (const char* s : c.no)
            EXPECT_FALSE(rx.matches(s)) << "should not match: " << s << "\n" << rx.gbnf;
    }
}

TEST(Regex, SearchSemantics) {
    Rx any = compile("ab", true);
    EXPECT_TRUE(any.matches("ab"));
    EXPECT_TRUE(any.matches("xxabyy"));
    EXPECT_TRUE(any.matches("a\nab"));
    EXPECT_FALSE(any.matches("a b"));
    Rx start = compile("^ab", true);
    EXPECT_TRUE(start.matches("abyy"));
    EXPECT_FALSE(start.matches("xab"));
    Rx end = compile("ab$", true);
    EXPECT_TRUE(end.matches("xxab"));
    EXPECT_FALSE(end.matches("abx"));
    Rx both = compile("^(a|b)$|^c", true);
    EXPECT_TRUE(both.matches("a"));
    EXPECT_TRUE(both.matches("cdef"));
    EXPECT_FALSE(both.matches("ab"));
    Rx empty = compile("", true);
    EXPECT_TRUE(empty.matches(""));
    EXPECT_TRUE(empty.matches("anything"));
}

TEST(Regex, JsonStringMatchesTheDecodedValue) {
    Rx q = compile("^a\"b\\\\c\\nd$", false, true);
    EXPECT_TRUE(q.matches("a\\\"b\\\\c\\nd"));
    EXPECT_FALSE(q.matches("a\"b\\c\nd"));  // raw characters JSON must escape
    Rx neg = compile("^[^x]+$", false, true);
    EXPECT_TRUE(neg.matches("ab\\\"\\\\\\n\\u0001"));
    EXPECT_FALSE(neg.matches("a\"b"));
    EXPECT_FALSE(neg.matches("x"));
    Rx dot = compile("^.$", false, true);
    EXPECT_TRUE(dot.matches("\\t"));
    EXPECT_FALSE(dot.matches("\\n"));  // '.' excludes line terminators
    Rx search = compile("z", true, true);
    EXPECT_TRUE(search.matches("\\u0041\\\"z\\n"));  // padding may use any escape
    EXPECT_FALSE(search.matches("\"z"));
}

TEST(Regex, RefusedFeaturesAreNamed) {
    const char* cases[][2] = {
        {"(a)\\1", "backreference"},
        {"(?<n>a)\\k<n>", "backreference"},
        {"a(?=b)", "lookahead"},
        {"a(?!b)", "lookahead"},
        {"(?<=a)b", "lookbehind"},
        {"(?<!a)b", "lookbehind"},
        {"\\bword", "word boundary"},
        {"\\p{L}", "Unicode property"},
        {"(?i)abc", "flags"},
        {"a^b", "'^'"},
        {"a$b", "'$'"},
        {"(a|b", "missing ')'"},
        {"a)", "unmatched"},
        {"[abc", "missing ']'"},
        {"*a", "nothing to repeat"},
        {"a**", "nothing to repeat"},
        {"a{3,2}", "out of order"},
        {"[z-a]", "out of order"},
        {"a{20000}", "repetition"},
        {"\\", "ends with"},
        {"[]", "matches nothing"},
    };
    for (auto& c : cases) {
        SCOPED_TRACE(c[0]);
        auto r = regex_to_gbnf(c[0]);
        ASSERT_FALSE(r.has_value());
        EXPECT_NE(r.status().message().find(c[1]), std::string::npos) << r.status().message();
    }
}

TEST(Regex, LiteralsEscapeForGbnf) {
    EXPECT_EQ(gbnf_literal("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    EXPECT_EQ(gbnf_literal(std::string("\x01", 1)), "\"\\x01\"");
}

}  // namespace
}  // namespace ferrox::grammar
