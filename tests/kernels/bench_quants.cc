// Single-thread throughput of the kernels, per ISA level the CPU has. Not a test (not
// registered with ctest):
//   ./build/bin/bench_quants [iterations]
// 1. The dot products: a 576 x 1536 weight matrix (576 rows of 1536, SmolLM2-135M's FFN down
//    projection) times one activation row, in GB/s of weights streamed. The matrix (~0.5 MB
//    in 4-bit) stays in L2, so this measures the kernels, not DRAM.
// 2. The packed matrix product (gemm_packed8, what the model runs): a 64 x 2048 tile of a
//    repacked matrix (the model's per-call tile) against 1 activation row (decode, GB/s of
//    weights) and 64 (a prompt chunk, billions of multiply-adds per second).
// `bench_quants cols` and `bench_quants batch`: see columns_table and batch_table.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <random>
#include <utility>
#include <vector>

#include "kernels/quants.h"
#include "kernels/test_util.h"

namespace {

using ferrox::DType;

// Seconds per call of run(), after 3 warm-up calls: the best of 10 trials of iters / 10 + 1
// calls (on a shared machine the fastest trial is the kernel's speed, the slower ones measure
// the neighbours).
template <typename Run>
double best_seconds(Run run, int iters) {
    for (int i = 0; i < 3; ++i) run();
    double best = 1e30;
    const int per_trial = iters / 10 + 1;
    for (int trial = 0; trial < 10; ++trial) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < per_trial; ++i) run();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / per_trial);
    }
    return best;
}

// A weight row of type t: random floats quantized, or for the grid formats (no quantizer) random
// blocks with sane scales.
std::vector<uint8_t> weight_row(DType t, int64_t n, uint32_t seed) {
    if (ferrox::kernel_test::is_grid_type(t)) {
        std::vector<uint8_t> q(static_cast<size_t>(ferrox::dtype_row_bytes(t, n)));
        std::mt19937 rng(seed);
        ferrox::kernel_test::random_blocks(t, q.data(), n, rng);
        return q;
    }
    return ferrox::kernel_test::quantize(t, ferrox::kernel_test::random_row(n, seed, 0.05f));
}

double bench(DType t, int64_t n_rows, int64_t n, int iters, bool use_rows, float* sink) {
    const ferrox::QuantKernels& k = ferrox::quant_kernels(t);
    const int64_t row_bytes = ferrox::dtype_row_bytes(t, n);
    std::vector<uint8_t> w(static_cast<size_t>(row_bytes * n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto q = weight_row(t, n, static_cast<uint32_t>(1 + r));
        std::copy(q.begin(), q.end(), w.begin() + r * row_bytes);
    }
    const auto af = ferrox::kernel_test::random_row(n, 12345);
    std::vector<uint8_t> a(static_cast<size_t>(ferrox::dtype_row_bytes(k.act_type, n)));
    k.quantize_act_row(af.data(), a.data(), n);
    std::vector<float> out(static_cast<size_t>(n_rows));
    auto run = [&] {
        if (use_rows) {
            k.vec_dot_rows(n, w.data(), row_bytes, n_rows, a.data(), out.data());
        } else {
            for (int64_t r = 0; r < n_rows; ++r)
                out[r] = k.vec_dot(n, w.data() + r * row_bytes, a.data());
        }
        *sink += out[0];
    };
    return static_cast<double>(w.size()) / best_seconds(run, iters) / 1e9;
}

// gemm_packed8 on one 64-row tile, n_cols activation rows: seconds per call (best trial).
double bench_packed(DType t, int64_t n_cols, int iters, float* sink, bool ref_order = false, int64_t n_rows = 64,
                    int64_t n = 2048) {
    const ferrox::QuantKernels& k = ferrox::quant_kernels(t);
    const auto gemm = ref_order ? k.gemm_packed8_ref_order : k.gemm_packed8;
    const int64_t row_bytes = ferrox::dtype_row_bytes(t, n);
    std::vector<uint8_t> w(static_cast<size_t>(row_bytes * n_rows)), packed(w.size());
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto q = weight_row(t, n, static_cast<uint32_t>(1 + r));
        std::copy(q.begin(), q.end(), w.begin() + r * row_bytes);
    }
    k.repack8(w.data(), n, n_rows, packed.data());
    const int64_t a_row = ferrox::dtype_row_bytes(k.packed_act_type, n);
    std::vector<uint8_t> a(static_cast<size_t>(a_row * n_cols));
    for (int64_t c = 0; c < n_cols; ++c) {
        const auto af = ferrox::kernel_test::random_row(n, 777 + c);
        k.quantize_packed_act_row(af.data(), a.data() + c * a_row, n);
    }
    std::vector<float> out(static_cast<size_t>(n_rows * n_cols));
    auto run = [&] {
        gemm(n, packed.data(), n_rows, a.data(), a_row, n_cols, out.data(), n_rows);
        *sink += out[0];
    };
    return best_seconds(run, iters);
}

}  // namespace

