// Mixtures of experts against llama.cpp on tiny random-weight checkpoints of every routed
// architecture (qwen3moe, qwen2moe with its shared expert, olmoe, Mixtral as llama, gpt-oss), written
// into the build tree by scripts/golden/moe_random.py --models-only (the ctest fixture
// moe_random_models, numpy and gguf only); the same script ran llama.cpp on the same bytes,
// sha256 checked, for tests/model/golden/moe_llamacpp.json. Three of them carry Q8_0, Q4_0 and
// (gpt-oss's experts) MXFP4 matrices, so the experts go through the packed many-column products,
// and ten 256-wide qwen3moe models have experts of random blocks of Q2_K, Q3_K, IQ4_XS and the
// IQ1/IQ2/IQ3 grid formats (no quantizer needed: any block with sane scales is valid).
// Not bit-identical in general (F32 products summed in other orders than ggml's), within 1e-3
// of logits up to ~9; the Q4_0 model's logits came out bit-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/metrics.h"
#include "loader/gguf.h"
#include "loader/gguf_writer.h"
#include "model/model.h"
#include "support/test_kv.h"
#include "testing/generate.h"

namespace ferrox {
namespace {

const std::string kGolden = std::string(FERROX_SOURCE_DIR) + "/tests/model/golden/moe_llamacpp.json";

const nlohmann::json& golden() {
    static const nlohmann::json* g = [] {
        std::ifstream in(kGolden);
        return new nlohmann::json(nlohmann::json::parse(in));
    }();
    return *g;
}

struct Loaded {
    std::unique_ptr<GgufFile> file;
    std::unique_ptr<Model> model;
};

Loaded load(const std::string& name, int n_threads = 2) {
    Loaded l;
    auto g = GgufFile::open(std::string(FERROX_MOE_MODELS) + "/" + name + ".gguf");
    EXPECT_TRUE(g.has_value()) << g.status().message();
    if (!g.has_value()) return l;
    l.file = std::move(*g);
    ModelOptions mo;
    mo.n_threads = n_threads;
    mo.max_ctx = 128;
    auto m = Model::load(*l.file, mo);
    EXPECT_TRUE(m.has_value()) << m.status().message();
    if (m.has_value()) l.model = std::move(*m);
    return l;
}

class MoeGolden : public ::testing::TestWithParam<std::string> {};

// The 256-wide random-block models: their experts' inputs are quantized to Q8_K, whose rounding
// turns last-bit differences of the attention before it into ~1e-3 in the logits (each model's
// products match a float64 dot of the dequantized weights to 1e-6 in both engines).
bool wide_random_blocks(const std::string& name) {
    return name.rfind("qwen3moe-", 0) == 0 && name != "qwen3moe-q8_0";
}

TEST_P(MoeGolden, HyperparametersFromMetadata) {
    Loaded l = load(GetParam());
    ASSERT_TRUE(l.model);
    const nlohmann::json& want = golden()["models"][GetParam()];
    EXPECT_EQ(l.model->hparams().arch, want["arch"].get<std::string>());
    EXPECT_EQ(l.model->traits().ffn, FfnKind::kMoe);
    EXPECT_GT(l.model->hparams().n_expert, l.model->hparams().n_expert_used);
    EXPECT_GE(l.model->hparams().n_expert_used, 2);
}

TEST_P(MoeGolden, LastPromptLogitsMatchLlamaCpp) {
    Loaded l = load(GetParam());
    ASSERT_TRUE(l.model);
    const nlohmann::json& want = golden()["models"][GetParam()];
    const auto prompt = golden()["prompt"].get<std::vector<int32_t>>();
    TestKv kv(l.model->kv_geometry(16), 4);
    auto got = prompt_logits(*l.model, kv, prompt);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    const auto ref = want["logits"].get<std::vector<float>>();
    ASSERT_EQ(got->size(), ref.size());
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::abs(double((*got)[i]) - ref[i]));
    std::printf("%s: max |ferrox - llama.cpp| %.3g\n", GetParam().c_str(), diff);
    // Measured: 1.9e-4 (qwen3moe, F32), 2.2e-5, 1.9e-6, 2.5e-6, 6e-7 (Q8_0), 0 (Q4_0); the
    // random-block models 9e-5 (Q3_K) to 3.5e-3 (IQ1_S).
    EXPECT_LT(diff, wide_random_blocks(GetParam()) ? 1e-2 : 1e-3);
    EXPECT_EQ(std::max_element(got->begin(), got->end()) - got->begin(),
              std::max_element(ref.begin(), ref.end()) - ref.begin());
}

// Decode steps, fed llama.cpp's greedy tokens: at every step whose llama.cpp top-2 margin is at
// least 0.02 (~5x the largest difference in the logits; all but a few steps of random-block
// models), ferrox's argmax is llama.cpp's token.
TEST_P(MoeGolden, GreedyTokensMatchLlamaCpp) {
    Loaded l = load(GetParam());
    ASSERT_TRUE(l.model);
    Model& m = *l.model;
    const nlohmann::json& want = golden()["models"][GetParam()];
    const auto prompt = golden()["prompt"].get<std::vector<int32_t>>();
    const auto greedy = want["greedy"].get<std::vector<int32_t>>();
    const auto margins = want["margins"].get<std::vector<double>>();
    TestKv kv(m.kv_geometry(16), 4);
    TestSeq sq(&kv);
    ASSERT_TRUE(sq.reserve(static_cast<int>(prompt.size() + greedy.size())).is_ok());
    std::vector<float> logits(m.n_vocab());
    Batch b;
    b.tokens = prompt;
    b.seqs.push_back({0, static_cast<int>(prompt.size()), 0, sq.blocks().data(), static_cast<int>(sq.blocks().size()), true});
    int checked = 0;
    for (size_t i = 0; i < greedy.size(); ++i) {
        ASSERT_TRUE(m.forward(b, kv, logits).is_ok());
        if (margins[i] >= 0.02) {
            EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), greedy[i]) << "step " << i;
            ++checked;
        }
        const int pos = b.seqs[0].n_past + b.seqs[0].n_tokens;
        b.tokens = {greedy[i]};
        b.seqs[0].n_past = pos;
        b.seqs[0].n_tokens = 1;
    }
    EXPECT_GE(checked, static_cast<int>(greedy.size()) - 2);
}

