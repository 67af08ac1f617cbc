// Unit tests of the Jinja engine: Python semantics spot checks (expected values rendered by
// jinja2 through scripts/golden/chat_templates.py into tests/chat/jinja_semantics.json),
// line-numbered errors, and the limits that stop hostile templates.
#include "chat/jinja.h"

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace {

using ferrox::JinjaOptions;
using ferrox::JinjaTemplate;
using ferrox::StatusCode;

ferrox::Expected<std::string> render(const std::string& src, const std::string& ctx = "{}",
                                     const JinjaOptions& opts = {}) {
    auto t = JinjaTemplate::parse(src, opts);
    if (!t.has_value()) return t.status();
    return t->render_json(ctx);
}

std::string ok(const std::string& src, const std::string& ctx = "{}") {
    auto r = render(src, ctx);
    EXPECT_TRUE(r.has_value()) << src << " -> " << r.status().to_string();
    return r.has_value() ? *r : std::string();
}

TEST(JinjaSemantics, MatchesJinja2) {
    std::ifstream in(std::filesystem::path(FERROX_SOURCE_DIR) / "tests/chat/jinja_semantics.json");
    std::stringstream ss;
    ss << in.rdbuf();
    auto doc = nlohmann::ordered_json::parse(ss.str());
    JinjaOptions opts;
    opts.fixed_now_unix = doc["fixed_now_unix"].get<int64_t>();
    int n = 0;
    for (const auto& c : doc["cases"]) {
        ++n;
        std::string src = c["template"].get<std::string>();
        auto r = render(src, c["context"].dump(), opts);
        if (c.contains("error")) {
            EXPECT_FALSE(r.has_value()) << src << "\n  jinja2: " << c["error"].get<std::string>()
                                        << "\n  ferrox rendered: " << (r.has_value() ? *r : "");
            continue;
        }
        // Every case is checked (no early stop), so one run lists all the mismatches.
        EXPECT_TRUE(r.has_value()) << src << "\n  " << r.status().to_string();
        if (r.has_value()) {
            EXPECT_EQ(*r, c["expected"].get<std::string>()) << src;
        }
    }
    EXPECT_GE(n, 60);
}

TEST(Jinja, FloatsPrintAsPython) {
    EXPECT_EQ(ok("{{ 1.0 }} {{ 0.1 }} {{ 0.1 + 0.2 }} {{ 1e22 }} {{ 1.5e-7 }} {{ 100.0 }}"),
              "1.0 0.1 0.30000000000000004 1e+22 1.5e-07 100.0");
    EXPECT_EQ(ok("{{ x }} {{ x|tojson }}", R"({"x": 2.5e-10})"), "2.5e-10 2.5e-10");
}

TEST(Jinja, IntegerDivisionAndModuloFollowPython) {
    EXPECT_EQ(ok("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7.0 // 2 }} {{ -1 % 5.0 }}"),
              "-4 2 -2 -4.0 4.0");
}

TEST(Jinja, TojsonEscapesLikeJsonDumps) {
    EXPECT_EQ(ok("{{ x|tojson }}", R"({"x": {"s": "é/\"\\\n\u0007", "n": [1, 2.0, null]}})"),
              R"({"s": "é/\"\\\n\u0007", "n": [1, 2.0, null]})");
}

// Tool schemas reach the prompt through the context JSON: its objects keep their key order,
// and a repeated key keeps its first place with the last value, as Python's json.loads.
TEST(Jinja, ContextJsonKeepsKeyOrderAsJsonLoads) {
    EXPECT_EQ(ok("{{ d|tojson }} {% for k in d %}{{ k }}{% endfor %} {{ d.p.keys()|list }}",
                 R"({"d": {"z": 1, "a": {"y": 0}, "z": 3, "p": {"q": 1, "b": 2}}})"),
              R"({"z": 3, "a": {"y": 0}, "p": {"q": 1, "b": 2}} zap ['q', 'b'])");
}

TEST(Jinja, NamespaceSurvivesLoopScopes) {
    EXPECT_EQ(ok("{% set ns = namespace(found=false) %}{% for m in ms %}{% if m == 2 %}"
                 "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
                 R"({"ms": [1, 2, 3]})"),
              "True");
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
    auto t = JinjaTemplate::parse("line 1\n{% if x %}\nok\n{{ x + }}\n{% endif %}");
    ASSERT_FALSE(t.has_value());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("line 4"), std::string::npos) << t.status().message();

    auto u = JinjaTemplate::parse("a\nb\n{% for x in y %}\nno end");
    ASSERT_FALSE(u.has_value());
    EXPECT_NE(u.status().message().find("endfor"), std::string::npos) << u.status().message();

    auto f = JinjaTemplate::parse("\n\n{{ x|no_such_filter }}");
    ASSERT_FALSE(f.has_value());
    EXPECT_NE(f.status().message().find("line 3"), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find("no_such_filter"), std::string::npos);

    for (const char* bad :
         {"{{ x", "{% if %}", "{% endfor %}", "{{ (1 }}", "{% break %}", "{# open", "{{ 'abc }}",
          "{% set %}", "{% unknown %}", "{% extends 'x' %}", "{{ a.}}", "{{ f(a=1, 2) }}"}) {
        auto r = JinjaTemplate::parse(bad);
        EXPECT_FALSE(r.has_value()) << bad;
        if (!r.has_value()) {
            EXPECT_NE(r.status().message().find("line 1"), std::string::npos)
                << r.status().message();
            EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line";
        }
    }
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
    auto r = render("a\n{% if true %}\n{{ raise_exception('roles must alternate') }}{% endif %}");
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("roles must alternate"), std::string::npos);

    auto u = render("\n{{ 'a' + missing }}");
    ASSERT_FALSE(u.has_value());
    EXPECT_NE(u.status().message().find("line 2: 'missing' is undefined"), std::string::npos)
        << u.status().message();
}

