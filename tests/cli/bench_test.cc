// `ferrox bench` on a tiny in-memory model: one output line per test in llama-bench's order,
// llama-bench's JSONL fields with its definitions (size and parameters of every tensor of the
// file, t/s per sample from the timed nanoseconds, sample standard deviation).
#include "cli/bench.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testing/tiny_model.h"

namespace ferrox::cli {
namespace {

struct Tiny {
    std::vector<uint8_t> image;
    std::unique_ptr<GgufFile> file;
    BenchLoader loader() const {
        return [f = file.get()](const ModelOptions& mo) -> Expected<std::shared_ptr<Model>> {
            FERROX_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, Model::load(*f, mo));
            return std::shared_ptr<Model>(std::move(m));
        };
    }
};

Tiny tiny_q4_0() {
    Tiny t;
    TinyModelSpec spec;  // llama, 2 layers, n_embd 256, 4 heads (2 KV) of 64, n_ff 512, vocab 320
    spec.weight_type = DType::kQ4_0;
    t.image = make_tiny_model(spec);
    auto f = GgufFile::parse(t.image.data(), t.image.size(), "tiny.gguf");
    EXPECT_TRUE(f.has_value());
    if (f.has_value()) t.file = std::move(*f);
    return t;
}

// Counted by hand from the spec above: embeddings and output 320 x 256 each; per layer Q and
// O 256 x 256, K and V 256 x 128, gate, up and down 256 x 512, two norms of 256; output norm.
constexpr uint64_t kMatrixParams =
    2 * 320 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512);
constexpr uint64_t kNormParams = 256 + 2 * 2 * 256;
// Q4_0: 18 bytes per 32 weights; norms are F32.
constexpr uint64_t kBytes = kMatrixParams / 32 * 18 + kNormParams * 4;

TEST(Bench, JsonlLinesHaveLlamaBenchFields) {
    Tiny t = tiny_q4_0();
    ASSERT_TRUE(t.file);
    BenchOptions o;
    o.n_prompt = {8, 0, 20};  // 0: no test
    o.n_gen = {4};
    o.n_threads = {1, 2};
    o.n_reps = 3;
    o.n_batch = 16;  // pp20 runs as two forward passes
    o.output = BenchOutput::kJsonl;
    std::vector<std::string> lines;
    Status st = run_bench(*t.file, "some/dir/tiny.gguf", t.loader(), o,
                          [&](const std::string& l) { lines.push_back(l); });
    ASSERT_TRUE(st.is_ok()) << st.message();

    // llama-bench's order: for each thread count, the pp tests, then the tg tests.
    const int want[][3] = {{1, 8, 0}, {1, 20, 0}, {1, 0, 4}, {2, 8, 0}, {2, 20, 0}, {2, 0, 4}};
    ASSERT_EQ(lines.size(), std::size(want));
    for (size_t i = 0; i < lines.size(); ++i) {
        SCOPED_TRACE(lines[i]);
        ASSERT_EQ(lines[i].back(), '\n');
        ASSERT_EQ(lines[i].find('\n'), lines[i].size() - 1);
        const auto j = nlohmann::json::parse(lines[i]);
        for (const char* key :
             {"model_filename", "model_type", "model_size", "model_n_params", "n_threads",
              "n_prompt", "n_gen", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ts",
              "samples_ns", "cpu_info", "build_commit", "test_time", "use_mmap"}) {
            EXPECT_TRUE(j.contains(key)) << key;
        }
        EXPECT_EQ(j["model_filename"], "some/dir/tiny.gguf");
        EXPECT_EQ(j["model_type"].get<std::string>().rfind("llama ", 0), 0u);
        EXPECT_EQ(j["model_n_params"].get<uint64_t>(), kMatrixParams + kNormParams);
        EXPECT_EQ(j["model_size"].get<uint64_t>(), kBytes);
        EXPECT_EQ(j["n_threads"].get<int>(), want[i][0]);
        EXPECT_EQ(j["n_prompt"].get<int>(), want[i][1]);
        EXPECT_EQ(j["n_gen"].get<int>(), want[i][2]);

        const auto ns = j["samples_ns"].get<std::vector<int64_t>>();
        const auto ts = j["samples_ts"].get<std::vector<double>>();
        ASSERT_EQ(ns.size(), 3u);
        ASSERT_EQ(ts.size(), 3u);
        const int n_tokens = want[i][1] + want[i][2];
        double mean_ts = 0, mean_ns = 0;
        for (size_t k = 0; k < 3; ++k) {
            ASSERT_GT(ns[k], 0);
            EXPECT_NEAR(ts[k], 1e9 * n_tokens / static_cast<double>(ns[k]), 1e-9 * ts[k]);
            mean_ts += ts[k] / 3;
            mean_ns += static_cast<double>(ns[k]) / 3;
        }
        double var = 0;
        for (double x : ts) var += (x - mean_ts) * (x - mean_ts) / 2;  // n - 1, as llama-bench
        EXPECT_NEAR(j["avg_ts"].get<double>(), mean_ts, 1e-9 * mean_ts);
        EXPECT_NEAR(j["stddev_ts"].get<double>(), std::sqrt(var), 1e-6 * mean_ts);
        EXPECT_NEAR(j["avg_ns"].get<double>(), mean_ns, 1.0);
    }
}