// A sequence's logits do not depend on the batch around it, though its tokens share the
// experts' groups with the other sequence's: each output's summation order is fixed.
TEST_P(MoeGolden, BatchedSequencesGiveTheirAloneBits) {
    Loaded l = load(GetParam());
    ASSERT_TRUE(l.model);
    Model& m = *l.model;
    const auto prompt = golden()["prompt"].get<std::vector<int32_t>>();
    const std::vector<int32_t> a(prompt.begin(), prompt.begin() + 13), b(prompt.begin() + 5, prompt.end());
    auto alone = [&](const std::vector<int32_t>& p) {
        TestKv kv(m.kv_geometry(16), 4);
        auto r = prompt_logits(m, kv, p);
        EXPECT_TRUE(r.has_value());
        return r.has_value() ? *r : std::vector<float>();
    };
    const std::vector<float> la = alone(a), lb = alone(b);
    TestKv kv(m.kv_geometry(16), 8);
    TestSeq sa(&kv), sb(&kv);
    ASSERT_TRUE(sa.reserve(static_cast<int>(a.size())).is_ok());
    ASSERT_TRUE(sb.reserve(static_cast<int>(b.size())).is_ok());
    Batch batch;
    batch.tokens = a;
    batch.tokens.insert(batch.tokens.end(), b.begin(), b.end());
    batch.seqs.push_back({0, static_cast<int>(a.size()), 0, sa.blocks().data(), static_cast<int>(sa.blocks().size()), true});
    batch.seqs.push_back({static_cast<int>(a.size()), static_cast<int>(b.size()), 0, sb.blocks().data(),
                          static_cast<int>(sb.blocks().size()), true});
    std::vector<float> logits(2 * m.n_vocab());
    ASSERT_TRUE(m.forward(batch, kv, logits).is_ok());
    EXPECT_EQ(std::vector<float>(logits.begin(), logits.begin() + m.n_vocab()), la);
    EXPECT_EQ(std::vector<float>(logits.begin() + m.n_vocab(), logits.end()), lb);
}

