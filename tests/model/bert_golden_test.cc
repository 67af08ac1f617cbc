// all-MiniLM-L6-v2 against the independent reference of scripts/golden/minilm_reference.py
// (HF tokenizers' ids, a float64 numpy BERT on the same safetensors weights): ferrox's
// WordPiece gives the same ids on every input, and its pooled, normalized vectors have cosine
// > 0.9999 with the reference on each. Needs `make model` (models/all-MiniLM-L6-v2/); without
// it the test is skipped, saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/encoder.h"
#include "tensor/fp16.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {
namespace {

const std::string kDir = std::string(FERROX_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";
const std::string kGolden = std::string(FERROX_SOURCE_DIR) + "/tests/model/golden/minilm_embeddings.json";

std::vector<uint8_t> b64decode(const std::string& s) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        return c == '+' ? 62 : c == '/' ? 63 : -1;
    };
    std::vector<uint8_t> out;
    uint32_t buf = 0;
    int bits = 0;
    for (char c : s) {
        const int v = val(c);
        if (v < 0) continue;
        buf = (buf << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<uint8_t>(buf >> bits));
        }
    }
    return out;
}

struct Case {
    std::string text;
    std::vector<int32_t> ids;  // HF's, untruncated
    std::vector<int32_t> used;  // what the reference embedded (truncated to max_seq_length)
    std::vector<float> vec;
};

class MiniLmGolden : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (!std::filesystem::exists(kDir + "/model.safetensors")) return;
        std::ifstream in(kGolden);
        const auto j = nlohmann::json::parse(in);
        for (const auto& c : j["cases"]) {
            Case k;
            k.text = c["text"].get<std::string>();
            k.ids = c["ids"].get<std::vector<int32_t>>();
            const size_t n = c["n_tokens_used"].get<size_t>();
            k.used = k.ids;
            if (n < k.used.size()) {
                k.used.resize(n - 1);
                k.used.push_back(k.ids.back());
            }
            const auto raw = b64decode(c["vec_f16"].get<std::string>());
            for (size_t i = 0; i + 1 < raw.size(); i += 2) {
                k.vec.push_back(fp16_to_fp32(static_cast<uint16_t>(raw[i] | (raw[i + 1] << 8))));
            }
            cases_->push_back(std::move(k));
        }
        auto m = EncoderModel::load_dir(kDir, {});
        ASSERT_TRUE(m.has_value()) << m.status().message();
        model_ = m->release();
        auto t = Tokenizer::from_hf_json(kDir + "/tokenizer.json", kDir + "/tokenizer_config.json");
        ASSERT_TRUE(t.has_value()) << t.status().message();
        tok_ = t->release();
    }
    void SetUp() override {
        if (!model_) GTEST_SKIP() << kDir << " is missing: run `make model`";
    }
    static inline std::vector<Case>* cases_ = new std::vector<Case>();
    static inline EncoderModel* model_ = nullptr;
    static inline Tokenizer* tok_ = nullptr;
};

double cosine(const float* a, const float* b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
    return ab / std::sqrt(aa * bb);
}

TEST_F(MiniLmGolden, ConfigIsReadFromTheDirectory) {
    const EncoderHParams& hp = model_->hparams();
    EXPECT_EQ(hp.n_embd, 384);
    EXPECT_EQ(hp.n_layer, 6);
    EXPECT_EQ(hp.n_head, 12);
    EXPECT_EQ(hp.n_pos, 512);
    EXPECT_EQ(hp.max_tokens, 256);  // sentence_bert_config.json
    EXPECT_EQ(hp.pooling, Pooling::kMean);
    EXPECT_TRUE(hp.normalize);  // modules.json lists 2_Normalize
}