double thread_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr double kStopSeconds = 20.0;  // sanitizers slow everything down ~10x
#else
constexpr double kStopSeconds = 1.0;
#endif

// Each hostile template must stop with kResourceExhausted within a second of CPU time (CPU,
// not wall, time so that a loaded CI machine cannot make this flaky).
void expect_stopped(const std::string& src, const JinjaOptions& opts = {}) {
    double t0 = thread_cpu_seconds();
    auto r = render(src, "{}", opts);
    double secs = thread_cpu_seconds() - t0;
    ASSERT_FALSE(r.has_value()) << src;
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
    EXPECT_LT(secs, kStopSeconds) << src;
}

TEST(JinjaLimits, HostileTemplatesStop) {
    // With the default options.
    expect_stopped("{% for i in range(10**12) %}x{% endfor %}");
    expect_stopped(
        "{% set ns = namespace(i=0) %}{% for i in range(1000000) %}"
        "{% for j in range(1000000) %}{% set ns.i = ns.i + 1 %}{% endfor %}{% endfor %}");
    expect_stopped("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    expect_stopped(
        "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}");
    expect_stopped("{{ 'x' * 10**10 }}");
    expect_stopped(
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}");
    expect_stopped("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}");
    // printf-style widths are bounded before anything is padded.
    expect_stopped("{{ '%99999999999d' % 1 }}");
    expect_stopped("{{ '%*s' % (100000000, 'x') }}");
    expect_stopped("{{ '%.*f'|format(100000000, 1.5) }}");
    expect_stopped("{{ ('%16000000s' * 100) % ((1,) * 100) }}");
    expect_stopped(
        "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}"
        "{% endfor %}{{ ns.l|tojson }}");
    // Containers built by dict() and by a macro's varargs/kwargs are depth-capped too (each of
    // these once nested without bound and overflowed the stack when compared or freed).
    expect_stopped(
        "{% set ns = namespace(d={}) %}{% for i in range(200000) %}"
        "{% set ns.d = dict(x=ns.d) %}{% endfor %}{{ ns.d == ns.d }}");
    expect_stopped(
        "{% set ns = namespace(d=none) %}{% macro m() %}{% set ns.d = kwargs %}{% endmacro %}"
        "{% for i in range(200000) %}{{ m(x=ns.d) }}{% endfor %}{{ ns.d == ns.d }}");
    expect_stopped(
        "{% set ns = namespace(d=none) %}{% macro m() %}{% set ns.d = varargs %}{% endmacro %}"
        "{% for i in range(200000) %}{{ m(ns.d) }}{% endfor %}{{ ns.d == ns.d }}");
    // Memory bombs against a smaller allocation budget (the default one stops them too, in
    // about half a second each).
    JinjaOptions small;
    small.max_alloc_bytes = size_t{1} << 25;
    expect_stopped(
        "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
        "{% set ns.l = ns.l + ns.l %}{% endfor %}",
        small);
    expect_stopped(
        "{% for i in range(999999) %}{% for j in range(999999) %}{% endfor %}{% endfor %}", small);
    small.max_output_bytes = 1000;
    expect_stopped("{% for i in range(1000) %}0123456789{% endfor %}", small);
}

TEST(JinjaLimits, DeepNestingIsRejectedNotACrash) {
    std::string deep(100000, '(');
    auto r = JinjaTemplate::parse("{{ " + deep + "1" + std::string(100000, ')') + " }}");
    EXPECT_FALSE(r.has_value());
    std::string ifs;
    for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
    EXPECT_FALSE(JinjaTemplate::parse(ifs).has_value());
    std::string deep_json(100000, '[');
    auto t = JinjaTemplate::parse("{{ x }}");
    ASSERT_TRUE(t.has_value());
    EXPECT_FALSE(t->render_json("{\"x\": " + deep_json + "}").has_value());
}

TEST(JinjaLimits, CyclicNamespacesDoNotLeakOrHang) {
    auto r = render("{% set ns = namespace() %}{% set ns.self = [ns] %}{{ ns }}");
    EXPECT_TRUE(r.has_value());  // repr stops at a depth cap instead of recursing forever
}

TEST(JinjaChat, RenderChatTemplatePassesHfVariables) {
    auto t = JinjaTemplate::parse(
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if tools is none %}[no tools]{% endif %}{% if documents is none %}[no docs]{% endif %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}{{ eos_token }}{{ extra }}");
    ASSERT_TRUE(t.has_value());
    ferrox::ChatTemplateInputs in;
    in.messages_json = R"([{"role":"user","content":"hi"}])";
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.extra_context_json = R"({"extra": "!"})";
    auto r = ferrox::render_chat_template(*t, in);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    EXPECT_EQ(*r, "<s><user>hi[no tools][no docs]<assistant></s>!");
    in.messages_json = "{not json";
    EXPECT_FALSE(ferrox::render_chat_template(*t, in).has_value());
}

TEST(JinjaChat, TemplateIsReusableAndThreadCompatible) {
    auto t = JinjaTemplate::parse(
        "{% set ns = namespace(n=0) %}{% for x in xs %}"
        "{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}");
    ASSERT_TRUE(t.has_value());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(*t->render_json(R"({"xs": [1, 2, 3]})"), "6");
}

}  // namespace
