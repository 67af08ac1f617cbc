// Renders every HF chat template of the golden set (tests/chat/golden/*.json, written by
// scripts/golden/chat_templates.py with Python jinja2 in transformers' environment) and
// compares byte for byte. A case that raised in Python must fail here too; for
// raise_exception the message must match.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chat/jinja.h"

namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

fs::path golden_dir() { return fs::path(FERROX_SOURCE_DIR) / "tests/chat/golden"; }

std::vector<std::string> golden_files() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(golden_dir()))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

fs::path template_path(const std::string& where) {
    const std::string kTestdata = "testdata:", kSource = "source:";
    if (where.rfind(kTestdata, 0) == 0)
        return fs::path(FERROX_TESTDATA_DIR) / where.substr(kTestdata.size());
    return fs::path(FERROX_SOURCE_DIR) / where.substr(kSource.size());
}

std::string first_difference(const std::string& want, const std::string& got) {
    size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    size_t from = i > 40 ? i - 40 : 0;
    return "first difference at byte " + std::to_string(i) + "\n  want: ..." +
           ojson(want.substr(from, 120)).dump() + "\n  got:  ..." +
           ojson(got.substr(from, 120)).dump();
}

class ChatTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGolden, MatchesJinja2) {
    ojson doc = ojson::parse(read_file(golden_dir() / (GetParam() + ".json")));
    fs::path tpath = template_path(doc["template"].get<std::string>());
    ASSERT_TRUE(fs::exists(tpath)) << tpath;
    ferrox::JinjaOptions opts;
    opts.fixed_now_unix = doc["fixed_now_unix"].get<int64_t>();
    auto tmpl = ferrox::JinjaTemplate::parse(read_file(tpath), opts);
    ASSERT_TRUE(tmpl.has_value()) << tmpl.status().to_string();
    int n_pass = 0, n_cases = 0;
    for (const auto& c : doc["cases"]) {
        ++n_cases;
        ferrox::ChatTemplateInputs in;
        in.messages_json = c["messages"].dump();
        in.tools_json = c["tools"].is_null() ? "" : c["tools"].dump();
        in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
        in.bos_token = c["bos_token"].get<std::string>();
        in.eos_token = c["eos_token"].get<std::string>();
        in.extra_context_json = c["extra_context"].dump();
        auto out = ferrox::render_chat_template(*tmpl, in);
        std::string name = c["name"].get<std::string>();
        if (c.contains("error")) {
            std::string want = c["error"].get<std::string>();
            if (out.has_value()) {
                ADD_FAILURE() << name << ": jinja2 raised (" << want << ") but ferrox rendered "
                              << ojson(*out).dump();
                continue;
            }
            if (c["error_kind"] == "raise_exception" &&
                out.status().message().find(want) == std::string::npos) {
                ADD_FAILURE() << name << ": want error containing '" << want << "', got '"
                              << out.status().message() << "'";
                continue;
            }
            ++n_pass;
            continue;
        }
        if (!out.has_value()) {
            ADD_FAILURE() << name << ": " << out.status().to_string();
            continue;
        }
        std::string want = c["expected"].get<std::string>();
        if (*out != want) {
            ADD_FAILURE() << name << ": " << first_difference(want, *out);
            continue;
        }
        ++n_pass;
    }
    EXPECT_GE(n_cases, 20);
    std::printf("%s: %d/%d cases match\n", GetParam().c_str(), n_pass, n_cases);
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGolden, ::testing::ValuesIn(golden_files()),
                         test_name);

}  // namespace