INSTANTIATE_TEST_SUITE_P(Archs, MoeGolden,
                         ::testing::Values("qwen3moe", "qwen2moe", "olmoe", "mixtral", "qwen3moe-q8_0", "mixtral-q4_0",
                                           "gpt-oss", "gpt-oss-mxfp4", "qwen3moe-q2_k", "qwen3moe-q3_k",
                                           "qwen3moe-iq4_xs", "qwen3moe-iq2_xxs", "qwen3moe-iq2_xs", "qwen3moe-iq2_s",
                                           "qwen3moe-iq3_xxs", "qwen3moe-iq3_s", "qwen3moe-iq1_s", "qwen3moe-iq1_m"),
                         [](const auto& info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

// The routing counts /metrics shows: every token of every layer chose n_expert_used experts.
TEST(MoeRouting, CountsEveryTokensChoicesPerLayer) {
    Loaded l = load("qwen3moe");
    ASSERT_TRUE(l.model);
    EXPECT_TRUE(l.model->expert_routing().tokens.size() == 32);  // 2 layers x 16 experts, all 0
    const auto prompt = golden()["prompt"].get<std::vector<int32_t>>();
    TestKv kv(l.model->kv_geometry(16), 4);
    ASSERT_TRUE(prompt_logits(*l.model, kv, prompt).has_value());
    const ExpertRouting r = l.model->expert_routing();
    ASSERT_EQ(r.n_layer, 2);
    ASSERT_EQ(r.n_expert, 16);
    for (int il = 0; il < r.n_layer; ++il) {
        uint64_t sum = 0, used = 0;
        for (int e = 0; e < r.n_expert; ++e) {
            sum += r.tokens[il * r.n_expert + e];
            used += r.tokens[il * r.n_expert + e] > 0;
        }
        EXPECT_EQ(sum, prompt.size() * 4) << il;
        EXPECT_GT(used, 4u) << il;  // the router spreads the tokens
    }
}

// The Prometheus text of a routing: one counter per layer and expert, one ratio per layer.
TEST(MoeRouting, PrometheusTextHasACounterPerExpertAndTheLoadRatio) {
    ExpertRouting r{2, 4, {3, 1, 0, 4, 2, 2, 2, 2}};
    const std::string text = expert_routing_prometheus(r);
    EXPECT_NE(text.find("# TYPE ferrox_moe_routed_tokens_total counter"), std::string::npos);
    EXPECT_NE(text.find("ferrox_moe_routed_tokens_total{layer=\"0\",expert=\"3\"} 4\n"), std::string::npos) << text;
    EXPECT_NE(text.find("ferrox_moe_routed_tokens_total{layer=\"1\",expert=\"0\"} 2\n"), std::string::npos) << text;
    EXPECT_NE(text.find("ferrox_moe_layer_max_load_ratio{layer=\"0\"} 2\n"), std::string::npos) << text;  // 4 / 2
    EXPECT_NE(text.find("ferrox_moe_layer_max_load_ratio{layer=\"1\"} 1\n"), std::string::npos) << text;  // even
    EXPECT_EQ(expert_routing_prometheus(ExpertRouting{}), "");  // a dense model adds nothing
}

// A copy of one of the models with its metadata changed (`set`: a key to replace or add, as a
// GGUF value) and one tensor more (`extra`, F32, unless empty), parsed from memory.
struct Rewritten {
    std::vector<uint8_t> bytes;
    std::unique_ptr<GgufFile> file;
};
// `as_arch`: the file relabelled as that architecture (general.architecture and its keys).
Rewritten rewrite(const std::string& name, const std::string& key, const GgufValue* value, const std::string& extra,
                  std::vector<int64_t> extra_ne = {}, const std::string& as_arch = "") {
    auto src = GgufFile::open(std::string(FERROX_MOE_MODELS) + "/" + name + ".gguf");
    EXPECT_TRUE(src.has_value());
    GgufWriter w;
    bool replaced = false;
    const std::string arch = *(*src)->find("general.architecture")->as_string();
    for (const auto& [k0, v] : (*src)->metadata()) {
        std::string k = k0;
        if (!as_arch.empty() && k.rfind(arch + ".", 0) == 0) k = as_arch + k.substr(arch.size());
        if (!as_arch.empty() && k == "general.architecture") {
            GgufValue a = v;
            a.v = as_arch;
            w.add_value(k, a);
            continue;
        }
        if (k == key) {
            if (value) w.add_value(k, *value);
            replaced = true;
        } else {
            w.add_value(k, v);
        }
    }
    if (!replaced && value) w.add_value(key, *value);
    for (const TensorView& t : (*src)->tensors()) {
        const auto* p = static_cast<const uint8_t*>(t.data);
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + std::max(1, t.n_dims)),
                     std::vector<uint8_t>(p, p + t.n_bytes()));
    }
    if (!extra.empty()) {
        int64_t n = 1;
        for (int64_t d : extra_ne) n *= d;
        w.add_tensor(extra, DType::kF32, extra_ne, std::vector<uint8_t>(n * 4, 0));
    }
    Rewritten r;
    r.bytes = w.finish();
    auto f = GgufFile::parse(r.bytes.data(), r.bytes.size(), name + "-rewritten.gguf");
    EXPECT_TRUE(f.has_value()) << f.status().message();
    if (f.has_value()) r.file = std::move(*f);
    return r;
}