// `bench_quants cols`: the packed product's time per activation row for 1 to 16 rows (small
// batches and speculative verification run these sizes), relative to one row's time.
int columns_table(int iters) {
    float sink = 0;
    for (const char* isa : {"avx2", "avx512"}) {
        if (!ferrox::kernels_isa_available(isa)) continue;
        ferrox::kernels_force_isa(isa);
        for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0}) {
            for (bool ref_order : {false, true}) {
                if (ref_order && !ferrox::quant_kernels(t).gemm_packed8_ref_order) continue;
                const double s1 = bench_packed(t, 1, iters, &sink, ref_order);
                std::printf("%-6s %-5s%-12s 1 col %7.2f us; n cols / 1 col:", isa, std::string(ferrox::dtype_name(t)).c_str(),
                            ref_order ? " (ref order)" : "", s1 * 1e6);
                for (int c = 2; c <= 16; ++c) std::printf(" %d:%.2f", c, bench_packed(t, c, iters, &sink, ref_order) / s1);
                std::printf("\n");
            }
        }
    }
    return sink == 12345.678f ? 1 : 0;
}

// `bench_quants batch [cols] [iterations]`: the packed product at the default model's batched
// decode shapes (one 128-row span of the model's matmul against a row of 576 or 1536), n cols
// activation rows (16 by default), in billions of multiply-adds per second.
int batch_table(int64_t n_cols, int iters) {
    float sink = 0;
    for (const char* isa : {"avx2", "avx512"}) {
        if (!ferrox::kernels_isa_available(isa)) continue;
        ferrox::kernels_force_isa(isa);
        for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K,
                        DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS, DType::kIQ4_NL, DType::kMXFP4}) {
            if (!ferrox::quant_kernels(t).gemm_packed8) continue;
            const bool ref_order = ferrox::quant_kernels(t).gemm_packed8_ref_order != nullptr;
            // K-quants (rows of 256-element super-blocks): Gemma 3 270M's attention output and
            // FFN down rows instead of the default model's.
            const bool kq = ferrox::dtype_info(t).block_elems == 256;
            std::printf("%-6s %-5s%-12s %lld cols:", isa, std::string(ferrox::dtype_name(t)).c_str(),
                        ref_order ? " (ref order)" : "", static_cast<long long>(n_cols));
            for (int64_t n : {kq ? 1024 : 576, kq ? 2048 : 1536}) {
                const double s = bench_packed(t, n_cols, iters, &sink, ref_order, 128, n);
                std::printf("  128x%-4lld %6.1f", static_cast<long long>(n), static_cast<double>(n_cols) * 128 * n / s / 1e9);
            }
            // Matrices of the models, streamed from memory: the default model's vocabulary product, the
            // 1B model's FFN up and down projections.
            for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{49152, 576}, {5632, 2048}, {2048, 5632}}) {
                if (n % ferrox::dtype_info(t).block_elems != 0) continue;
                const double s = bench_packed(t, n_cols, iters / 100 + 1, &sink, ref_order, rows, n);
                std::printf("  %lldx%lld %6.1f", static_cast<long long>(rows), static_cast<long long>(n),
                            static_cast<double>(n_cols) * rows * n / s / 1e9);
            }
            std::printf(" G mul-add/s\n");
        }
    }
    return sink == 12345.678f ? 1 : 0;
}

// `bench_quants lowbit [iterations]`: the low-bit MoE formats (and Q4_K for reference) at one
// 4096 x 2048 matrix (~3.5 MB in Q3_K: from L3, not L2), 1 activation row (decode) and 64 (a
// prompt), each call including the quantization of its float activation rows, as a model's
// matmul does: the same work as bench/ggml_matmul_bench.cc measures in llama.cpp.
int lowbit_table(int iters) {
    float sink = 0;
    const int64_t rows = 4096, n = 2048;
    for (const char* isa : {"avx2", "avx512"}) {
        if (!ferrox::kernels_isa_available(isa)) continue;
        ferrox::kernels_force_isa(isa);
        for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS, DType::kIQ4_NL, DType::kMXFP4, DType::kQ4_K,
                        DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S, DType::kIQ1_S,
                        DType::kIQ1_M}) {
            const ferrox::QuantKernels& k = ferrox::quant_kernels(t);
            const int64_t row_bytes = ferrox::dtype_row_bytes(t, n);
            std::vector<uint8_t> w(static_cast<size_t>(row_bytes * rows)), packed(w.size());
            for (int64_t r = 0; r < rows; ++r) {
                const auto q = weight_row(t, n, static_cast<uint32_t>(1 + r));
                std::copy(q.begin(), q.end(), w.begin() + r * row_bytes);
            }
            // Types without a packed layout: vec_dot_rows per activation row, as the model runs them.
            if (k.repack8) k.repack8(w.data(), n, rows, packed.data());
            std::printf("%-6s %-7s %lldx%lld%s", isa, std::string(ferrox::dtype_name(t)).c_str(),
                        static_cast<long long>(rows), static_cast<long long>(n), k.repack8 ? "" : " (rows)");
            for (int64_t cols : {1, 64}) {
                const int64_t a_row = ferrox::dtype_row_bytes(k.packed_act_type, n);
                std::vector<float> x(static_cast<size_t>(n * cols));
                for (int64_t c = 0; c < cols; ++c) {
                    const auto af = ferrox::kernel_test::random_row(n, 777 + c);
                    std::copy(af.begin(), af.end(), x.begin() + c * n);
                }
                std::vector<uint8_t> a(static_cast<size_t>(a_row * cols));
                std::vector<float> out(static_cast<size_t>(rows * cols));
                auto run = [&] {
                    for (int64_t c = 0; c < cols; ++c) k.quantize_packed_act_row(x.data() + c * n, a.data() + c * a_row, n);
                    if (k.repack8) {
                        k.gemm_packed8(n, packed.data(), rows, a.data(), a_row, cols, out.data(), rows);
                    } else {
                        for (int64_t c = 0; c < cols; ++c)
                            k.vec_dot_rows(n, w.data(), row_bytes, rows, a.data() + c * a_row, out.data() + c * rows);
                    }
                    sink += out[0];
                };
                const double s = best_seconds(run, cols == 1 ? iters : iters / 10 + 1);
                if (cols == 1) {
                    std::printf("  1 col %7.1f us %6.2f GB/s", s * 1e6, static_cast<double>(w.size()) / s / 1e9);
                } else {
                    std::printf("   64 cols %8.1f us %6.1f G mul-add/s", s * 1e6, 64.0 * rows * n / s / 1e9);
                }
            }
            std::printf("\n");
        }
    }
    return sink == 12345.678f ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "lowbit") return lowbit_table(argc > 2 ? std::atoi(argv[2]) : 20);
    if (argc > 1 && std::string(argv[1]) == "batch")
        return batch_table(argc > 2 ? std::atoi(argv[2]) : 16, argc > 3 ? std::atoi(argv[3]) : 2000);
    if (argc > 1 && std::string(argv[1]) == "cols") return columns_table(argc > 2 ? std::atoi(argv[2]) : 300);
    const int iters = argc > 1 ? std::atoi(argv[1]) : 300;
    const int64_t n_rows = 576, n = 1536;
    float sink = 0;
    for (const char* isa : {"scalar", "avx2", "avx512"}) {
        if (!ferrox::kernels_isa_available(isa)) continue;
        ferrox::kernels_force_isa(isa);
        for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                        DType::kQ5_K, DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS, DType::kIQ4_NL,
                        DType::kMXFP4, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
                        DType::kIQ3_S, DType::kIQ1_S, DType::kIQ1_M, DType::kF16, DType::kF32}) {
            const int it = std::string(isa) == "scalar" ? iters / 10 + 1 : iters;
            const double gbs = bench(t, n_rows, n, it, false, &sink);
            const double gbs_rows = bench(t, n_rows, n, it, true, &sink);
            std::printf("%-6s %-5s %4lldx%lld  vec_dot %6.2f GB/s  vec_dot_rows %6.2f GB/s\n", isa,
                        std::string(ferrox::dtype_name(t)).c_str(), static_cast<long long>(n_rows),
                        static_cast<long long>(n), gbs, gbs_rows);
        }
    }
    for (const char* isa : {"avx2", "avx512"}) {
        if (!ferrox::kernels_isa_available(isa)) continue;
        ferrox::kernels_force_isa(isa);
        for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                        DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS, DType::kIQ4_NL, DType::kMXFP4, DType::kF16}) {
            if (ferrox::quant_kernels(t).repack8 == nullptr) continue;
            for (bool ref_order : {false, true}) {
                if (ref_order && !ferrox::quant_kernels(t).gemm_packed8_ref_order) continue;
                const double s1 = bench_packed(t, 1, iters, &sink, ref_order);
                const double s16 = bench_packed(t, 16, iters / 4 + 1, &sink, ref_order);
                const double s64 = bench_packed(t, 64, iters / 8 + 1, &sink, ref_order);
                const double bytes = static_cast<double>(ferrox::dtype_row_bytes(t, 2048)) * 64;
                std::printf("%-6s %-5s%s gemm_packed8 64x2048  1 col %6.2f GB/s   16 cols %6.1f   64 cols %6.1f G mul-add/s\n",
                            isa, std::string(ferrox::dtype_name(t)).c_str(), ref_order ? " (ref order)" : "",
                            bytes / s1 / 1e9, 16.0 * 2048 * 64 / s16 / 1e9, 64.0 * 2048 * 64 / s64 / 1e9);
            }
        }
    }
    return sink == 12345.678f ? 1 : 0;  // keeps the results alive
}
