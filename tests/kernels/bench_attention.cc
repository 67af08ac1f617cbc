// Decode attention kernels over an F16 cache (the selected table: FERROX_KERNELS_ISA picks
// another), in nanoseconds per (query head, cache position): the grouped dots against K rows
// and P·V over the transposed V blocks, hot (one sequence's cache, in L1/L2) and cold (enough
// sequences' caches to leave the caches, as in a batched decode step). A tool, not a test:
//   build/bin/bench_attention [context=128] [heads per KV head=3]
// prints one line per context length (32, the given one, 512) and cache state.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/attention_f16.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

void run(int ctx, int n_q, int n_seq) {
    const AttnF16Kernels& fk = attn_f16_kernels();
    constexpr int kHd = 64, kBs = 32, kStride = 4112;
    const int n_blocks = (ctx + kBs - 1) / kBs;
    const size_t per_seq = static_cast<size_t>(n_blocks) * kBs * kHd;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint16_t> k(per_seq * n_seq), v(per_seq * n_seq);
    for (size_t i = 0; i < k.size(); ++i) {
        k[i] = fp32_to_fp16(nd(rng));
        v[i] = fp32_to_fp16(nd(rng));
    }
    std::vector<float> q(static_cast<size_t>(n_q) * kHd), scores(static_cast<size_t>(n_q) * kStride, 0.001f);
    for (float& x : q) x = 0.1f * nd(rng);
    fk.round_f16_row(q.data(), q.data(), static_cast<int>(q.size()));
    std::vector<float> out(static_cast<size_t>(n_q) * kHd);
    std::vector<float*> outs(n_q);
    for (int g = 0; g < n_q; ++g) outs[g] = out.data() + static_cast<size_t>(g) * kHd;
    std::vector<const uint16_t*> blocks(n_blocks);
    const long iters = std::max(1L, 20'000'000L / (static_cast<long>(ctx) * n_q));
    double t_dots = 0, t_pv = 0;
    for (int pass = 0; pass < 2; ++pass) {  // the first warms up
        t_dots = t_pv = 0;
        for (long it = 0; it < iters; ++it) {
            const size_t base = per_seq * static_cast<size_t>(it % n_seq);
            const auto t0 = std::chrono::steady_clock::now();
            for (int p = 0; p < ctx; p += kBs) {
                fk.dots_decode_group(q.data(), n_q, k.data() + base + static_cast<size_t>(p) * kHd, kHd,
                                     std::min(kBs, ctx - p), kHd, 0.125f, scores.data() + p, kStride);
            }
            const auto t1 = std::chrono::steady_clock::now();
            for (int b = 0; b < n_blocks; ++b) blocks[b] = v.data() + base + static_cast<size_t>(b) * kBs * kHd;
            fk.pv_decode_t(scores.data(), kStride, n_q, blocks.data(), kBs, 0, ctx, outs.data(), kHd);
            const auto t2 = std::chrono::steady_clock::now();  // (the weights are the raw dots: timing only)
            t_dots += std::chrono::duration<double>(t1 - t0).count();
            t_pv += std::chrono::duration<double>(t2 - t1).count();
        }
    }
    const double n = static_cast<double>(iters) * ctx * n_q;
    std::printf("ctx %4d, %d heads, %s: dots %.2f ns, P·V %.2f ns per head and position (check %g)\n", ctx, n_q,
                n_seq == 1 ? "hot " : "cold", t_dots / n * 1e9, t_pv / n * 1e9, static_cast<double>(out[0]));
}

}  // namespace
}  // namespace ferrox

int main(int argc, char** argv) {
    const int ctx = argc > 1 ? std::atoi(argv[1]) : 128;
    const int n_q = argc > 2 ? std::atoi(argv[2]) : 3;
    if (ctx < 1 || ctx > 4096 || n_q < 1 || n_q > 32) {
        std::fprintf(stderr, "usage: bench_attention [context 1..4096] [heads 1..32]\n");
        return 2;
    }
    for (int c : {32, ctx, 512}) {
        ferrox::run(c, n_q, 1);
        ferrox::run(c, n_q, 1000);
    }
    return 0;
}
