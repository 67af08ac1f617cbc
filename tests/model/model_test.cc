// The decoder against llama.cpp on tiny random-weight models of every architecture variant
// and tensor type (golden data from scripts/golden/tiny_llamacpp.py), and the invariants of the
// batched forward: batching, chunking and KV block size never change a single bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_kv.h"
#include "testing/generate.h"
#include "kernels/quants.h"
#include "kernels/test_util.h"
#include "loader/gguf.h"
#include "loader/gguf_writer.h"
#include "model/model.h"
#include "testing/tiny_model.h"

namespace ferrox {
namespace {

struct Loaded {
    std::vector<uint8_t> bytes;
    std::unique_ptr<GgufFile> gguf;
    std::unique_ptr<Model> model;
};

Loaded load_tiny(const TinyModelSpec& spec, int n_threads = 2, int max_batch_tokens = 64) {
    Loaded l;
    l.bytes = make_tiny_model(spec);
    auto g = GgufFile::parse(l.bytes.data(), l.bytes.size(), "tiny.gguf");
    EXPECT_TRUE(g.has_value()) << g.status().message();
    l.gguf = std::move(*g);
    ModelOptions mo;
    mo.n_threads = n_threads;
    mo.max_ctx = 256;
    mo.max_batch_tokens = max_batch_tokens;
    auto m = Model::load(*l.gguf, mo);
    EXPECT_TRUE(m.has_value()) << m.status().message();
    l.model = std::move(*m);
    return l;
}

nlohmann::json golden() {
    std::ifstream in(std::string(FERROX_SOURCE_DIR) + "/tests/model/golden/tiny_llamacpp.json");
    EXPECT_TRUE(in.good());
    return nlohmann::json::parse(in);
}

// Tolerances: ferrox accumulates attention in f32 where llama.cpp rounds some intermediates
// to f16, and sums in a different order; on these random models that moves logits by ~1e-3.
TEST(TinyModels, MatchLlamaCpp) {
    const nlohmann::json g = golden();
    int n_checked = 0;
    for (const auto& [name, spec] : tiny_model_variants()) {
        SCOPED_TRACE(name);
        ASSERT_TRUE(g.contains(name)) << "no golden data for " << name << ": rerun the script";
        const auto& ref = g[name];
        Loaded l = load_tiny(spec);
        ASSERT_TRUE(l.model);
        std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
        std::vector<float> want = ref["logits"].get<std::vector<float>>();
        TestKv kv(l.model->kv_geometry(16), 16);
        auto got = prompt_logits(*l.model, kv, prompt);
        ASSERT_TRUE(got.has_value()) << got.status().message();
        ASSERT_EQ(got->size(), want.size());
        double dot = 0, na = 0, nb = 0, max_diff = 0, max_abs = 0;
        size_t arg_got = 0, arg_want = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            dot += (*got)[i] * want[i];
            na += (*got)[i] * (*got)[i];
            nb += want[i] * want[i];
            max_diff = std::max(max_diff, std::abs(double((*got)[i]) - want[i]));
            max_abs = std::max(max_abs, std::abs(double(want[i])));
            if ((*got)[i] > (*got)[arg_got]) arg_got = i;
            if (want[i] > want[arg_want]) arg_want = i;
        }
        const double cos = dot / std::sqrt(na * nb);
        EXPECT_GT(cos, 0.9999) << "cosine " << cos;
        std::printf("%-28s cosine %.8f max diff %.5f of %.3f\n", name.c_str(), cos, max_diff, max_abs);
        EXPECT_LT(max_diff, 0.02 * max_abs + 0.01) << "max |diff| " << max_diff << " of " << max_abs;
        EXPECT_EQ(arg_got, arg_want);

        // Greedy continuation, teacher-forced: feed llama.cpp's greedy tokens one at a time
        // and require the same argmax at every step where llama.cpp's top-2 margin is clear
        // (random weights produce near-ties that 1e-4 of rounding may flip).
        std::vector<int32_t> want_greedy = ref["greedy"].get<std::vector<int32_t>>();
        std::vector<float> margins = ref["margins"].get<std::vector<float>>();
        TestKv kv2(l.model->kv_geometry(16), 16);
        TestSeq seq(&kv2);
        std::vector<float> step_logits(l.model->n_vocab());
        int n_past = 0, n_clear = 0;
        std::vector<int32_t> feed = prompt;
        for (size_t i = 0; i < want_greedy.size(); ++i) {
            ASSERT_TRUE(seq.reserve(n_past + static_cast<int>(feed.size())).is_ok());
            Batch b;
            b.tokens = feed;
            b.seqs.push_back({0, static_cast<int>(feed.size()), n_past, seq.blocks().data(),
                              static_cast<int>(seq.blocks().size()), true});
            ASSERT_TRUE(l.model->forward(b, kv2, step_logits).is_ok());
            n_past += static_cast<int>(feed.size());
            const int32_t arg = static_cast<int32_t>(
                std::max_element(step_logits.begin(), step_logits.end()) - step_logits.begin());
            if (margins[i] > 0.01f * static_cast<float>(max_abs)) {
                EXPECT_EQ(arg, want_greedy[i]) << "step " << i << " margin " << margins[i];
                ++n_clear;
            }
            feed = {want_greedy[i]};
        }
        EXPECT_GE(n_clear, 8) << "too few clear steps to compare";
        ++n_checked;
    }
    EXPECT_GE(n_checked, 15);
}

std::vector<float> run_alone(Model& m, const std::vector<int32_t>& prompt, int block_size, int chunk,
                             KvType kv_type = KvType::kF16) {
    TestKv kv(m.kv_geometry(block_size, kv_type), 256 / block_size + 1);
    TestSeq seq(&kv);
    EXPECT_TRUE(seq.reserve(static_cast<int>(prompt.size())).is_ok());
    std::vector<float> logits(m.n_vocab());
    for (size_t i = 0; i < prompt.size(); i += chunk) {
        Batch b;
        const int n = std::min<int>(chunk, static_cast<int>(prompt.size() - i));
        b.tokens.assign(prompt.begin() + i, prompt.begin() + i + n);
        b.seqs.push_back({0, n, static_cast<int>(i), seq.blocks().data(),
                          static_cast<int>(seq.blocks().size()), true});
        EXPECT_TRUE(m.forward(b, kv, logits).is_ok());
    }
    return logits;
}

// Every weight type's matrix product (packed or not: one activation row, a few, many) keeps
// one order per output, so neither chunking, nor the block size, nor the batch a sequence
// shares changes a bit of its logits.
TEST(Forward, BatchingChunkingAndBlockSizeChangeNothing) {
    for (DType type : {DType::kQ4_K, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ6_K, DType::kF16}) {
        SCOPED_TRACE(std::string(dtype_name(type)));
        TinyModelSpec spec;
        spec.weight_type = type;
        Loaded l = load_tiny(spec);
        Model& m = *l.model;
        const std::vector<int32_t> a = {1, 5, 9, 200, 3, 3, 8, 100, 17, 42, 11};
        const std::vector<int32_t> b = {7, 300, 12, 4};
        const std::vector<float> la = run_alone(m, a, 16, 64);
        const std::vector<float> lb = run_alone(m, b, 16, 64);
        EXPECT_EQ(run_alone(m, a, 4, 64), la);  // block size
        EXPECT_EQ(run_alone(m, a, 16, 3), la);  // chunked prefill
        // Token by token runs attention in the decode summation order (attention_f16.h), chunks
        // of two or more in the prefill order: the same values up to rounding, not the same bits.
        const std::vector<float> one_by_one = run_alone(m, a, 256, 1);
        for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(one_by_one[i], la[i], 1e-3 * (1 + std::abs(la[i]))) << i;

        // Both sequences in one batch.
        TestKv kv(m.kv_geometry(8), 8);
        TestSeq sa(&kv), sb(&kv);
        ASSERT_TRUE(sa.reserve(static_cast<int>(a.size()) + 1).is_ok());
        ASSERT_TRUE(sb.reserve(static_cast<int>(b.size())).is_ok());
        Batch batch;
        batch.tokens = a;
        batch.tokens.insert(batch.tokens.end(), b.begin(), b.end());
        batch.seqs.push_back(
            {0, static_cast<int>(a.size()), 0, sa.blocks().data(), static_cast<int>(sa.blocks().size()), true});
        batch.seqs.push_back({static_cast<int>(a.size()), static_cast<int>(b.size()), 0, sb.blocks().data(),
                              static_cast<int>(sb.blocks().size()), true});
        std::vector<float> logits(2 * m.n_vocab());
        ASSERT_TRUE(m.forward(batch, kv, logits).is_ok());
        EXPECT_EQ(std::vector<float>(logits.begin(), logits.begin() + m.n_vocab()), la);
        EXPECT_EQ(std::vector<float>(logits.begin() + m.n_vocab(), logits.end()), lb);

        // A decode step of a alone, then the same step again in a batch with another prompt
        // (decode-order attention for a, prefill order for the prompt, 1 + 9 activation rows).
        const int32_t next = 77;
        auto step_of_a = [&](const std::vector<int32_t>& other, std::vector<float>* out) {
            TestKv kv2(m.kv_geometry(8), 16);
            TestSeq s1(&kv2), s2(&kv2);
            ASSERT_TRUE(s1.reserve(static_cast<int>(a.size()) + 1).is_ok());
            ASSERT_TRUE(s2.reserve(static_cast<int>(other.size()) + 1).is_ok());
            Batch pre;
            pre.tokens = a;
            pre.seqs.push_back(
                {0, static_cast<int>(a.size()), 0, s1.blocks().data(), static_cast<int>(s1.blocks().size()), true});
            std::vector<float> lg(m.n_vocab());
            ASSERT_TRUE(m.forward(pre, kv2, lg).is_ok());
            Batch step;
            step.tokens = {next};
            step.tokens.insert(step.tokens.end(), other.begin(), other.end());
            step.seqs.push_back({0, 1, static_cast<int>(a.size()), s1.blocks().data(),
                                 static_cast<int>(s1.blocks().size()), true});
            if (!other.empty()) {
                step.seqs.push_back({1, static_cast<int>(other.size()), 0, s2.blocks().data(),
                                     static_cast<int>(s2.blocks().size()), true});
            }
            std::vector<float> lg2(step.seqs.size() * m.n_vocab());
            ASSERT_TRUE(m.forward(step, kv2, lg2).is_ok());
            out->assign(lg2.begin(), lg2.begin() + m.n_vocab());
        };
        std::vector<float> alone, batched;
        step_of_a({}, &alone);
        step_of_a({4, 8, 15, 16, 23, 42, 108, 2, 9}, &batched);
        EXPECT_EQ(batched, alone);
    }
}

// A decode step of 16 sequences (from 12 on, each layer's KV is asked for during the products
// before its attention: Model::plan_kv_prefetch) gives each sequence the logits of its step
// alone, for the weight types whose many-column kernels take the feed and one that does not,
// with sequences shorter than a block, ending on a block's edge and spanning several blocks.
TEST(Forward, WideDecodeStepsChangeNothing) {
    for (DType type : {DType::kQ4_1, DType::kQ4_0, DType::kQ8_0}) {
        SCOPED_TRACE(std::string(dtype_name(type)));
        TinyModelSpec spec;
        spec.weight_type = type;
        Loaded l = load_tiny(spec);
        Model& m = *l.model;
        constexpr int kSeqs = 16, kBlock = 8;
        std::vector<std::vector<int32_t>> prompts(kSeqs);
        for (int i = 0; i < kSeqs; ++i) {
            prompts[i].resize(static_cast<size_t>(2 + (i * 7) % 41));  // 2 .. 42 tokens, 8 and 16 among them
            for (size_t j = 0; j < prompts[i].size(); ++j) prompts[i][j] = static_cast<int32_t>((i * 31 + j * 17 + 5) % 320);
        }
        TestKv kv(m.kv_geometry(kBlock), kSeqs * (48 / kBlock + 1));
        std::vector<std::unique_ptr<TestSeq>> seqs;
        std::vector<float> lg(m.n_vocab());
        Batch step;
        for (int i = 0; i < kSeqs; ++i) {
            const std::vector<int32_t>& p = prompts[i];
            const int n_pre = static_cast<int>(p.size()) - 1;
            seqs.push_back(std::make_unique<TestSeq>(&kv));
            ASSERT_TRUE(seqs.back()->reserve(n_pre + 1).is_ok());
            const TestSeq& s = *seqs.back();
            Batch pre;
            pre.tokens.assign(p.begin(), p.end() - 1);
            pre.seqs.push_back({0, n_pre, 0, s.blocks().data(), static_cast<int>(s.blocks().size()), true});
            ASSERT_TRUE(m.forward(pre, kv, lg).is_ok());
            step.seqs.push_back({i, 1, n_pre, s.blocks().data(), static_cast<int>(s.blocks().size()), true});
            step.tokens.push_back(p.back());
        }
        std::vector<float> logits(static_cast<size_t>(kSeqs) * m.n_vocab());
        ASSERT_TRUE(m.forward(step, kv, logits).is_ok());
        for (int i = 0; i < kSeqs; ++i) {
            SCOPED_TRACE(i);
            // Alone: the prompt but its last token in one chunk, then that token's decode step.
            const std::vector<float> want = run_alone(m, prompts[i], kBlock, static_cast<int>(prompts[i].size()) - 1);
            ASSERT_EQ(std::vector<float>(logits.begin() + static_cast<size_t>(i) * m.n_vocab(),
                                         logits.begin() + static_cast<size_t>(i + 1) * m.n_vocab()),
                      want);
        }
    }
}

// A Q8_0 KV cache (--kv-type q8_0) stores K and V in 8 bits: the logits move by the rounding
// of K and V, much less than the spread of the logits, and the batch still changes nothing.
TEST(Forward, Q8KvCacheIsCloseToF16) {
    TinyModelSpec spec;
    spec.weight_type = DType::kQ8_0;
    Loaded l = load_tiny(spec);
    Model& m = *l.model;
    std::vector<int32_t> p;
    for (int i = 0; i < 40; ++i) p.push_back((i * 37 + 11) % spec.n_vocab);
    auto run = [&](KvType type, int chunk) {
        TestKv kv(m.kv_geometry(16, type), 4);
        TestSeq seq(&kv);
        EXPECT_TRUE(seq.reserve(static_cast<int>(p.size())).is_ok());
        std::vector<float> logits(m.n_vocab());
        for (size_t i = 0; i < p.size(); i += chunk) {
            Batch b;
            const int n = std::min<int>(chunk, static_cast<int>(p.size() - i));
            b.tokens.assign(p.begin() + i, p.begin() + i + n);
            b.seqs.push_back({0, n, static_cast<int>(i), seq.blocks().data(), static_cast<int>(seq.blocks().size()), true});
            EXPECT_TRUE(m.forward(b, kv, logits).is_ok());
        }
        return logits;
    };
    const std::vector<float> f16 = run(KvType::kF16, 64);
    const std::vector<float> q8 = run(KvType::kQ8_0, 64);
    EXPECT_EQ(run(KvType::kQ8_0, 5), q8);  // chunking changes no bit
    float max_diff = 0, lo = f16[0], hi = f16[0];
    for (size_t i = 0; i < f16.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(f16[i] - q8[i]));
        lo = std::min(lo, f16[i]);
        hi = std::max(hi, f16[i]);
    }
    EXPECT_GT(max_diff, 0.0f);  // it is a different cache
    EXPECT_LT(max_diff, 0.02f * (hi - lo)) << "spread " << hi - lo;
    EXPECT_EQ(std::max_element(q8.begin(), q8.end()) - q8.begin(), std::max_element(f16.begin(), f16.end()) - f16.begin());

