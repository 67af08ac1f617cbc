// Replays hf_pipeline_fuzz.cc's inputs in ctest: the committed text corpus
// (tests/tokenizer/hf_pipeline_corpus) and mutations of it, the component tokenizer.json files
// as documents, and structural mutations of those documents (a component's type swapped, a
// field removed or of another type, numbers out of range, nesting far too deep), each of which
// must load or fail with one line, never crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = FERROX_SOURCE_DIR;

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void run(const std::string& s) { LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

std::vector<std::string> files_in(const fs::path& dir, const std::string& suffix) {
    std::vector<std::string> out;
    std::vector<fs::path> paths;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (name.ends_with(suffix) && !name.ends_with(".expected.json")) paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    for (const auto& p : paths) out.push_back(read_all(p));
    return out;
}

TEST(HfPipelineFuzz, TextCorpusCoversEveryComponentAndReplays) {
    const auto corpus = files_in(kSource / "tests/tokenizer/hf_pipeline_corpus", "");
    const auto docs = files_in(kSource / "tests/tokenizer/golden/hf_components", ".json");
    ASSERT_GE(docs.size(), 20u);
    std::set<size_t> picked;
    for (const auto& c : corpus) {
        ASSERT_FALSE(c.empty());
        if (c[0] == '{') {  // a document the fuzzer found (crash-*): it must load or fail cleanly
            run(c);
            continue;
        }
        picked.insert((static_cast<uint8_t>(c[0]) & 63) % docs.size());
        run(c);
    }
    EXPECT_EQ(picked.size(), docs.size()) << "every component tokenizer needs seeds";
    std::mt19937 rng(99);
    static const std::vector<std::string> kPieces = {"\xc3", "\xa9", "\xe2\x82", "\xf0\x9f\xa6\x99", "\xcc\x81",
                                                     "<s>", "</s>", "  ", "\n", "\t", "\xef\xbf\xbd", "[UNK]"};
    for (const auto& seed : corpus) {
        if (seed[0] == '{') continue;
        for (int i = 0; i < 20; ++i) {
            std::string m = seed;
            for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n && m.size() > 1; ++k) {
                const size_t pos = 1 + rng() % (m.size() - 1);
                switch (rng() % 3) {
                    case 0: m[pos] = static_cast<char>(rng()); break;
                    case 1: m.erase(pos, 1); break;
                    default: m.insert(pos, kPieces[rng() % kPieces.size()]); break;
                }
            }
            if (m[0] == '{') m[0] = 0;
            run(m);
        }
    }
}

// A random edit somewhere in the document: values of another type or range, a component's
// "type" replaced by another component's, keys removed.
void mutate(json& j, std::mt19937& rng, const std::vector<std::string>& types) {
    std::vector<json*> nodes{&j};
    for (size_t i = 0; i < nodes.size() && nodes.size() < 4000; ++i) {
        json& n = *nodes[i];
        if (n.is_object()) {
            for (auto& [k, v] : n.items()) nodes.push_back(&v);
        } else if (n.is_array() && n.size() < 64) {
            for (auto& v : n) nodes.push_back(&v);
        }
    }
    json& n = *nodes[rng() % nodes.size()];
    switch (rng() % 7) {
        case 0: n = nullptr; break;
        case 1: n = -1; break;
        case 2: n = 4294967296.5; break;
        case 3: n = json::array({n}); break;
        case 4: n = "\xff"; break;
        case 5:
            if (n.is_object() && !n.empty()) n.erase(n.begin());
            break;
        default:
            if (n.is_object() && n.contains("type")) n["type"] = types[rng() % types.size()];
            break;
    }
}

TEST(HfPipelineFuzz, MutatedDocumentsLoadOrFailWithOneLine) {
    const auto docs = files_in(kSource / "tests/tokenizer/golden/hf_components", ".json");
    ASSERT_GE(docs.size(), 20u);
    std::vector<json> parsed;
    std::set<std::string> type_set;
    for (const auto& d : docs) {
        run(d);  // as a document: each loads and keeps the contracts
        parsed.push_back(json::parse(d));
        std::vector<const json*> todo{&parsed.back()};
        while (!todo.empty()) {
            const json* n = todo.back();
            todo.pop_back();
            if (n->is_object() && n->contains("type") && (*n)["type"].is_string()) type_set.insert((*n)["type"]);
            if (n->is_structured() && n->size() < 64) {
                for (const auto& v : *n) todo.push_back(&v);
            }
        }
    }
    const std::vector<std::string> types(type_set.begin(), type_set.end());
    EXPECT_GE(types.size(), 20u) << "the components name many types";
    std::mt19937 rng(7);
    int n_loaded = 0, n_failed = 0;
    for (int i = 0; i < 600; ++i) {
        json d = parsed[i % parsed.size()];
        for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) mutate(d, rng, types);
        const std::string text = d.dump(-1, ' ', false, json::error_handler_t::replace);
        run(text);  // aborts on a broken contract or a multi-line error
        (ferrox::Tokenizer::from_hf_json_text(text, "").has_value() ? n_loaded : n_failed)++;
    }
    // Both outcomes occur: the mutations reach the checks and also leave loadable files.
    EXPECT_GT(n_loaded, 50);
    EXPECT_GT(n_failed, 50);
}

TEST(HfPipelineFuzz, DeepNestingIsAnErrorNotAStackOverflow) {
    const std::string deep = "{\"model\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
    run(deep);
    auto tok = ferrox::Tokenizer::from_hf_json_text(deep, "");
    ASSERT_FALSE(tok.has_value());
    EXPECT_NE(tok.status().message().find("nested deeper than"), std::string::npos) << tok.status().message();
    // The config is bounded the same way.
    const auto docs = files_in(kSource / "tests/tokenizer/golden/hf_components", ".json");
    auto with_cfg = ferrox::Tokenizer::from_hf_json_text(docs.front(), std::string(100000, '['));
    ASSERT_FALSE(with_cfg.has_value());
    EXPECT_NE(with_cfg.status().message().find("nested deeper than"), std::string::npos);
}

}  // namespace
