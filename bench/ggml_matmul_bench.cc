// One matrix product in llama.cpp's CPU backend (ggml), for comparison with ferrox's kernels
// (tests/kernels/bench_quants.cc `lowbit`): weights of a ggml type quantized by ggml, in
// llama.cpp's repacked buffer type where it has one for the type (as llama.cpp loads a model),
// times C float activation rows (ggml quantizes them to the partner type inside the product, as
// ferrox does before its product). One thread. Prints the best of 10 trials per shape.
// Not built by CMake (it needs llama.cpp's headers and libraries), e.g. with llama-cpp-python's:
//   SP=$(python3 -c 'import site; print(site.getsitepackages()[0])')
//   g++ -O2 -std=c++17 bench/ggml_matmul_bench.cc -I$SP/include -L$SP/lib -lggml -lggml-base -lggml-cpu \
//       -Wl,-rpath,$SP/lib -o /tmp/ggml_matmul_bench && /tmp/ggml_matmul_bench
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

static double bench(ggml_type type, int64_t rows, int64_t k, int64_t cols, bool repack, int iters, bool* repacked) {
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, 1);
    ggml_backend_buffer_type_t buft = ggml_backend_cpu_buffer_type();
    *repacked = false;
    if (repack) {
        ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        auto get_extra = (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
            ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
        if (get_extra) {
            for (ggml_backend_buffer_type_t* b = get_extra(dev); b && *b; ++b) {
                if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) buft = *b, *repacked = true;
            }
        }
    }
    ggml_init_params wp = {ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context* cw = ggml_init(wp);
    ggml_tensor* w = ggml_new_tensor_2d(cw, type, k, rows);
    ggml_backend_buffer_t bw = ggml_backend_alloc_ctx_tensors_from_buft(cw, buft);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> f(static_cast<size_t>(rows * k));
    for (float& v : f) v = nd(rng);
    std::vector<uint8_t> q(ggml_row_size(type, k) * rows);
    ggml_quantize_chunk(type, f.data(), q.data(), 0, rows, k, nullptr);
    ggml_backend_tensor_set(w, q.data(), 0, q.size());

    ggml_init_params gp = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
    ggml_context* cg = ggml_init(gp);
    ggml_tensor* x = ggml_new_tensor_2d(cg, GGML_TYPE_F32, k, cols);
    ggml_tensor* out = ggml_mul_mat(cg, w, x);
    ggml_cgraph* gf = ggml_new_graph(cg);
    ggml_build_forward_expand(gf, out);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    ggml_gallocr_alloc_graph(ga, gf);
    std::vector<float> xs(static_cast<size_t>(k * cols));
    std::normal_distribution<float> nx(0.0f, 1.0f);
    for (float& v : xs) v = nx(rng);
    ggml_backend_tensor_set(x, xs.data(), 0, xs.size() * sizeof(float));
    for (int i = 0; i < 3; ++i) ggml_backend_graph_compute(be, gf);
    double best = 1e30;
    for (int t = 0; t < 10; ++t) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) ggml_backend_graph_compute(be, gf);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
    }
    ggml_gallocr_free(ga);
    ggml_free(cg);
    ggml_backend_buffer_free(bw);
    ggml_free(cw);
    ggml_backend_free(be);
    return best;
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
    std::printf("ggml: AVX2 %d, AVX512 %d, AVX512_VNNI %d\n", ggml_cpu_has_avx2(), ggml_cpu_has_avx512(),
                ggml_cpu_has_avx512_vnni());
    // repack: the types llama.cpp's CPU_REPACK buffer takes on x86 (its repack.cpp; a type it
    // has no layout for crashes there, so the list is stated).
    const struct { ggml_type t; const char* name; bool repack; } types[] = {
        {GGML_TYPE_Q2_K, "q2_K", true}, {GGML_TYPE_Q3_K, "q3_K", false}, {GGML_TYPE_IQ4_XS, "iq4_xs", false},
        {GGML_TYPE_IQ4_NL, "iq4_nl", true}, {GGML_TYPE_MXFP4, "mxfp4", true}, {GGML_TYPE_Q4_K, "q4_K", true}};
    const int64_t rows = 4096, k = 2048;  // the shape of bench_quants lowbit
    for (const auto& ty : types) {
        bool rp = false;
        const double s1 = bench(ty.t, rows, k, 1, ty.repack, iters, &rp);
        const double s64 = bench(ty.t, rows, k, 64, ty.repack, iters / 10 + 1, &rp);
        const double bytes = static_cast<double>(ggml_row_size(ty.t, k)) * rows;
        std::printf("llama.cpp %-6s %lldx%lld%s  1 col %7.1f us %6.2f GB/s   64 cols %8.1f us %6.1f G mul-add/s\n",
                    ty.name, static_cast<long long>(rows), static_cast<long long>(k), rp ? " (repacked)" : "          ",
                    s1 * 1e6, bytes / s1 / 1e9, s64 * 1e6, 64.0 * rows * k / s64 / 1e9);
    }
    return 0;
}
