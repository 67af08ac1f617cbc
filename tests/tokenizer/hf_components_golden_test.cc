// Golden test: tokenizer.json files covering each HF `tokenizers` component (made, with what
// HF gives on them, by tests/tokenizer/make_hf_components_golden.py) must encode and decode
// exactly as HF does; components ferrox does not implement must fail to load with a one-line
// error naming them.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {
namespace {

using nlohmann::json;

const std::string kDir = std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/golden/hf_components/";

std::vector<std::string> manifest() {
    std::vector<std::string> names;
    for (const std::string& l : test::split_lines(test::read_all(kDir + "MANIFEST"))) {
        if (!l.empty() && l[0] != '#') names.push_back(l);
    }
    return names;
}

TEST(HfComponents, EncodeDecodeEqualHf) {
    const auto names = manifest();
    ASSERT_GE(names.size(), 20u);
    size_t n_inputs = 0, n_ok = 0;
    for (const std::string& name : names) {
        auto tok = Tokenizer::from_hf_json(kDir + name + ".json");
        ASSERT_TRUE(tok.has_value()) << name << ": " << tok.status().to_string();
        const json exp = json::parse(test::read_all(kDir + name + ".expected.json"));
        const auto& inputs = exp.at("inputs");
        size_t ok = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
            const std::string in = inputs[i].get<std::string>();
            const auto want = exp.at("ids")[i].get<std::vector<int32_t>>();
            const auto got = (*tok)->encode(in, /*add_special=*/true, /*parse_special=*/true);
            DecodeOptions all;
            all.special = true;
            const std::string dec = (*tok)->decode(want, all);
            const std::string dec_skip = (*tok)->decode(want, DecodeOptions{});
            const bool good = got == want && dec == exp.at("decode")[i].get<std::string>() &&
                              dec_skip == exp.at("decode_skip_special")[i].get<std::string>();
            EXPECT_EQ(test::ids_to_string(got), test::ids_to_string(want))
                << name << " input " << i << " '" << in << "'";
            EXPECT_EQ(dec, exp.at("decode")[i].get<std::string>()) << name << " decode " << i;
            EXPECT_EQ(dec_skip, exp.at("decode_skip_special")[i].get<std::string>())
                << name << " decode(skip special) " << i;
            ok += good;
        }
        n_inputs += inputs.size();
        n_ok += ok;
        if (ok != inputs.size()) {
            std::printf("[ hf-components %s ] %zu/%zu inputs equal\n", name.c_str(), ok,
                        inputs.size());
        }
    }
    std::printf("[ hf-components ] %zu tokenizers, %zu/%zu inputs equal (ids and decodes)\n",
                names.size(), n_ok, n_inputs);
}

// Streaming: token_to_piece of each id, concatenated, gives the decoded text for the
// byte-level and byte-fallback pipelines (all their inputs start with <s> or are byte-level,
// so no first-token treatment applies).
TEST(HfComponents, PiecesConcatenateToDecode) {
    for (const std::string& name : manifest()) {
        const bool llama = name == "bpe_byte_fallback_llama_added";
        if (name.rfind("bytelevel", 0) != 0 && name.rfind("split_", 0) != 0 && !llama) continue;
        auto tok = Tokenizer::from_hf_json(kDir + name + ".json");
        ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
        const json exp = json::parse(test::read_all(kDir + name + ".expected.json"));
        for (size_t i = 0; i < exp.at("inputs").size(); ++i) {
            const auto ids = exp.at("ids")[i].get<std::vector<int32_t>>();
            std::string cat;
            for (int32_t id : ids) cat += (*tok)->token_to_piece(id, /*special=*/true);
            DecodeOptions all;
            all.special = true;
            EXPECT_EQ(cat, (*tok)->decode(ids, all)) << name << " " << i;
        }
    }
}

// What a client streaming the ids sees (IncrementalDecoder, one token at a time) is what HF's
// decode of all of them gives, on every component: the decoders that look at a token's
// neighbours (Strip after Fuse and Metaspace on the first token, BPEDecoder's suffix, CTC's
// repeats, WordPiece's prefix) see the previous token too, as HF's DecodeStream does.
TEST(HfComponents, StreamedTextEqualsHfDecode) {
    size_t n_checked = 0;
    for (const std::string& name : manifest()) {
        auto tok = Tokenizer::from_hf_json(kDir + name + ".json");
        ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
        const json exp = json::parse(test::read_all(kDir + name + ".expected.json"));
        for (size_t i = 0; i < exp.at("inputs").size(); ++i) {
            const auto ids = exp.at("ids")[i].get<std::vector<int32_t>>();
            for (const bool special : {false, true}) {
                IncrementalDecoder::Options o;
                o.special = special;
                IncrementalDecoder dec(**tok, o);
                std::string streamed;
                for (int32_t id : ids) dec.push(id, streamed);
                dec.flush(streamed);
                const std::string want = exp.at(special ? "decode" : "decode_skip_special")[i].get<std::string>();
                EXPECT_EQ(streamed, want) << name << " input " << i << (special ? " (special)" : "");
                ++n_checked;
            }
        }
    }
    EXPECT_GT(n_checked, 500u);
}

