// JSON Schema -> GBNF: accept/reject against jsonschema-labelled texts (schema_cases.json, made by
// make_schema_cases.py), refused keywords (strict) and the ignored list (non-strict), the corpus
// of tests/grammar/schemas, json_object and choice.

#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace ferrox::grammar {
namespace {

using json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::shared_ptr<const TokenVocab> byte_vocab() {
    static auto v = [] {
        std::vector<std::string> t;
        for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
        t.push_back("");  // end of generation
        return std::make_shared<TokenVocab>(std::move(t), std::vector<int32_t>{256});
    }();
    return v;
}

// A compiled schema and a matcher factory over single bytes.
struct Compiled {
    std::shared_ptr<GrammarRuntime> rt;
    bool matches(std::string_view s) const {
        Matcher m(rt);
        return m.accept_bytes(s) && m.can_end();
    }
    bool prefix_ok(std::string_view s) const {
        Matcher m(rt);
        return m.accept_bytes(s);
    }
};

Compiled compile_gbnf(const std::string& gbnf) {
    auto g = Grammar::parse(gbnf);
    EXPECT_TRUE(g.has_value()) << (g.has_value() ? "" : g.status().message()) << "\n" << gbnf;
    if (!g.has_value()) return {};
    return {std::make_shared<GrammarRuntime>(*g, byte_vocab())};
}

Compiled compile_schema(const json& schema, const JsonSchemaOptions& opts = {}) {
    auto r = json_schema_to_gbnf(schema, opts);
    EXPECT_TRUE(r.has_value()) << (r.has_value() ? "" : r.status().message()) << "\n"
                               << schema.dump();
    if (!r.has_value()) return {};
    return compile_gbnf(*r);
}

// ---- golden: every labelled text ----

TEST(JsonSchemaGolden, AcceptsExactlyTheLabelledTexts) {
    json doc = json::parse(read_file(FERROX_SOURCE_DIR "/tests/grammar/schema_cases.json"));
    ASSERT_GE(doc["schemas"].size(), 60u);
    int n_texts = 0, n_accepted = 0;
    for (const json& c : doc["schemas"]) {
        SCOPED_TRACE(c["name"].get<std::string>());
        Compiled g = compile_schema(c["schema"]);
        if (!g.rt) continue;
        for (const json& t : c["cases"]) {
            std::string text = t["text"].get<std::string>();
            bool want = t["accept"].get<bool>();
            EXPECT_EQ(g.matches(text), want)
                << c["name"].get<std::string>() << ": " << text
                << (t["valid"].get<bool>() ? " (valid)" : " (invalid)");
            ++n_texts;
            n_accepted += want;
        }
    }
    EXPECT_GT(n_texts, 300);
    EXPECT_GT(n_accepted, 100);
}

// ---- grammar properties the golden file does not show ----

TEST(JsonSchema, IncompleteJsonIsAPrefixButNotAMatch) {
    Compiled g =
        compile_schema(json::parse(R"({"type":"object","properties":{"a":{"type":"string"}},
        "required":["a"],"additionalProperties":false})"));
    EXPECT_TRUE(g.prefix_ok(R"({"a": "unfinished)"));
    EXPECT_FALSE(g.matches(R"({"a": "unfinished)"));
    EXPECT_FALSE(g.prefix_ok(R"({"b)"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
    Compiled g = compile_schema(json::parse(R"({"type":"array","items":{"type":"integer"}})"));
    EXPECT_TRUE(g.matches("[1,\n" + std::string(20, ' ') + "2]"));
    EXPECT_FALSE(g.prefix_ok("[1,\n" + std::string(21, ' ')));
    EXPECT_FALSE(g.prefix_ok("[  "));
    EXPECT_FALSE(g.prefix_ok("[1 \n"));
}

TEST(JsonSchema, NumbersHaveBoundedDigits) {
    Compiled g = compile_schema(json::parse(R"({"type":"number"})"));
    EXPECT_TRUE(g.matches("1234567890123456.1234567890123456e123"));
    EXPECT_FALSE(g.prefix_ok("12345678901234567"));
    EXPECT_FALSE(g.prefix_ok("1.12345678901234567"));
}

TEST(JsonSchema, LengthCountsCharactersNotBytes) {
    Compiled g = compile_schema(json::parse(R"({"type":"string","minLength":3,"maxLength":3})"));
    EXPECT_TRUE(g.matches("\"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\""));  // three CJK characters
    EXPECT_TRUE(g.matches("\"a\\u00e9\\\"\""));                          // a, é, "
    EXPECT_TRUE(g.matches("\"\\ud83d\\ude00ab\""));                      // a surrogate pair is one
    EXPECT_FALSE(g.matches("\"\\ud83dab\""));                            // a lone surrogate is not
    EXPECT_FALSE(
        g.matches("\"\xF0\x9F\x98\x80"
                  "a\""));  // two characters
}

TEST(JsonSchema, IntegerRangesAreExact) {
    struct R {
        int lo, hi;
    };
    for (R r : {R{0, 0}, R{-5, 5}, R{7, 1234}, R{-1234, -7}, R{-99, 100}, R{10, 19}, R{100, 999},
                R{0, 9}, R{1, 10}, R{-10, -1}, R{998, 1002}}) {
        SCOPED_TRACE(std::to_string(r.lo) + ".." + std::to_string(r.hi));
        Compiled g =
            compile_schema(json{{"type", "integer"}, {"minimum", r.lo}, {"maximum", r.hi}});
        for (int v = -1300; v <= 1300; ++v) {
            bool in = v >= r.lo && v <= r.hi;
            ASSERT_EQ(g.matches(std::to_string(v)), in) << v;
        }
        EXPECT_FALSE(g.matches("00"));
        EXPECT_FALSE(g.matches("-0"));
    }
}

TEST(JsonSchema, OpenIntegerRanges) {
    Compiled ge = compile_schema(json::parse(R"({"type":"integer","minimum":-12})"));
    Compiled lt = compile_schema(json::parse(R"({"type":"integer","exclusiveMaximum":250})"));
    for (int v = -400; v <= 400; ++v) {
        ASSERT_EQ(ge.matches(std::to_string(v)), v >= -12) << v;
        ASSERT_EQ(lt.matches(std::to_string(v)), v < 250) << v;
    }
    EXPECT_TRUE(ge.matches("9999999999999999"));
    EXPECT_TRUE(lt.matches("-9999999999999999"));
}

TEST(JsonSchema, NumberRangesAgreeWithArithmetic) {
    Compiled g =
        compile_schema(json::parse(R"({"type":"number","minimum":-3,"exclusiveMaximum":12})"));
    for (int tenths = -60; tenths <= 150; ++tenths) {
        double v = tenths / 10.0;
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", v);
        std::string s = buf;
        if (s == "-0.0") continue;
        ASSERT_EQ(g.matches(s), v >= -3 && v < 12) << s;
    }
}

// ---- refused and ignored keywords ----

TEST(JsonSchema, StrictRefusesWhatItCannotEnforceAndNamesIt) {
    const char* cases[][2] = {
        {R"j({"type":"integer","multipleOf":3})j", "multipleOf"},
        {R"j({"type":"array","uniqueItems":true})j", "uniqueItems"},
        {R"j({"type":"object","patternProperties":{"^x":{}}})j", "patternProperties"},
        {R"j({"type":"object","propertyNames":{"maxLength":3}})j", "propertyNames"},
        {R"j({"not":{"type":"string"}})j", "not"},
        {R"j({"if":{"type":"string"},"then":{"maxLength":2}})j", "if"},
        {R"j({"type":"object","minProperties":2})j", "minProperties"},
        {R"j({"type":"object","maxProperties":2})j", "maxProperties"},
        {R"j({"type":"object","dependentRequired":{"a":["b"]}})j", "dependentRequired"},
        {R"j({"type":"array","contains":{"type":"integer"}})j", "contains"},
        {R"j({"type":"number","minimum":0.5})j", "minimum"},
        {R"j({"type":"number","exclusiveMaximum":2.25})j", "exclusiveMaximum"},
        {R"j({"type":"string","format":"uri"})j", "format"},
        {R"j({"type":"string","pattern":"(a)\\1"})j", "pattern"},
        {R"j({"type":"string","pattern":"a(?=b)"})j", "pattern"},
        {R"j({"type":"string","format":"email","maxLength":20})j", "maxLength"},
        {R"j({"type":"string","pattern":"^a+$","minLength":2})j", "minLength"},
        {R"j({"$ref":"https://example.com/schema.json"})j", "$ref"},
        {R"j({"type":"object","unevaluatedProperties":{"type":"string"}})j",
         "unevaluatedProperties"},
        {R"j({"type":"object","properties":{"a":{"type":"integer","multipleOf":2}}})j",
         "multipleOf"},
    };
    for (auto& c : cases) {
        SCOPED_TRACE(c[0]);
        auto r = json_schema_to_gbnf(json::parse(c[0]));
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(r.status().message().find(std::string("'") + c[1] + "'"), std::string::npos)
            << r.status().message();
    }
}

TEST(JsonSchema, ErrorsSayWhere) {
    auto r = json_schema_to_gbnf(
        json::parse(R"({"type":"object","properties":{"x":{"type":"integer","multipleOf":5}}})"));
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("#/properties/x"), std::string::npos)
        << r.status().message();
}

TEST(JsonSchema, NonStrictIgnoresAndListsThem) {
    JsonSchemaOptions lax;
    lax.strict = false;
    json s = json::parse(R"({"type":"object","properties":{
        "n":{"type":"integer","multipleOf":3},
        "tags":{"type":"array","items":{"type":"string","format":"uri"},"uniqueItems":true}},
        "required":["n"],"additionalProperties":false,"minProperties":2})");
    auto r = json_schema_compile(s, lax);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    std::vector<std::string> want = {"minProperties at #", "multipleOf at #/properties/n",
                                     "uniqueItems at #/properties/tags",
                                     "format at #/properties/tags/items"};
    for (const std::string& w : want) {
        EXPECT_NE(std::find(r->ignored.begin(), r->ignored.end(), w), r->ignored.end()) << w;
    }
    EXPECT_EQ(r->ignored.size(), want.size());
    Compiled g = compile_gbnf(r->gbnf);
    EXPECT_TRUE(g.matches(R"({"n": 4, "tags": ["a", "a"]})"));  // looser where ignored
    EXPECT_FALSE(g.matches(R"({"n": "4"})"));                   // the rest still holds
}

TEST(JsonSchema, AnnotationsAndTrivialKeywordsAreFine) {
    json s = json::parse(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x",
        "title":"T","description":"D","$comment":"c","type":"object","deprecated":false,
        "properties":{"a":{"type":"integer","default":1,"examples":[1,2],"readOnly":true,
                           "writeOnly":false,"multipleOf":1}},
        "uniqueItems":false,"minProperties":0,"x-vendor":{"anything":true}})");
    auto r = json_schema_compile(s);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    EXPECT_TRUE(r->ignored.empty());
}

TEST(JsonSchema, UnsatisfiableSchemasAreErrors) {
    for (const char* s : {R"(false)", R"({"type":"string","minLength":3,"maxLength":2})",
                          R"({"type":"integer","minimum":5,"maximum":4})",
                          R"({"allOf":[{"type":"string"},{"type":"integer"}]})",
                          R"({"type":"object","properties":{"a":false},"required":["a"]})",
                          R"({"type":"string","enum":[1,2]})"}) {
        SCOPED_TRACE(s);
        auto r = json_schema_to_gbnf(json::parse(s));
        ASSERT_FALSE(r.has_value());
        EXPECT_NE(r.status().message().find("accepts no value"), std::string::npos)
            << r.status().message();
    }
    // An unsatisfiable branch of anyOf is dropped, not an error.
    Compiled g = compile_schema(
        json::parse(R"({"type":"string","anyOf":[{"type":"integer"},{"maxLength":1}]})"));
    EXPECT_TRUE(g.matches(R"("a")"));
    EXPECT_FALSE(g.matches("1"));
}

TEST(JsonSchema, MalformedSchemasAreErrors) {
    for (const char* s : {R"({"type":"strin"})", R"({"$ref":"#/$defs/missing"})",
                          R"({"required":"a"})", R"({"type":"string","maxLength":-1})", R"(3)"}) {
        SCOPED_TRACE(s);
        auto r = json_schema_to_gbnf(json::parse(s));
        EXPECT_FALSE(r.has_value());
    }
}

TEST(JsonSchema, ExtraPropertiesOption) {
    json s = json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
    JsonSchemaOptions closed;
    closed.extra_properties = false;
    EXPECT_TRUE(compile_schema(s).matches(R"({"a": 1, "b": 2})"));
    EXPECT_FALSE(compile_schema(s, closed).matches(R"({"a": 1, "b": 2})"));
    EXPECT_TRUE(compile_schema(s, closed).matches(R"({"a": 1})"));
}

TEST(JsonSchema, DeepRecursionAndDepthLimit) {
    Compiled g = compile_schema(json::parse(
        R"({"$defs":{"l":{"type":"array","items":{"$ref":"#/$defs/l"}}},"$ref":"#/$defs/l"})"));
    EXPECT_TRUE(g.matches(std::string(40, '[') + std::string(40, ']')));
    EXPECT_FALSE(g.matches(std::string(40, '[') + std::string(39, ']')));
    json deep = json{{"type", "string"}};
    for (int i = 0; i < 200; ++i) deep = json{{"type", "array"}, {"items", deep}};
    EXPECT_FALSE(json_schema_to_gbnf(deep).has_value());
}

// ---- the corpus (for the end-to-end test) ----

std::vector<std::filesystem::path> corpus_files() {
    std::vector<std::filesystem::path> files;
    for (const auto& e :
         std::filesystem::directory_iterator(FERROX_SOURCE_DIR "/tests/grammar/schemas")) {
        if (e.path().extension() == ".json") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

TEST(JsonSchemaCorpus, EverySchemaCompilesStrictly) {
    auto files = corpus_files();
    ASSERT_GE(files.size(), 40u);
    for (const auto& f : files) {
        SCOPED_TRACE(f.filename().string());
        json doc = json::parse(read_file(f.string()));
        auto r = json_schema_compile(doc["schema"]);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        EXPECT_TRUE(r->ignored.empty());
        Compiled g = compile_gbnf(r->gbnf);
        ASSERT_TRUE(g.rt);
        for (const json& v : doc.value("valid", json::array())) {
            EXPECT_TRUE(g.matches(v.get<std::string>())) << v.get<std::string>();
        }
        for (const json& v : doc.value("invalid", json::array())) {
            EXPECT_FALSE(g.matches(v.get<std::string>())) << v.get<std::string>();
        }
    }
}

TEST(JsonSchemaCorpus, LargeSchemaCompilesQuickly) {
    json doc =
        json::parse(read_file(FERROX_SOURCE_DIR "/tests/grammar/schemas/50_large_nested.json"));
    auto t0 = std::chrono::steady_clock::now();
    auto r = json_schema_to_gbnf(doc["schema"]);
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_TRUE(r.has_value()) << r.status().message();
    auto g = Grammar::parse(*r);
    auto t2 = std::chrono::steady_clock::now();
    ASSERT_TRUE(g.has_value()) << g.status().message();
    double ms_convert = std::chrono::duration<double, std::milli>(t1 - t0).count();
    double ms_parse = std::chrono::duration<double, std::milli>(t2 - t1).count();
    std::printf("50-property nested schema: to GBNF %.2f ms, GBNF compile %.2f ms, %d rules\n",
                ms_convert, ms_parse, (*g)->n_rules());
    // Not a timing test (machines are shared): a bound that only a pathological blow-up breaks.
    EXPECT_LT(ms_convert + ms_parse, 2000.0);
}

// ---- json_object, any value, choice ----

TEST(JsonObject, AnyObjectOnly) {
    Compiled g = compile_gbnf(json_object_gbnf());
    EXPECT_TRUE(g.matches("{}"));
    EXPECT_TRUE(g.matches(R"({"a": [1, {"b": null}], "c": "d"})"));
    EXPECT_FALSE(g.matches("[]"));
    EXPECT_FALSE(g.matches("\"s\""));
    EXPECT_FALSE(g.matches(R"({"a": 1,})"));
    Compiled v = compile_gbnf(json_value_gbnf());
    EXPECT_TRUE(v.matches("[]"));
    EXPECT_TRUE(v.matches("-1.5e3"));
}

TEST(Choice, ExactlyOneOfTheStrings) {
    auto r = choice_to_gbnf({"yes", "no", "maybe \"so\"", "n"});
    ASSERT_TRUE(r.has_value());
    Compiled g = compile_gbnf(*r);
    EXPECT_TRUE(g.matches("yes"));
    EXPECT_TRUE(g.matches("n"));
    EXPECT_TRUE(g.matches("no"));
    EXPECT_TRUE(g.matches("maybe \"so\""));
    EXPECT_FALSE(g.matches("ye"));
    EXPECT_FALSE(g.matches("yesno"));
    EXPECT_FALSE(g.matches("\"yes\""));
    EXPECT_FALSE(choice_to_gbnf({}).has_value());
}

}  // namespace
}  // namespace ferrox::grammar