    // A head size that is not a multiple of 32 cannot use it: a clear error, not a crash.
    TinyModelSpec odd = spec;
    odd.head_dim = 48;
    odd.n_embd = 192;
    Loaded lo48 = load_tiny(odd);
    const Status st = lo48.model->check_kv_type(KvType::kQ8_0);
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("48"), std::string::npos);
}

TEST(Forward, ThreadCountChangesNothing) {
    TinyModelSpec spec;
    spec.weight_type = DType::kQ8_0;
    Loaded one = load_tiny(spec, 1);
    Loaded three = load_tiny(spec, 3);
    const std::vector<int32_t> p = {2, 4, 6, 8, 10, 300};
    EXPECT_EQ(run_alone(*one.model, p, 16, 64), run_alone(*three.model, p, 16, 64));

    // From 16 tokens on, the per-token ops between the products are split by token and
    // attention deals its (token, head) items out in turn; neither changes a bit, with
    // either cache type.
    Loaded two = load_tiny(spec, 2);
    std::vector<int32_t> longer(45);
    for (size_t i = 0; i < longer.size(); ++i) longer[i] = static_cast<int32_t>((i * 53 + 11) % 320);
    for (KvType kv_type : {KvType::kF16, KvType::kQ8_0}) {
        const std::vector<float> want = run_alone(*one.model, longer, 16, 64, kv_type);
        EXPECT_EQ(run_alone(*two.model, longer, 16, 64, kv_type), want);
        EXPECT_EQ(run_alone(*three.model, longer, 16, 64, kv_type), want);
        EXPECT_EQ(run_alone(*two.model, longer, 16, 20, kv_type), want);  // 20, 20, then 5 tokens
    }
}

