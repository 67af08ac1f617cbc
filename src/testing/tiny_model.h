#pragma once
// Tiny random-weight GGUF models of every supported architecture and tensor type, built
// deterministically from a seed. The test suite builds them in memory; `ferrox-make-tiny`
// writes the same bytes to disk so scripts/golden/tiny_llamacpp.py can run llama.cpp on them.

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace ferrox {

struct TinyModelSpec {
    std::string arch = "llama";  // llama | mistral | qwen2 | qwen3
    DType weight_type = DType::kF32;  // every matrix, embeddings included
    int n_vocab = 320;
    int n_embd = 256;
    int n_layer = 2;
    int n_head = 4;
    int n_head_kv = 2;
    int n_ff = 512;
    int head_dim = 64;
    float rope_freq_base = 10000.0f;
    bool tied_output = false;
    bool rope_freqs = false;  // llama3-style frequency factors tensor
    uint64_t seed = 1;
};

// The GGUF image. Vocabulary type "none": token ids only.
std::vector<uint8_t> make_tiny_model(const TinyModelSpec& spec);

// The variants the golden test covers, with stable names ("llama-q4_K", "qwen3-f32", ...).
std::vector<std::pair<std::string, TinyModelSpec>> tiny_model_variants();

}  // namespace ferrox
