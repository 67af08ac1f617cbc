#include "testing/tiny_model.h"

#include <cmath>
#include <cstring>

#include "kernels/quants.h"
#include "loader/gguf_writer.h"

namespace ferrox {

namespace {

// splitmix64: the same stream on every platform and compiler.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [-1, 1).
    float uniform() { return static_cast<float>(static_cast<double>(next() >> 11) / 4503599627370496.0 - 1.0); }
};

std::vector<uint8_t> quantized(DType type, const std::vector<float>& v, int64_t n_in) {
    const int64_t n_rows = static_cast<int64_t>(v.size()) / n_in;
    const int64_t rb = dtype_row_bytes(type, n_in);
    std::vector<uint8_t> out(static_cast<size_t>(rb * n_rows));
    for (int64_t r = 0; r < n_rows; ++r) quantize_row_ref(type, v.data() + r * n_in, out.data() + r * rb, n_in);
    return out;
}

}  // namespace

std::vector<uint8_t> make_tiny_model(const TinyModelSpec& s) {
    Rng rng{s.seed * 0x1234567ull + 99};
    GgufWriter w;
    const std::string a = s.arch;
    w.add_string("general.architecture", a);
    w.add_string("general.name", "ferrox-tiny-" + a);
    w.add_u32(a + ".context_length", 512);
    w.add_u32(a + ".embedding_length", s.n_embd);
    w.add_u32(a + ".block_count", s.n_layer);
    w.add_u32(a + ".feed_forward_length", s.n_ff);
    w.add_u32(a + ".attention.head_count", s.n_head);
    w.add_u32(a + ".attention.head_count_kv", s.n_head_kv);
    w.add_u32(a + ".attention.key_length", s.head_dim);
    w.add_u32(a + ".attention.value_length", s.head_dim);
    w.add_u32(a + ".rope.dimension_count", s.head_dim);
    w.add_f32(a + ".rope.freq_base", s.rope_freq_base);
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_u32(a + ".vocab_size", s.n_vocab);
    w.add_string("tokenizer.ggml.model", "none");

    auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, float scale) {
        std::vector<float> v(static_cast<size_t>(n_in * n_out));
        for (float& x : v) x = rng.uniform() * scale;
        w.add_tensor(name, s.weight_type, {n_in, n_out}, quantized(s.weight_type, v, n_in));
    };
    auto vector = [&](const std::string& name, int64_t n, float center, float spread) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = center + rng.uniform() * spread;
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
        w.add_tensor(name, DType::kF32, {n}, std::move(b));
    };

    const int q_dim = s.n_head * s.head_dim;
    const int kv_dim = s.n_head_kv * s.head_dim;
    matrix("token_embd.weight", s.n_embd, s.n_vocab, 1.0f);
    vector("output_norm.weight", s.n_embd, 1.0f, 0.2f);
    if (!s.tied_output) matrix("output.weight", s.n_embd, s.n_vocab, 0.2f);
    if (s.rope_freqs) vector("rope_freqs.weight", s.head_dim / 2, 2.0f, 1.0f);
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
    for (int il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        vector(p + "attn_norm.weight", s.n_embd, 1.0f, 0.2f);
        matrix(p + "attn_q.weight", s.n_embd, q_dim, 3.0f * in_scale);
        matrix(p + "attn_k.weight", s.n_embd, kv_dim, 3.0f * in_scale);
        matrix(p + "attn_v.weight", s.n_embd, kv_dim, 1.5f * in_scale);
        if (s.arch == "qwen2") {
            vector(p + "attn_q.bias", q_dim, 0.0f, 0.2f);
            vector(p + "attn_k.bias", kv_dim, 0.0f, 0.2f);
            vector(p + "attn_v.bias", kv_dim, 0.0f, 0.2f);
        }
        if (s.arch == "qwen3") {
            vector(p + "attn_q_norm.weight", s.head_dim, 1.0f, 0.3f);
            vector(p + "attn_k_norm.weight", s.head_dim, 1.0f, 0.3f);
        }
        matrix(p + "attn_output.weight", q_dim, s.n_embd, 1.5f / std::sqrt(static_cast<float>(q_dim)));
        vector(p + "ffn_norm.weight", s.n_embd, 1.0f, 0.2f);
        matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff, 2.0f * in_scale);
        matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, 2.0f * in_scale);
        matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, 1.5f / std::sqrt(static_cast<float>(s.n_ff)));
    }
    return w.finish();
}

std::vector<std::pair<std::string, TinyModelSpec>> tiny_model_variants() {
    std::vector<std::pair<std::string, TinyModelSpec>> out;
    const DType types[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K,
                           DType::kQ6_K};
    uint64_t seed = 1;
    for (DType t : types) {
        TinyModelSpec s;
        s.weight_type = t;
        s.seed = seed++;
        out.emplace_back("llama-" + std::string(dtype_name(t)), s);
    }
    for (const char* arch : {"qwen2", "qwen3"}) {
        for (DType t : {DType::kF32, DType::kQ8_0}) {
            TinyModelSpec s;
            s.arch = arch;
            s.weight_type = t;
            s.seed = seed++;
            s.rope_freq_base = 1000000.0f;
            out.emplace_back(std::string(arch) + "-" + std::string(dtype_name(t)), s);
        }
    }
    {
        TinyModelSpec s;  // tied embeddings, MHA (n_head_kv == n_head), llama3 rope factors
        s.tied_output = true;
        s.n_head_kv = 4;
        s.rope_freqs = true;
        s.weight_type = DType::kQ8_0;
        s.seed = seed++;
        out.emplace_back("llama-tied-ropefreqs-q8_0", s);
    }
    {
        TinyModelSpec s;  // qwen3 with head_dim != n_embd / n_head
        s.arch = "qwen3";
        s.head_dim = 128;
        s.n_head = 4;
        s.n_head_kv = 1;
        s.weight_type = DType::kF16;
        s.seed = seed++;
        out.emplace_back("qwen3-hd128-f16", s);
    }
    return out;
}

}  // namespace ferrox