std::string load_error(const Rewritten& r) {
    if (!r.file) return "(not parsed)";
    ModelOptions mo;
    mo.n_threads = 1;
    mo.max_ctx = 64;
    auto m = Model::load(*r.file, mo);
    return m.has_value() ? "(loaded)" : m.status().message();
}

// What the graph does not compute is refused in one line naming it, never ignored.
TEST(MoeLoad, UnsupportedTensorsAndKeysAreOneLineErrorsNamingThem) {
    GgufValue two;
    two.type = GgufType::kUint32;
    two.v = uint64_t{2};
    const std::string grouped = load_error(rewrite("qwen3moe", "qwen3moe.expert_group_count", &two, ""));
    EXPECT_NE(grouped.find("'qwen3moe.expert_group_count'"), std::string::npos) << grouped;
    const std::string bias = load_error(rewrite("qwen3moe", "", nullptr, "blk.1.exp_probs_b.bias", {16}));
    EXPECT_NE(bias.find("tensor 'blk.1.exp_probs_b.bias' is not supported"), std::string::npos) << bias;
    const std::string router_bias = load_error(rewrite("mixtral", "", nullptr, "blk.0.ffn_gate_inp.bias", {8}));
    EXPECT_NE(router_bias.find("'blk.0.ffn_gate_inp.bias'"), std::string::npos) << router_bias;
    // Experts in a dense architecture's file, and a MoE architecture without experts.
    const std::string dense = load_error(rewrite("qwen3moe", "", nullptr, "", {}, "qwen3"));
    EXPECT_NE(dense.find("expert_count"), std::string::npos) << dense;
    const std::string no_experts = load_error(rewrite("olmoe", "olmoe.expert_count", nullptr, ""));
    EXPECT_NE(no_experts.find("missing metadata 'olmoe.expert_count'"), std::string::npos) << no_experts;
    // expert_used_count beyond expert_count.
    GgufValue many = two;
    many.v = uint64_t{99};
    const std::string used = load_error(rewrite("olmoe", "olmoe.expert_used_count", &many, ""));
    EXPECT_NE(used.find("expert_used_count"), std::string::npos) << used;
    for (const std::string* e : {&grouped, &bias, &router_bias, &dense, &no_experts, &used}) {
        EXPECT_EQ(e->find('\n'), std::string::npos) << *e;
    }
    // The unmodified copy loads (the errors above come from the changes).
    EXPECT_EQ(load_error(rewrite("qwen3moe", "", nullptr, "")), "(loaded)");
}

// One thread or two: the same bits (the expert products' units go to either thread).
TEST(MoeThreads, OneOrTwoThreadsGiveTheSameLogits) {
    const auto prompt = golden()["prompt"].get<std::vector<int32_t>>();
    std::vector<float> by_threads[2];
    for (int n = 1; n <= 2; ++n) {
        Loaded l = load("qwen3moe-q8_0", n);
        ASSERT_TRUE(l.model);
        TestKv kv(l.model->kv_geometry(16), 4);
        auto r = prompt_logits(*l.model, kv, prompt);
        ASSERT_TRUE(r.has_value());
        by_threads[n - 1] = *r;
    }
    EXPECT_EQ(by_threads[0], by_threads[1]);
}

}  // namespace
}  // namespace ferrox