// The AVX-512 kernels (native where the CPU has them, else emulated instruction by instruction)
// give the AVX2 kernels' logits bit for bit, for every packed weight type, in prompts (many
// activation rows) and in small chunks (the decode kernels).
TEST(Forward, Avx512KernelsGiveTheAvx2Bits) {
    if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 here";
    kernel_test::install_avx512_emulated();
    const char* wide = cpu_has_avx512() ? "avx512" : "avx512_emulated";
    std::vector<int32_t> prompt(45);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % 320);
    for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                       DType::kF16}) {
        SCOPED_TRACE(dtype_name(type));
        TinyModelSpec spec;
        spec.weight_type = type;
        std::vector<float> want[2], got[2];
        for (const char* isa : {"avx2", wide}) {
            kernels_force_isa(isa);  // before the load: the weights are repacked by its table
            Loaded l = load_tiny(spec, 2);
            std::vector<float>* out = std::string(isa) == "avx2" ? want : got;
            out[0] = run_alone(*l.model, prompt, 16, 64);
            out[1] = run_alone(*l.model, prompt, 16, 3);
        }
        kernels_force_isa(kernel_test::best_isa());
        EXPECT_EQ(got[0], want[0]) << "prompt";
        EXPECT_EQ(got[1], want[1]) << "chunks of 3";
    }
}

