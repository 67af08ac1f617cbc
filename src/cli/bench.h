#pragma once
// `ferrox bench`: prompt-processing and generation speed of one model, measured the way
// llama.cpp's llama-bench measures it, with its output formats (a markdown table, or one JSON
// object per test with llama-bench's field names) so the two can be compared line by line.
//
// A test is ppN (one prompt of N random tokens from an empty cache, in forward passes of at
// most n_batch tokens) or tgN (N single-token forward passes at positions 0..N-1 from an empty
// cache, as llama-bench's test_gen does), or tgNxS (N steps of one token for each of S sequences
// at once, as a server's decode step with S running requests; t/s counts all S), or tgNxS+K
// (each of the S sequences has K more one-token entries at its next positions in every step,
// the shape of a step verifying K draft tokens of speculative decoding, all accepted: t/s
// counts the S * (1 + K) positions). "@ dD": the tg test starts after D positions of context
// per sequence (filled before the timing, as llama-bench's -d). Each runs once as a warm-up
// (tg: one step), then n_reps timed times; the forward passes are all that is timed.
//
// Threading: runs on the calling thread; the model's thread pool has n_threads workers.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/gguf.h"
#include "model/model.h"

namespace ferrox::cli {

enum class BenchOutput { kMarkdown, kJsonl };

struct BenchOptions {
    std::vector<int> n_prompt{512};  // one pp test per value; 0: none
    std::vector<int> n_gen{128};     // one tg test per value; 0: none
    std::vector<int> n_parallel{1};  // each tg test once per value: sequences decoded together
    std::vector<int> n_verify{0};    // each tg test once per value: draft entries per sequence
    std::vector<int> n_depth{0};     // each tg test once per value: context before it
    std::vector<int> n_threads;      // one round of tests per value; empty: all cores
    int n_reps = 5;
    int n_batch = 512;                // most tokens in one forward pass
    bool mmap = ModelOptions{}.mmap;  // map the file, or copy the weights (as `ferrox run`)
    bool ggml_order = ModelOptions{}.ggml_order;  // Q4_1 in ggml's x86 order (ModelOptions)
    BenchOutput output = BenchOutput::kMarkdown;
};

// "512,1024" -> {512, 1024}. Every value must be an integer >= min_value.
Expected<std::vector<int>> parse_int_list(const std::string& text, int min_value);

// Loads the model with the given options (one load per thread count: the thread pool is fixed
// at load). The result must keep its weights alive.
using BenchLoader = std::function<Expected<std::shared_ptr<Model>>(const ModelOptions&)>;

// Runs every test of `opts` on the model that `load` gives and hands `emit` each output line
// (with its newline) as soon as it is known: the markdown header first, then one line per test.
// `file` is the model's GGUF, read for its description (size, parameters, type, BOS);
// `model_filename` is what the output reports as the model's file.
Status run_bench(const GgufFile& file, const std::string& model_filename, const BenchLoader& load,
                 const BenchOptions& opts, const std::function<void(const std::string&)>& emit);

// `ferrox bench ...`: argv[1] is "bench". Returns the process exit code.
int cmd_bench(int argc, char** argv);

// The short git commit of the source tree ferrox was built from ("unknown" without git);
// generated at build time by build_info.cmake.
const char* build_commit();

}  // namespace ferrox::cli