TEST_F(MiniLmGolden, TokenIdsEqualHfTokenizers) {
    ASSERT_GE(cases_->size(), 50u);
    int n_equal = 0;
    for (const Case& c : *cases_) {
        // HF matches added tokens ([CLS], [MASK]...) written in the text: so does the server.
        const auto ids = tok_->encode(c.text, /*add_special=*/true, /*parse_special=*/true);
        EXPECT_EQ(ids, c.ids) << "text: " << c.text;
        n_equal += ids == c.ids;
    }
    std::printf("tokenizer: %d of %zu inputs give HF tokenizers' ids\n", n_equal, cases_->size());
}

TEST_F(MiniLmGolden, BatchedVectorsMatchTheReference) {
    const int H = model_->hparams().n_embd;
    // Every case in as few batches as max_batch_tokens allows: lengths 3..256 side by side.
    std::vector<float> got(cases_->size() * H);
    size_t i0 = 0;
    while (i0 < cases_->size()) {
        std::vector<std::span<const int32_t>> batch;
        size_t n_tok = 0, i = i0;
        while (i < cases_->size() && n_tok + (*cases_)[i].used.size() <= size_t(model_->max_batch_tokens())) {
            n_tok += (*cases_)[i].used.size();
            batch.emplace_back((*cases_)[i++].used);
        }
        ASSERT_TRUE(model_->encode(batch, std::span<float>(got).subspan(i0 * H)).is_ok());
        i0 = i;
    }
    double min_cos = 1;
    for (size_t i = 0; i < cases_->size(); ++i) {
        const double c = cosine(got.data() + i * H, (*cases_)[i].vec.data(), H);
        EXPECT_GT(c, 0.9999) << (*cases_)[i].text;
        min_cos = std::min(min_cos, c);
    }
    std::printf("min cosine over %zu golden inputs: %.8f\n", cases_->size(), min_cos);
}

TEST_F(MiniLmGolden, BatchingDoesNotChangeAVector) {
    const int H = model_->hparams().n_embd;
    std::vector<std::span<const int32_t>> batch;
    for (size_t i = 0; i < 8; ++i) batch.emplace_back((*cases_)[i * 7].used);
    std::vector<float> together(batch.size() * H), alone(H);
    ASSERT_TRUE(model_->encode(batch, together).is_ok());
    for (size_t i = 0; i < batch.size(); ++i) {
        ASSERT_TRUE(model_->encode(std::span(&batch[i], 1), alone).is_ok());
        for (int d = 0; d < H; ++d) ASSERT_EQ(alone[d], together[i * H + d]) << "sequence " << i << " dim " << d;
    }
}

TEST_F(MiniLmGolden, RefusesWhatItCannotRun) {
    std::vector<int32_t> too_long(513, 1000), bad_id = {101, 40000, 102};
    std::vector<float> out(384);
    std::vector<std::span<const int32_t>> b1 = {too_long}, b2 = {bad_id}, b3 = {std::span<const int32_t>()};
    EXPECT_EQ(model_->encode(b1, out).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(model_->encode(b2, out).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(model_->encode(b3, out).code(), StatusCode::kInvalidArgument);
}

TEST(EncoderLoad, BadDirectoriesAreOneLineErrors) {
    const auto dir = std::filesystem::temp_directory_path() / ("ferrox_enc_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto m = EncoderModel::load_dir(dir.string(), {});
    ASSERT_FALSE(m.has_value());
    EXPECT_NE(m.status().message().find("config.json"), std::string::npos) << m.status().message();
    std::ofstream(dir / "config.json") << R"({"model_type":"llama"})";
    m = EncoderModel::load_dir(dir.string(), {});
    ASSERT_FALSE(m.has_value());
    EXPECT_NE(m.status().message().find("model_type 'llama'"), std::string::npos) << m.status().message();
    std::ofstream(dir / "config.json") << R"({"model_type":"bert","vocab_size":10,"hidden_size":8,)"
                                          R"("num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":16,)"
                                          R"("max_position_embeddings":4})";
    m = EncoderModel::load_dir(dir.string(), {});
    ASSERT_FALSE(m.has_value());
    EXPECT_NE(m.status().message().find("no model.safetensors"), std::string::npos) << m.status().message();
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferrox
