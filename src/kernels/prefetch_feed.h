// A list of memory the calling thread will read soon, asked for a few lines at a time while a
// matrix product keeps its core busy.
//
// A 16-sequence decode step is bound by arithmetic in its products, while its attention reads
// every sequence's KV blocks, last touched a step (the whole model's weights) ago, and waits on
// memory for them. The model hands a thread the KV runs of its share of the next layer's
// attention before the products that come first (Model::plan_kv_prefetch); the many-column
// kernels take `per_step` lines of it per weight block they multiply, so the lines arrive while
// those products compute. Only hints: nothing computed depends on them.
#pragma once

#include <cstdint>

namespace ferrox {

struct PrefetchFeed {
    const char* const* runs = nullptr;  // run starts
    const int32_t* lines = nullptr;     // 64-byte lines of each run
    int n_runs = 0;
    int per_step = 0;  // lines asked for per step()
    int run = 0, line = 0;

    __attribute__((always_inline)) bool done() const { return run >= n_runs; }

    // The next per_step lines (prefetcht0).
    __attribute__((always_inline)) void step() {
        for (int k = 0; k < per_step && run < n_runs; ++k) {
            __builtin_prefetch(runs[run] + 64 * static_cast<int64_t>(line), 0, 3);
            if (++line == lines[run]) {
                line = 0;
                ++run;
            }
        }
    }
};

// The calling thread's feed, or null: set around a product by its caller. Defined in
// dispatch.cc, a baseline object: the SIMD objects export nothing but their table fillers
// (tests/kernels/check_simd_symbols.cmake), and constinit spares them a TLS wrapper function.
extern constinit thread_local PrefetchFeed* t_prefetch_feed;

}  // namespace ferrox