// Unless the weights stay mapped, every weight a forward pass reads is the model's own copy
// (repacked or copied): clobbering the file's tensor bytes after load changes nothing. With
// the weights mapped, the same clobbering changes the logits (the embedding table is read from
// the file), so the check can fail.
TEST(Forward, CopiedWeightsDoNotReadTheFile) {
    for (DType type : {DType::kQ5_0, DType::kQ8_0}) {  // matrices copied as they are / repacked
        TinyModelSpec spec;
        spec.weight_type = type;
        const std::vector<int32_t> p = {3, 14, 15, 92, 65, 35};
        for (bool mmap : {false, true}) {
            SCOPED_TRACE(std::string(dtype_name(type)) + (mmap ? " mapped" : " copied"));
            std::vector<uint8_t> bytes = make_tiny_model(spec);
            auto g = GgufFile::parse(bytes.data(), bytes.size(), "tiny.gguf");
            ASSERT_TRUE(g.has_value()) << g.status().message();
            ModelOptions mo;
            mo.n_threads = 2;
            mo.max_ctx = 256;
            mo.mmap = mmap;
            auto m = Model::load(**g, mo);
            ASSERT_TRUE(m.has_value()) << m.status().message();
            const std::vector<float> want = run_alone(**m, p, 16, 64);
            for (const TensorView& t : (*g)->tensors()) {
                std::memset(const_cast<void*>(t.data), 0x55, static_cast<size_t>(t.n_bytes()));
            }
            const std::vector<float> got = run_alone(**m, p, 16, 64);
            if (mmap) {
                EXPECT_NE(got, want);
            } else {
                EXPECT_EQ(got, want);
            }
        }
    }
}

// F16 prompts of 64 tokens a thread or more split tokens between threads instead of rows
// (matmuls): the same bits as one thread, and as the row split of smaller chunks.
TEST(Forward, F16PromptTokenSplitChangesNothing) {
    TinyModelSpec spec;
    spec.weight_type = DType::kF16;
    Loaded one = load_tiny(spec, 1, 256);
    Loaded two = load_tiny(spec, 2, 256);
    Loaded three = load_tiny(spec, 3, 256);
    std::vector<int32_t> p(200);
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>((i * 37 + 5) % 320);
    const std::vector<float> want = run_alone(*one.model, p, 16, 200);
    EXPECT_EQ(run_alone(*two.model, p, 16, 200), want);    // 100 tokens a thread
    EXPECT_EQ(run_alone(*three.model, p, 16, 200), want);  // 66 or 67
    EXPECT_EQ(run_alone(*two.model, p, 16, 64), want);     // rows split
}

TEST(Forward, RejectsBadBatches) {
    Loaded l = load_tiny(TinyModelSpec{});
    TestKv kv(l.model->kv_geometry(16), 4);
    TestSeq seq(&kv);
    ASSERT_TRUE(seq.reserve(16).is_ok());
    std::vector<float> logits(l.model->n_vocab());
    Batch b;
    b.tokens = {1, 99999};
    b.seqs.push_back({0, 2, 0, seq.blocks().data(), 1, true});
    EXPECT_FALSE(l.model->forward(b, kv, logits).is_ok());  // token id out of range
    b.tokens = {1, 2};
    b.seqs[0].n_past = 15;  // positions 15, 16: block table too short
    EXPECT_FALSE(l.model->forward(b, kv, logits).is_ok());
}

