#include "cli/bench.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "cli/args.h"
#include "core/thread_pool.h"
#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "kernels/quants.h"
#include "model/model.h"

namespace ferrox::cli {

namespace {

constexpr int kKvBlock = 64;

const std::vector<FlagSpec> kBenchFlags = {
    {{"-m", "--model"}, true, "model file (GGUF)"},
    {{"-p", "--n-prompt"}, true, "prompt lengths, comma-separated (default 512; 0: no pp test)"},
    {{"-n", "--n-gen"}, true, "generated lengths, comma-separated (default 128; 0: no tg test)"},
    {{"-t", "--threads"}, true, "thread counts, comma-separated (default: all cores)"},
    {{"-r", "--repetitions"}, true, "timed runs of each test, after one warm-up (default 5)"},
    {{"-b", "--batch-size"}, true, "most prompt tokens in one forward pass (default 512)"},
    {{"-np", "--parallel"}, true,
     "sequences decoded together in tg tests, comma-separated (default 1): tgN x S is N steps of S tokens"},
    {{"--verify"}, true,
     "draft tokens verified per sequence and step in tg tests, comma-separated (default 0): tgN x S+K"},
    {{"-d", "--depth"}, true, "context positions per sequence before each tg test, comma-separated (default 0)"},
    {{"--mmap"}, false, "map the weights instead of copying them into huge-page memory"},
    {{"--no-mmap"}, false, "copy the weights into huge-page memory (the default)"},
    {{"--ggml-order"}, false, "matrix products in llama.cpp's x86 order (its AVX2 build's bits) instead of the fixed orders"},
    {{"-o", "--output"}, true, "md (default) or jsonl"},
    {{"-h", "--help"}, false, "this help"},
};

// The figures every output line of one model shares.
struct ModelDesc {
    std::string stem;  // file name without directory and ".gguf"
    std::string type;  // llama.cpp's description: "llama 1.1B Q4_0"
    uint64_t n_bytes = 0;
    uint64_t n_params = 0;
};

// general.file_type as llama.cpp names it (llama_model_ftype_name).
std::string ftype_name(int64_t ftype) {
    switch (ftype) {
        case 0:
            return "all F32";
        case 1:
            return "F16";
        case 2:
            return "Q4_0";
        case 3:
            return "Q4_1";
        case 7:
            return "Q8_0";
        case 8:
            return "Q5_0";
        case 9:
            return "Q5_1";
        case 10:
            return "Q2_K - Medium";
        case 11:
            return "Q3_K - Small";
        case 12:
            return "Q3_K - Medium";
        case 13:
            return "Q3_K - Large";
        case 14:
            return "Q4_K - Small";
        case 15:
            return "Q4_K - Medium";
        case 16:
            return "Q5_K - Small";
        case 17:
            return "Q5_K - Medium";
        case 18:
            return "Q6_K";
        case 32:
            return "BF16";
        default:
            return "?";
    }
}

std::string params_label(uint64_t n) {
    char buf[32];
    if (n >= 1000000000ull) {
        std::snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
    } else {
        std::snprintf(buf, sizeof buf, "%.0fM", n / 1e6);
    }
    return buf;
}

ModelDesc describe(const GgufFile& file, const std::string& model_filename) {
    ModelDesc d;
    const size_t slash = model_filename.find_last_of('/');
    d.stem = model_filename.substr(slash == std::string::npos ? 0 : slash + 1);
    if (d.stem.size() > 5 && d.stem.compare(d.stem.size() - 5, 5, ".gguf") == 0)
        d.stem.resize(d.stem.size() - 5);
    // As llama_model_size / llama_model_n_params: every tensor of the file.
    for (const TensorView& t : file.tensors()) {
        d.n_bytes += static_cast<uint64_t>(t.n_bytes());
        d.n_params += static_cast<uint64_t>(t.n_elements());
    }
    auto arch = file.get_string("general.architecture");
    auto ftype = file.get_int("general.file_type");
    d.type = (arch.has_value() && arch->has_value() ? **arch : std::string("?")) + " " +
             params_label(d.n_params) + " " +
             (ftype.has_value() && ftype->has_value() ? ftype_name(**ftype) : std::string("?"));
    return d;
}

std::string cpu_info() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos) {
                size_t b = line.find_first_not_of(" \t", colon + 1);
                return b == std::string::npos ? "" : line.substr(b);
            }
        }
    }
    return "unknown";
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// The KV blocks of one test's sequence, taken from the pool and given back on scope exit.
class BlockTable {
  public:
    BlockTable(BlockManager& kv, int n_pos) : kv_(kv) {
        const int n = (n_pos + kv.block_size() - 1) / kv.block_size();
        for (int i = 0; i < n; ++i) blocks_.push_back(kv.allocate());
    }
    ~BlockTable() {
        for (int32_t b : blocks_)
            if (b >= 0) kv_.release(b);
    }
    BlockTable(const BlockTable&) = delete;
    BlockTable& operator=(const BlockTable&) = delete;
    bool ok() const { return std::find(blocks_.begin(), blocks_.end(), -1) == blocks_.end(); }
    const int32_t* data() const { return blocks_.data(); }
    int size() const { return static_cast<int>(blocks_.size()); }

  private:
    BlockManager& kv_;
    std::vector<int32_t> blocks_;
};

// One prompt of tokens.size() tokens from position 0, in forward passes of <= n_batch tokens.
Status run_prompt(Model& model, KvStorage& kv, const BlockTable& table,
                  const std::vector<int32_t>& tokens, int n_batch, std::vector<float>& logits) {
    const int n = static_cast<int>(tokens.size());
    Batch b;
    for (int n_past = 0; n_past < n; n_past += n_batch) {
        const int n_tok = std::min(n_batch, n - n_past);
        b.tokens.assign(tokens.begin() + n_past, tokens.begin() + n_past + n_tok);
        b.seqs.assign(1, {0, n_tok, n_past, table.data(), table.size(), n_past + n_tok == n});
        FERROX_RETURN_IF_ERROR(model.forward(b, kv, logits));
    }
    return Status::ok();
}

// n_gen forward passes of one token per sequence at positions depth..depth+n_gen-1, as
// llama-bench's test_gen (one sequence) or a decode step of a server with one running request
// per table: the next tokens are random, not sampled (sampling is not what is measured). With
// n_verify > 0 every sequence also has n_verify one-token entries at its next positions, after
// all the sequences' own entries, as the engine lays out a step verifying draft tokens; each
// step then advances a sequence by 1 + n_verify positions (every draft accepted).
Status run_gen(Model& model, KvStorage& kv, const std::vector<std::unique_ptr<BlockTable>>& tables, int n_gen,
               int n_verify, int depth, int32_t first, std::mt19937& rng, std::vector<float>& logits) {
    Batch b;
    const int n_seq = static_cast<int>(tables.size());
    const int per = 1 + n_verify;
    b.tokens.assign(static_cast<size_t>(n_seq) * per, first);
    for (int j = 0; j < per; ++j) {
        for (int s = 0; s < n_seq; ++s) {
            b.seqs.push_back({j * n_seq + s, 1, 0, tables[s]->data(), tables[s]->size(), true});
        }
    }
    std::uniform_int_distribution<int32_t> pick(0, model.n_vocab() - 1);
    for (int i = 0; i < n_gen; ++i) {
        for (size_t e = 0; e < b.seqs.size(); ++e) b.seqs[e].n_past = depth + i * per + static_cast<int>(e) / n_seq;
        FERROX_RETURN_IF_ERROR(model.forward(b, kv, logits));
        for (int32_t& t : b.tokens) t = pick(rng);
    }
    return Status::ok();
}

struct Sample {
    double mean = 0;
    double sd = 0;  // sample standard deviation, 0 for one sample (as llama-bench)
};

Sample stats(const std::vector<double>& xs) {
    Sample s;
    if (xs.empty()) return s;
    for (double x : xs) s.mean += x;
    s.mean /= static_cast<double>(xs.size());
    if (xs.size() > 1) {
        double sq = 0;
        for (double x : xs) sq += (x - s.mean) * (x - s.mean);
        s.sd = std::sqrt(sq / static_cast<double>(xs.size() - 1));
    }
    return s;
}

struct TestResult {
    int n_threads = 0;
    int n_prompt = 0;
    int n_gen = 0;
    int n_seq = 1;  // sequences decoded together (tg tests)
    int n_verify = 0;  // draft entries per sequence and step (tg tests)
    int n_depth = 0;   // context positions before the tg test
    std::string test_time;
    std::vector<int64_t> samples_ns;
};

std::string markdown_header() {
    char buf[256];
    std::snprintf(buf, sizeof buf, "| %-30s | %10s | %10s | %7s | %10s | %20s |\n", "model", "size",
                  "params", "threads", "test", "t/s");
    std::string out = buf;
    out +=
        "| ------------------------------ | ---------: | ---------: | ------: | ---------: | "
        "-------------------: |\n";
    return out;
}

std::string markdown_row(const ModelDesc& d, const TestResult& r, const Sample& ts) {
    char size[32], params[32], test[64], tps[48], buf[512];
    std::snprintf(size, sizeof size, "%.2f GiB", d.n_bytes / 1073741824.0);
    if (d.n_params >= 1000000000ull) {
        std::snprintf(params, sizeof params, "%.2f B", d.n_params / 1e9);
    } else {
        std::snprintf(params, sizeof params, "%.2f M", d.n_params / 1e6);
    }
    if (r.n_prompt > 0) {
        std::snprintf(test, sizeof test, "pp%d", r.n_prompt);
    } else {
        std::string t = "tg" + std::to_string(r.n_gen);
        if (r.n_seq > 1 || r.n_verify > 0) t += "x" + std::to_string(r.n_seq);
        if (r.n_verify > 0) t += "+" + std::to_string(r.n_verify);
        if (r.n_depth > 0) t += " @ d" + std::to_string(r.n_depth);
        std::snprintf(test, sizeof test, "%s", t.c_str());
    }
    std::snprintf(tps, sizeof tps, "%.2f ± %.2f", ts.mean, ts.sd);
    // "±" is two bytes but one column: pad its field by one more.
    std::snprintf(buf, sizeof buf, "| %-30s | %10s | %10s | %7d | %10s | %21s |\n", d.stem.c_str(),
                  size, params, r.n_threads, test, tps);
    return buf;
}

std::string jsonl_line(const ModelDesc& d, const std::string& model_filename,
                       const BenchOptions& opts, const TestResult& r, const Sample& ns,
                       const Sample& ts, const std::vector<double>& samples_ts) {
    // Field names and order as llama-bench's JSONL printer.
    nlohmann::ordered_json j;
    j["build_commit"] = build_commit();
    j["cpu_info"] = cpu_info();
    j["backends"] = "CPU";
    j["kernels"] = kernels_isa_name();
    j["model_filename"] = model_filename;
    j["model_type"] = d.type;
    j["model_size"] = d.n_bytes;
    j["model_n_params"] = d.n_params;
    j["n_batch"] = opts.n_batch;
    j["n_ubatch"] = opts.n_batch;
    j["n_threads"] = r.n_threads;
    j["type_k"] = "f16";
    j["type_v"] = "f16";
    j["use_mmap"] = opts.mmap;
    j["ggml_order"] = opts.ggml_order;
    j["n_prompt"] = r.n_prompt;
    j["n_gen"] = r.n_gen;
    j["n_parallel"] = r.n_seq;
    j["n_verify"] = r.n_verify;
    j["n_depth"] = r.n_depth;
    j["test_time"] = r.test_time;
    j["avg_ns"] = static_cast<int64_t>(std::llround(ns.mean));
    j["stddev_ns"] = static_cast<int64_t>(std::llround(ns.sd));
    j["avg_ts"] = ts.mean;
    j["stddev_ts"] = ts.sd;
    j["samples_ns"] = r.samples_ns;
    j["samples_ts"] = samples_ts;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// Warm-up, then opts.n_reps timed runs of one test on a loaded model.
Expected<TestResult> run_test(Model& model, BlockManager& blocks, KvStorage& kv, const BenchOptions& opts, int n_prompt,
                              int n_gen, int n_seq, int n_verify, int depth, int32_t bos) {
    TestResult r;
    r.n_threads = model.n_threads();
    r.n_prompt = n_prompt;
    r.n_gen = n_gen;
    r.n_seq = n_seq;
    r.n_verify = n_verify;
    r.n_depth = depth;
    r.test_time = utc_now();
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> pick(0, model.n_vocab() - 1);
    std::vector<float> logits(static_cast<size_t>(model.n_vocab()) * n_seq * (1 + n_verify));
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int32_t& t : prompt) t = pick(rng);
    if (n_prompt > 0 && bos >= 0) prompt[0] = bos;
    const int32_t first = bos >= 0 ? bos : pick(rng);

    std::vector<std::unique_ptr<BlockTable>> tables;
    for (int i = 0; i < n_seq; ++i) {
        tables.push_back(std::make_unique<BlockTable>(blocks, std::max(n_prompt, depth + n_gen * (1 + n_verify))));
        if (!tables.back()->ok()) return internal_error("bench: the KV pool is too small for the test");
    }
    const BlockTable& table = *tables[0];
    const int n_batch = std::max(1, std::min(opts.n_batch, model.max_batch_tokens()));
    if (n_gen > 0 && depth > 0) {  // the context, once (the timed steps write after it)
        std::vector<int32_t> ctx(static_cast<size_t>(depth));
        for (int32_t& t : ctx) t = pick(rng);
        if (bos >= 0) ctx[0] = bos;
        for (const auto& t : tables) FERROX_RETURN_IF_ERROR(run_prompt(model, kv, *t, ctx, n_batch, logits));
    }
    // Warm-up: pages the weights in, sizes every buffer (llama-bench: one full prompt, one token).
    if (n_prompt > 0) FERROX_RETURN_IF_ERROR(run_prompt(model, kv, table, prompt, n_batch, logits));
    if (n_gen > 0) FERROX_RETURN_IF_ERROR(run_gen(model, kv, tables, 1, n_verify, depth, first, rng, logits));
    for (int rep = 0; rep < opts.n_reps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        if (n_prompt > 0)
            FERROX_RETURN_IF_ERROR(run_prompt(model, kv, table, prompt, n_batch, logits));
        if (n_gen > 0)
            FERROX_RETURN_IF_ERROR(run_gen(model, kv, tables, n_gen, n_verify, depth, first, rng, logits));
        const auto t1 = std::chrono::steady_clock::now();
        r.samples_ns.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    }
    return r;
}

}  // namespace

