// The safetensors reader on handcrafted files: valid ones (dtypes, shapes, views, metadata,
// shards, config.json) and corrupt ones, each a one-line error naming the file and the fault.
#include "loader/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace ferrox {
namespace {

// 8-byte little-endian length, the header, then `data`.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data) {
    const uint64_t n = header.size();
    std::vector<uint8_t> out(8 + header.size() + data.size());
    std::memcpy(out.data(), &n, 8);
    if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
    return out;
}

std::vector<uint8_t> floats(std::initializer_list<float> v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), std::data(v), out.size());
    return out;
}

std::string parse_error(const std::vector<uint8_t>& img) {
    auto r = SafetensorsFile::parse(img.data(), img.size(), "t.safetensors");
    if (r.has_value()) return "";
    return r.status().message();
}

const char* kGood =
    R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"F16","shape":[2],"data_offsets":[24,28]}})";

TEST(Safetensors, ParsesTensorsMetadataAndViews) {
    std::vector<uint8_t> data = floats({1, 2, 3, 4, 5, 6});
    data.insert(data.end(), {0x00, 0x3c, 0x00, 0xc0});  // f16 1.0, -2.0
    auto img = image(kGood, data);
    auto r = SafetensorsFile::parse(img.data(), img.size(), "t.safetensors");
    ASSERT_TRUE(r.has_value()) << r.status().message();
    const SafetensorsFile& f = **r;
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const SafetensorsTensor* w = f.find("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(w->n_bytes, 24u);
    auto v = w->view(f.path());
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->type, DType::kF32);
    EXPECT_EQ(v->ne[0], 3);  // innermost first
    EXPECT_EQ(v->ne[1], 2);
    float x;
    std::memcpy(&x, v->row(1), 4);
    EXPECT_EQ(x, 4.0f);
    EXPECT_EQ(f.find("b")->type, DType::kF16);
    EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, OtherDTypesParseButHaveNoView) {
    auto img = image(R"({"ids":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]}})", std::vector<uint8_t>(16));
    auto r = SafetensorsFile::parse(img.data(), img.size(), "t.safetensors");
    ASSERT_TRUE(r.has_value()) << r.status().message();
    auto v = (*r)->find("ids")->view("t.safetensors");
    ASSERT_FALSE(v.has_value());
    EXPECT_NE(v.status().message().find("I64 is not supported"), std::string::npos);
}

struct Corrupt {
    const char* what;
    std::vector<uint8_t> img;
    const char* expect;  // substring of the message
};