std::string load_error(std::vector<uint8_t> bytes) {
    auto g = GgufFile::parse(bytes.data(), bytes.size(), "m.gguf");
    if (!g.has_value()) return g.status().message();
    auto m = Model::load(**g, ModelOptions{1, 8, 64});
    return m.has_value() ? "" : m.status().message();
}

TEST(ModelLoad, OneLineErrors) {
    TinyModelSpec spec;
    {  // unknown architecture
        GgufWriter w;
        w.add_string("general.architecture", "mamba9");
        EXPECT_NE(load_error(w.finish()).find("unsupported architecture 'mamba9'"), std::string::npos);
    }
    {  // missing hyperparameter
        GgufWriter w;
        w.add_string("general.architecture", "llama");
        EXPECT_NE(load_error(w.finish()).find("missing metadata 'llama.embedding_length'"), std::string::npos);
    }
    // A valid tiny model with one tensor renamed: the loader names what is missing.
    std::vector<uint8_t> bytes = make_tiny_model(spec);
    const std::string from = "blk.1.ffn_up.weight", to = "blk.1.ffn_XX.weight";
    auto it = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
    ASSERT_NE(it, bytes.end());
    std::copy(to.begin(), to.end(), it);
    std::string e = load_error(bytes);
    EXPECT_NE(e.find("missing tensor 'blk.1.ffn_up.weight'"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace ferrox