Expected<std::vector<int>> parse_int_list(const std::string& text, int min_value) {
    std::vector<int> out;
    size_t pos = 0;
    while (true) {
        const size_t comma = text.find(',', pos);
        const std::string item =
            text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || errno || v < min_value || v > (1L << 30)) {
            return invalid_argument("'" + item +
                                    "' is not an integer >= " + std::to_string(min_value));
        }
        out.push_back(static_cast<int>(v));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

Status run_bench(const GgufFile& file, const std::string& model_filename, const BenchLoader& load,
                 const BenchOptions& opts, const std::function<void(const std::string&)>& emit) {
    if (opts.n_reps < 1) return invalid_argument("-r must be >= 1");
    if (opts.n_batch < 1) return invalid_argument("-b must be >= 1");
    const ModelDesc desc = describe(file, model_filename);
    int max_prompt = 0;
    int max_pos = 1;
    for (int p : opts.n_prompt) max_prompt = std::max(max_prompt, p);
    int max_seq = 1, max_verify = 0, max_depth = 0;
    for (int v : opts.n_verify) max_verify = std::max(max_verify, v);
    for (int d : opts.n_depth) max_depth = std::max(max_depth, d);
    for (int n : opts.n_gen) max_pos = std::max(max_pos, max_depth + n * (1 + max_verify));
    for (int s : opts.n_parallel) max_seq = std::max(max_seq, s);
    max_pos = std::max(max_pos, max_prompt);
    auto bos_id = file.get_int("tokenizer.ggml.bos_token_id");
    auto add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
    const bool use_bos = bos_id.has_value() && bos_id->has_value() &&
                         !(add_bos.has_value() && add_bos->has_value() && !**add_bos);
    std::vector<int> threads = opts.n_threads;
    if (threads.empty()) threads.push_back(hardware_threads());

    if (opts.output == BenchOutput::kMarkdown) emit(markdown_header());
    for (int n_threads : threads) {
        if (n_threads < 1) return invalid_argument("-t must be >= 1");
        ModelOptions mo;
        mo.n_threads = n_threads;
        mo.max_batch_tokens = std::max(max_seq * (1 + max_verify), std::min(opts.n_batch, std::max(max_prompt, max_depth)));
        mo.max_ctx = max_pos;
        mo.mmap = opts.mmap;
        mo.ggml_order = opts.ggml_order;
        FERROX_ASSIGN_OR_RETURN(std::shared_ptr<Model> model, load(mo));
        const int32_t bos = use_bos && **bos_id >= 0 && **bos_id < model->n_vocab()
                                ? static_cast<int32_t>(**bos_id)
                                : -1;
        const int n_blocks = max_seq * ((max_pos + kKvBlock - 1) / kKvBlock);
        BlockManager blocks(n_blocks, kKvBlock);
        KvStorage kv(model->kv_geometry(kKvBlock), n_blocks);
        // (n_prompt, n_gen, n_seq, n_verify, depth), llama-bench's order
        std::vector<std::tuple<int, int, int, int, int>> tests;
        for (int p : opts.n_prompt)
            if (p > 0) tests.emplace_back(p, 0, 1, 0, 0);
        for (int n : opts.n_gen)
            for (int d : opts.n_depth)
                for (int s : opts.n_parallel)
                    for (int v : opts.n_verify)
                        if (n > 0) tests.emplace_back(0, n, s, v, d);
        for (auto [n_prompt, n_gen, n_seq, n_verify, depth] : tests) {
            FERROX_ASSIGN_OR_RETURN(TestResult r,
                                    run_test(*model, blocks, kv, opts, n_prompt, n_gen, n_seq, n_verify, depth, bos));
            std::vector<double> ns, ts;
            for (int64_t x : r.samples_ns) {
                ns.push_back(static_cast<double>(x));
                ts.push_back(1e9 * (n_prompt + static_cast<double>(n_gen) * n_seq * (1 + n_verify)) /
                             static_cast<double>(std::max<int64_t>(1, x)));
            }
            const Sample s_ns = stats(ns), s_ts = stats(ts);
            emit(opts.output == BenchOutput::kMarkdown
                     ? markdown_row(desc, r, s_ts)
                     : jsonl_line(desc, model_filename, opts, r, s_ns, s_ts, ts));
        }
    }
    return Status::ok();
}

int cmd_bench(int argc, char** argv) {
    auto fail = [](const Status& s) {
        std::fprintf(stderr, "error: %s\n", s.message().c_str());
        return 1;
    };
    auto args = Args::parse(argc, argv, 2, kBenchFlags);
    if (!args.has_value()) return fail(args.status());
    if (args->has("-h")) {
        std::printf(
            "usage: ferrox bench -m MODEL [-p 512] [-n 128] [-np 1,16] [--verify 0,4] [-d 0,512] [-t 1,2] [-r 5] "
            "[--mmap] [-o md|jsonl]\n%s",
            usage(kBenchFlags).c_str());
        return 0;
    }
    auto model_path = args->get("-m");
    if (!model_path) return fail(invalid_argument("no model: give -m MODEL"));
    BenchOptions opts;
    for (auto [flag, list, min_value] :
         {std::tuple{"-p", &opts.n_prompt, 0}, std::tuple{"-n", &opts.n_gen, 0},
          std::tuple{"-t", &opts.n_threads, 1}, std::tuple{"-np", &opts.n_parallel, 1},
          std::tuple{"--verify", &opts.n_verify, 0}, std::tuple{"-d", &opts.n_depth, 0}}) {
        if (auto v = args->get(flag)) {
            auto parsed = parse_int_list(*v, min_value);
            if (!parsed.has_value())
                return fail(invalid_argument(std::string(flag) + ": " + parsed.status().message()));
            *list = *parsed;
        }
    }
    auto reps = args->get_int("-r", opts.n_reps);
    auto batch = args->get_int("-b", opts.n_batch);
    if (!reps.has_value()) return fail(reps.status());
    if (!batch.has_value()) return fail(batch.status());
    opts.n_reps = *reps;
    opts.n_batch = *batch;
    if (args->has("--mmap") && args->has("--no-mmap")) {
        return fail(invalid_argument("--mmap and --no-mmap together"));
    }
    if (args->has("--mmap")) opts.mmap = true;
    if (args->has("--no-mmap")) opts.mmap = false;
    opts.ggml_order = args->has("--ggml-order");
    const std::string out = args->get("-o").value_or("md");
    if (out == "jsonl") {
        opts.output = BenchOutput::kJsonl;
    } else if (out != "md") {
        return fail(invalid_argument("-o: '" + out + "' is not md or jsonl"));
    }
    // The description comes from a plain mapping; the timed model is loaded as `ferrox run`
    // and `serve` load it (load_model), once per thread count.
    auto file = GgufFile::open(*model_path);
    if (!file.has_value()) return fail(file.status());
    const std::string path = *model_path;
    auto load = [&path](const ModelOptions& mo) -> Expected<std::shared_ptr<Model>> {
        FERROX_ASSIGN_OR_RETURN(std::shared_ptr<LoadedModel> lm, load_model(path, mo));
        return std::shared_ptr<Model>(lm, lm->model.get());  // keeps the whole LoadedModel alive
    };
    Status st = run_bench(**file, *model_path, load, opts, [](const std::string& line) {
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fflush(stdout);
    });
    if (!st.is_ok()) return fail(st);
    return 0;
}

}  // namespace ferrox::cli