// Ids in a tokenizer.json size its tables: one that is negative, fractional, not a number or
// far past the vocab is a one-line error (it was a std::bad_alloc escaping the loader).
TEST(HfComponents, CorruptIdsAreOneLineErrors) {
    const json base = json::parse(test::read_all(kDir + "bpe_byte_fallback_llama_added.json"));
    const std::vector<json> bad = {-1, 4294967296.5, 2147483647, 1e300, "7", nullptr};
    for (const json& v : bad) {
        for (int where = 0; where < 2; ++where) {
            json d = base;
            if (where == 0) d["added_tokens"][0]["id"] = v;
            else d["model"]["vocab"].begin().value() = v;
            auto tok = Tokenizer::from_hf_json_text(d.dump(), "");
            ASSERT_FALSE(tok.has_value()) << v.dump() << " at " << where;
            const std::string msg = tok.status().to_string();
            EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
            EXPECT_NE(msg.find("id"), std::string::npos) << msg;
        }
    }
}

// Two vocab texts with one id (found by hf_pipeline_fuzzer: decoding the id gave back the other
// text, so decode(encode(x)) was not x, and for byte-level pieces not even UTF-8): refused at
// load, naming the id and both texts, quoted so that a newline in one stays on the line.
TEST(HfComponents, DuplicateVocabIdIsAOneLineError) {
    int n_checked = 0;
    for (const std::string& name : manifest()) {  // both routes: the fast path and HfPipeline
        json d = json::parse(test::read_all(kDir + name + ".json"));
        auto& vocab = d["model"]["vocab"];
        if (!vocab.is_object() || vocab.empty()) continue;  // Unigram: ids are positions
        const std::string first_text = vocab.begin().key();
        const int32_t first = vocab.begin().value().get<int32_t>();
        vocab["two\nlines"] = first;
        auto tok = Tokenizer::from_hf_json_text(d.dump(), "");
        ASSERT_FALSE(tok.has_value()) << name;
        const std::string msg = tok.status().to_string();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        EXPECT_NE(msg.find("id " + std::to_string(first) + " to both"), std::string::npos) << msg;
        EXPECT_NE(msg.find(json(first_text).dump()), std::string::npos) << msg;
        EXPECT_NE(msg.find("\"two\\nlines\""), std::string::npos) << msg;
        ++n_checked;
    }
    EXPECT_GE(n_checked, 15);
}

// A merge naming a token the vocab lacks (found by hf_pipeline_fuzzer: a vocab key renamed,
// "v" -> "=v"; ferrox then dropped every "v" from the text): HF refuses such a file, and so
// does ferrox, on both routes, naming the merge and the token.
TEST(HfComponents, MergeOutOfVocabIsAOneLineError) {
    int n_checked = 0;
    for (const std::string& name : manifest()) {
        json d = json::parse(test::read_all(kDir + name + ".json"));
        json& m = d["model"];
        if (m.value("type", "") != "BPE" || !m["merges"].is_array() || m["merges"].empty()) continue;
        const json& first = m["merges"][0];
        const std::string left = first.is_string() ? first.get<std::string>().substr(0, first.get<std::string>().find(' ', 1))
                                                   : first[0].get<std::string>();
        ASSERT_TRUE(m["vocab"].contains(left)) << name;
        const json id = m["vocab"][left];
        m["vocab"].erase(left);
        m["vocab"]["=" + left] = id;
        auto tok = Tokenizer::from_hf_json_text(d.dump(), "");
        ASSERT_FALSE(tok.has_value()) << name;
        const std::string msg = tok.status().to_string();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        EXPECT_NE(msg.find("names " + json(left).dump() + ", which is not in the model vocab"), std::string::npos) << msg;
        ++n_checked;
    }
    EXPECT_GE(n_checked, 8);
}

// Hostile input: invalid UTF-8, lone continuation bytes, NULs, random ids; nothing may crash
// and every id must be in range.
TEST(HfComponents, ArbitraryBytesAndIds) {
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    auto next = [&rng]() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
    };
    for (const std::string& name : manifest()) {
        auto tok = Tokenizer::from_hf_json(kDir + name + ".json");
        ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
        const int32_t n = (*tok)->n_vocab();
        for (int iter = 0; iter < 40; ++iter) {
            std::string text;
            const size_t len = next() % 40;
            for (size_t i = 0; i < len; ++i) {
                const uint64_t r = next();
                text.push_back(r % 3 == 0 ? static_cast<char>(r >> 8)
                                          : " aé\x80\xC3\xE2\x96\x81<mask>[X]\t\n0"[r % 22]);
            }
            for (int32_t id : (*tok)->encode(text, true, iter % 2 == 0)) {
                ASSERT_GE(id, 0) << name;
                ASSERT_LT(id, n) << name;
            }
            std::vector<int32_t> ids;
            for (int k = 0; k < 8; ++k) ids.push_back(static_cast<int32_t>(next() % (n + 2)) - 1);
            (*tok)->decode(ids);
            for (int32_t id : ids) (*tok)->token_to_piece(id, true);
        }
    }
}

// The general pipeline on the real tokenizers that the fast path serves (llama2, llama3,
// qwen3): the same ids as HF on the whole corpus, so both routes are proved on them.
TEST(HfComponents, PipelineOnRealTokenizersEqualsHf) {
    const std::string root = std::string(FERROX_TESTDATA_DIR) + "/hf_tokenizers/";
    const auto corpus = test::split_lines(
        test::read_all(std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/corpus.txt"));
    for (const std::string name : {"llama2", "llama3", "qwen3"}) {
        const std::string path = root + name + "/tokenizer.json";
        if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
        auto p = HfPipeline::from_json(json::parse(test::read_all(path)));
        ASSERT_TRUE(p.has_value()) << name << ": " << p.status().to_string();
        auto golden = test::split_lines(test::read_all(
            std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/golden/hf_" + name + ".txt"));
        if (!golden.empty() && !golden[0].empty() && golden[0][0] == '#') {
            golden.erase(golden.begin());
        }
        ASSERT_EQ(golden.size(), corpus.size()) << name;
        size_t n_ok = 0;
        for (size_t i = 0; i < corpus.size(); ++i) {
            std::vector<int32_t> got;
            (*p)->encode(corpus[i], /*add_special=*/false, /*parse_special=*/true, got);
            const bool ok = got == test::parse_ids(golden[i]);
            EXPECT_TRUE(ok) << name << " line " << i + 1 << " '" << corpus[i] << "'\n  got "
                            << test::ids_to_string(got) << "\n  want " << golden[i];
            n_ok += ok;
        }
        std::printf("[ hf-pipeline %s ] %zu/%zu corpus lines equal\n", name.c_str(), n_ok,
                    corpus.size());
    }
}

// A component ferrox does not implement: loading fails with one line naming it.
void expect_unsupported(json tj, const std::string& what) {
    auto r = Tokenizer::from_hf_json_text(tj.dump(), "");
    ASSERT_FALSE(r.has_value()) << what;
    const std::string msg = r.status().message();
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(HfComponents, UnsupportedComponentsAreOneLineErrors) {
    const json base = json::parse(test::read_all(kDir + "bytelevel_prefix_roberta.json"));
    json t = base;
    t["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Whitespace"}}, {{"type", "Nonsense"}}}}};
    expect_unsupported(t, "pre_tokenizer type 'Nonsense'");
    t = base;
    t["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", nullptr}};
    expect_unsupported(t, "normalizer Precompiled without a precompiled_charsmap");
    t = base;
    t["normalizer"] = {{"type", "Nonsense"}};
    expect_unsupported(t, "normalizer type 'Nonsense'");
    t = base;
    t["model"]["dropout"] = 0.1;
    expect_unsupported(t, "model BPE dropout");
    t = base;
    t["model"]["type"] = "Nonsense";
    expect_unsupported(t, "model type 'Nonsense'");
    t = base;
    t["decoder"] = {{"type", "Nonsense"}};
    expect_unsupported(t, "decoder type 'Nonsense'");
    t = base;
    t["post_processor"] = {{"type", "Nonsense"}};
    expect_unsupported(t, "post_processor type 'Nonsense'");
    t = base;
    t["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"String", "x"}}},
                          {"behavior", "Sideways"},
                          {"invert", false}};
    expect_unsupported(t, "behavior 'Sideways'");
}

}  // namespace
}  // namespace ferrox
