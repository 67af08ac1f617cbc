#pragma once
// Encoder-only transformers of the BERT family (arch_bert.cc): absolute position embeddings,
// token types, post-layer-norm blocks, GELU (erf), bidirectional attention without a KV cache.
// One encode() call runs many sequences of different lengths in one batched forward pass:
// every weight matrix is read once per call over all their tokens, and attention is threaded
// across (sequence, head) pairs. Weights are kept in f32 (a checkpoint's F16/BF16 or GGUF
// quantized tensors are widened at load), so results follow the reference within float
// rounding.
//
// Threading: encode() may be called from one thread at a time (it uses the model's pool and
// its scratch buffers); the accessors from any thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "loader/gguf.h"
#include "loader/safetensors.h"

namespace ferrox {

enum class Pooling { kMean, kCls, kLast };
const char* pooling_name(Pooling p);  // "mean", "cls", "last"

struct EncoderHParams {
    std::string arch = "bert";
    int n_vocab = 0;
    int n_embd = 0;
    int n_layer = 0;
    int n_head = 0;
    int n_ff = 0;
    int n_pos = 0;          // max_position_embeddings: the longest input
    int n_token_types = 0;  // type_vocab_size
    float ln_eps = 1e-12f;
    // What sentence-transformers' modules say (or GGUF's bert.pooling_type): how token states
    // become one vector, and whether it is L2-normalized.
    Pooling pooling = Pooling::kMean;
    bool normalize = true;
    int max_tokens = 0;  // the longest input served: sentence_bert_config's max_seq_length, else n_pos
    bool matryoshka = false;  // trained so that a prefix of the vector is an embedding too
};

struct EncoderOptions {
    int n_threads = 0;            // 0: all cores
    int max_batch_tokens = 2048;  // the most tokens one encode() takes (scratch is sized for it)
    std::optional<Pooling> pooling;  // set: replaces the pooling the checkpoint declares (--pooling)
};

class EncoderModel {
  public:
    // A safetensors directory: config.json (model_type bert), the weights (model.safetensors or
    // a sharded index), optional modules.json + 1_Pooling/config.json + sentence_bert_config.json.
    static Expected<std::unique_ptr<EncoderModel>> load_dir(const std::string& dir, const EncoderOptions& opts);
    // llama.cpp's conversion: general.architecture = bert.
    static Expected<std::unique_ptr<EncoderModel>> load_gguf(const GgufFile& file, const EncoderOptions& opts);
    ~EncoderModel();

    const EncoderHParams& hparams() const { return hp_; }
    int max_batch_tokens() const { return opts_.max_batch_tokens; }
    int n_threads() const { return pool_->n_threads(); }
    int64_t weight_bytes() const;

    // One pooled vector of n_embd floats per sequence into out (seqs.size() * n_embd), pooled
    // and normalized as the hparams say. Every sequence 1..max_tokens ids below n_vocab; their
    // total at most max_batch_tokens (kInvalidArgument otherwise).
    Status encode(std::span<const std::span<const int32_t>> seqs, std::span<float> out);
    // The same without pooling: every token's final hidden state, (total tokens, n_embd).
    Status encode_tokens(std::span<const std::span<const int32_t>> seqs, std::span<float> out);

  private:
    EncoderModel() = default;
    // The weight matrices packed once at load into gemm_f32_packed's panels (kernels/ops.h).
    struct Layer {
        PackedMatrix w_qkv;                  // (3 n_embd, n_embd) rows q|k|v
        std::vector<float> b_qkv;         // (3 n_embd)
        PackedMatrix w_o;                    // (n_embd, n_embd)
        std::vector<float> b_o;           // (n_embd)
        std::vector<float> ln1_w, ln1_b;  // (n_embd) after attention + residual
        PackedMatrix w_up;                   // (n_ff, n_embd)
        std::vector<float> b_up;          // (n_ff)
        PackedMatrix w_down;                 // (n_embd, n_ff)
        std::vector<float> b_down;        // (n_embd)
        std::vector<float> ln2_w, ln2_b;  // (n_embd) after the FFN + residual
    };
    // Looks a tensor up by its role ("tok", "pos", "type", "ln_emb.w", "q.w" ... with the layer).
    using TensorLookup = std::function<Expected<TensorView>(const std::string& role, int il)>;
    Status init(const TensorLookup& lookup, const std::string& name);
    Status forward(std::span<const std::span<const int32_t>> seqs);
    // y = epi(x W^T) over n_tok rows of x (n_tok, w.k) into y (n_tok, w.n), on the pool.
    void linear(const float* x, int64_t n_tok, const PackedMatrix& w, const GemmEpilogue& epi, float* y);
    // y = LN(x) * w + b per token over n_tok rows of n_embd; y may be x.
    void layer_norm(const float* x, const std::vector<float>& w, const std::vector<float>& b, int64_t n_tok,
                    float* y);
    void attention(std::span<const std::span<const int32_t>> seqs);

    EncoderHParams hp_;
    EncoderOptions opts_;
    std::vector<float> tok_embd_, pos_embd_, type_embd_;  // (n_vocab|n_pos|n_types, n_embd)
    std::vector<float> ln_emb_w_, ln_emb_b_;             // (n_embd)
    std::vector<Layer> layers_;
    std::unique_ptr<ThreadPool> pool_;
    // Scratch, sized at load for max_batch_tokens tokens.
    std::vector<float> x_, qkv_, att_, tmp_, ff_;  // (T, n_embd), (T, 3 n_embd), (T, n_embd) x2, (T, n_ff)
    std::vector<float> scores_;                    // per thread: (n_pos, n_pos) + (head_dim, n_pos)
    std::vector<int> seq_begin_;
};

}  // namespace ferrox