TEST(Safetensors, CorruptFilesAreOneLineErrors) {
    const auto d24 = floats({1, 2, 3, 4, 5, 6});
    std::vector<uint8_t> huge(8, 0xff);
    std::vector<uint8_t> past = image("{}", {});
    const uint64_t n = 1000;
    std::memcpy(past.data(), &n, 8);
    std::vector<Corrupt> cases = {
        {"empty", {}, "too short"},
        {"huge header", huge, "exceeds the 100 MiB limit"},
        {"header past end", past, "runs past the end of the file"},
        {"not json", image("{nope", {}), "invalid JSON"},
        {"not an object", image("[1]", {}), "does not start with '{'"},
        {"bad utf8", image("{\"\xff\":1}", {}), "UTF-8"},
        {"deep", image(std::string(40, '{') , {}), "nested deeper"},
        {"duplicate", image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({1})), "duplicate key 'w'"},
        {"unknown dtype", image(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", floats({1})), "unknown dtype 'F12'"},
        {"no shape", image(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", floats({1})), "shape"},
        {"negative dim", image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", floats({1})), "non-natural"},
        {"size mismatch", image(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,24]}})", d24), "24 bytes for a F32 shape of 4 elements"},
        {"past data", image(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", floats({1})), "runs past the end of the data"},
        {"backwards", image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", d24), "backwards"},
        {"overlap", image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", d24), "overlap"},
        {"hole", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", d24), "hole of 8 bytes"},
        {"trailing", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d24), "16 bytes after the last tensor"},
        {"offsets shape", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d24), "data_offsets must be"},
        {"metadata type", image(R"({"__metadata__":{"k":1}})", {}), "__metadata__ 'k'"},
        {"huge shape", image(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", d24), "too large"},
    };
    for (const Corrupt& c : cases) {
        const std::string m = parse_error(c.img);
        EXPECT_NE(m.find(c.expect), std::string::npos) << c.what << ": got '" << m << "'";
        EXPECT_EQ(m.rfind("t.safetensors: ", 0), 0u) << c.what << ": " << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << c.what;
    }
}

TEST(Safetensors, EveryTruncationFailsCleanly) {
    std::vector<uint8_t> data = floats({1, 2, 3, 4, 5, 6});
    data.insert(data.end(), {0, 0x3c, 0, 0xc0});
    auto img = image(kGood, data);
    for (size_t n = 0; n < img.size(); ++n) {
        std::vector<uint8_t> cut(img.begin(), img.begin() + n);
        EXPECT_FALSE(parse_error(cut).empty()) << "prefix of " << n << " bytes parsed";
    }
}

class SafetensorsDir : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() /
               ("ferrox_st_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    void write(const std::string& name, const std::vector<uint8_t>& bytes) {
        std::ofstream(dir_ / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    void write_text(const std::string& name, const std::string& s) { std::ofstream(dir_ / name) << s; }
    std::filesystem::path dir_;
};

TEST_F(SafetensorsDir, ShardedCheckpoint) {
    write("a.safetensors", image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({1, 2})));
    write("b.safetensors", image(R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({3})));
    write_text("model.safetensors.index.json",
               R"({"metadata":{"total_size":12},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
    auto c = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_TRUE(c.has_value()) << c.status().message();
    EXPECT_EQ((*c)->files().size(), 2u);
    EXPECT_EQ((*c)->n_tensors(), 2u);
    EXPECT_EQ((*c)->n_bytes(), 12u);
    const SafetensorsFile* f = nullptr;
    ASSERT_NE((*c)->find("y", &f), nullptr);
    EXPECT_NE(f->path().find("b.safetensors"), std::string::npos);
}

TEST_F(SafetensorsDir, BadIndexes) {
    write("a.safetensors", image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({1, 2})));
    write("b.safetensors", image(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({1, 2})));
    const std::pair<const char*, const char*> cases[] = {
        {R"({"weight_map":{"x":"../a.safetensors"}})", "not a file name"},
        {R"({"weight_map":{"x":"a.safetensors","z":"a.safetensors"}})", "which lacks it"},
        {R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})", "is in both"},
        {R"({"weight_map":{"x":"missing.safetensors"}})", "missing.safetensors"},
        {R"({"weight_map":{}})", "missing or empty weight_map"},
        {R"({"weight_map":{"x":1}})", "is not a string"},
    };
    for (const auto& [text, expect] : cases) {
        write_text("model.safetensors.index.json", text);
        auto c = SafetensorsCheckpoint::open(dir_.string());
        ASSERT_FALSE(c.has_value()) << text;
        EXPECT_NE(c.status().message().find(expect), std::string::npos) << c.status().message();
    }
}

TEST_F(SafetensorsDir, EmptyDirectoryIsNotFound) {
    auto c = SafetensorsCheckpoint::open(dir_.string());
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

TEST(HfConfig, TypedGetters) {
    auto c = HfConfig::parse(
        R"({"hidden_size":384,"layer_norm_eps":1e-12,"model_type":"bert","use_cache":true,)"
        R"("architectures":["BertModel"],"nested":{"a":1},"n":null})",
        "config.json");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(**c->get_int("hidden_size"), 384);
    EXPECT_DOUBLE_EQ(**c->get_float("layer_norm_eps"), 1e-12);
    EXPECT_DOUBLE_EQ(**c->get_float("hidden_size"), 384.0);
    EXPECT_EQ(**c->get_string("model_type"), "bert");
    EXPECT_TRUE(**c->get_bool("use_cache"));
    EXPECT_EQ((**c->get_strings("architectures"))[0], "BertModel");
    EXPECT_FALSE(c->get_int("missing")->has_value());
    EXPECT_FALSE(c->get_int("n")->has_value());
    auto bad = c->get_int("model_type");
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.status().message(), "config.json: 'model_type' is not an integer");
    EXPECT_FALSE(HfConfig::parse("{", "config.json").has_value());
}

}  // namespace
}  // namespace ferrox