TEST(Bench, MarkdownTableHasOneRowPerTest) {
    Tiny t = tiny_q4_0();
    ASSERT_TRUE(t.file);
    BenchOptions o;
    o.n_prompt = {8};
    o.n_gen = {4};
    o.n_threads = {1};
    o.n_reps = 1;
    std::string out;
    ASSERT_TRUE(run_bench(*t.file, "tiny.gguf", t.loader(), o, [&](const std::string& l) {
                    out += l;
                }).is_ok());
    std::vector<std::string> rows;
    for (size_t b = 0, e; (e = out.find('\n', b)) != std::string::npos; b = e + 1)
        rows.push_back(out.substr(b, e - b));
    ASSERT_EQ(rows.size(), 4u) << out;
    EXPECT_NE(rows[0].find("| model "), std::string::npos);
    EXPECT_NE(rows[0].find(" t/s |"), std::string::npos);
    for (int i : {2, 3}) {
        EXPECT_EQ(rows[i].rfind("| tiny ", 0), 0u) << rows[i];
        EXPECT_NE(rows[i].find(" ± "), std::string::npos) << rows[i];
        EXPECT_NE(rows[i].find(" M |"), std::string::npos) << rows[i];  // 1.34 M params
    }
    EXPECT_NE(rows[2].find(" pp8 |"), std::string::npos) << rows[2];
    EXPECT_NE(rows[3].find(" tg4 |"), std::string::npos) << rows[3];
}

// tgNxS+K @ dD: one line per (depth, sequences, drafts) in that order, t/s counting every
// position a step computes (S * (1 + K) per step), the test named as the markdown row says.
TEST(Bench, VerifyAndDepthTests) {
    Tiny t = tiny_q4_0();
    ASSERT_TRUE(t.file);
    BenchOptions o;
    o.n_prompt = {0};
    o.n_gen = {4};
    o.n_parallel = {2};
    o.n_verify = {0, 3};
    o.n_depth = {0, 40};
    o.n_threads = {2};
    o.n_reps = 2;
    o.output = BenchOutput::kJsonl;
    std::vector<std::string> lines;
    Status st = run_bench(*t.file, "tiny.gguf", t.loader(), o, [&](const std::string& l) { lines.push_back(l); });
    ASSERT_TRUE(st.is_ok()) << st.message();
    const int want[][2] = {{0, 0}, {0, 3}, {40, 0}, {40, 3}};  // (depth, verify)
    ASSERT_EQ(lines.size(), std::size(want));
    for (size_t i = 0; i < lines.size(); ++i) {
        SCOPED_TRACE(lines[i]);
        const auto j = nlohmann::json::parse(lines[i]);
        EXPECT_EQ(j["n_depth"].get<int>(), want[i][0]);
        EXPECT_EQ(j["n_verify"].get<int>(), want[i][1]);
        EXPECT_EQ(j["n_parallel"].get<int>(), 2);
        const auto ns = j["samples_ns"].get<std::vector<int64_t>>();
        const auto ts = j["samples_ts"].get<std::vector<double>>();
        ASSERT_EQ(ns.size(), 2u);
        for (size_t k = 0; k < 2; ++k) {
            EXPECT_NEAR(ts[k], 1e9 * 4 * 2 * (1 + want[i][1]) / static_cast<double>(ns[k]), 1e-9 * ts[k]);
        }
    }
    o.output = BenchOutput::kMarkdown;
    o.n_verify = {3};
    o.n_depth = {40};
    std::string out;
    ASSERT_TRUE(run_bench(*t.file, "tiny.gguf", t.loader(), o, [&](const std::string& l) { out += l; }).is_ok());
    EXPECT_NE(out.find(" tg4x2+3 @ d40 |"), std::string::npos) << out;
}

TEST(Bench, RejectsBadOptions) {
    Tiny t = tiny_q4_0();
    ASSERT_TRUE(t.file);
    BenchOptions o;
    o.n_reps = 0;
    EXPECT_FALSE(run_bench(*t.file, "tiny.gguf", t.loader(), o, [](const std::string&) {}).is_ok());
}

TEST(Bench, ParseIntList) {
    EXPECT_EQ(*parse_int_list("512", 0), std::vector<int>({512}));
    EXPECT_EQ(*parse_int_list("1,2,16", 1), std::vector<int>({1, 2, 16}));
    EXPECT_EQ(*parse_int_list("0", 0), std::vector<int>({0}));
    for (const char* bad : {"", ",", "1,", ",1", "1,,2", "x", "1.5", "0", "-1", "99999999999"}) {
        EXPECT_FALSE(parse_int_list(bad, 1).has_value()) << bad;
    }
}

}  // namespace
}  // namespace ferrox::cli
