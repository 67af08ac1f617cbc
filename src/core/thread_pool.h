#pragma once
// A persistent pool of worker threads for the forward pass. The calling thread takes part
// as worker 0, so a pool of n threads creates n-1 OS threads, once, at construction.
//
// Threading: run() may be called from one thread at a time (the engine thread). Workers spin
// briefly after each job before sleeping, so the back-to-back ops of a forward pass do not
// pay a futex wake each.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace ferrox {

class ThreadPool {
public:
    // Job body: (i_thread, n_threads). Each thread picks its own share of the work.
    using Job = void (*)(void* ctx, int i_thread, int n_threads);

    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int n_threads() const { return n_threads_; }

    // Runs job(ctx, i, n) on every thread i in [0, n) and returns when all are done.
    void run(Job job, void* ctx);

    // Convenience: any callable taking (i_thread, n_threads).
    template <typename F>
    void run(F&& f) {
        run([](void* c, int i, int n) { (*static_cast<F*>(c))(i, n); },
            const_cast<void*>(static_cast<const void*>(&f)));
    }

    // Splits [0, n) into contiguous chunks, one per thread, each a multiple of `align`.
    static void split(int64_t n, int i_thread, int n_threads, int64_t align, int64_t* begin,
                      int64_t* end);

private:
    void worker_main(int i_thread);

    int n_threads_;
    std::vector<std::thread> workers_;
    Job job_ = nullptr;
    void* ctx_ = nullptr;
    std::atomic<uint32_t> generation_{0};
    std::atomic<int> n_pending_{0};
    std::atomic<int> n_sleeping_{0};      // workers in futex_wait on generation_
    std::atomic<int> caller_sleeping_{0};  // run()'s thread in futex_wait on n_pending_
    std::atomic<bool> stop_{false};
};

// Units [0, n) dealt out as contiguous shares, one per thread (ThreadPool::split), that the
// other threads take from the back once their own share is done: each thread works through
// long runs in order (good for memory streams), and a thread the machine slows down does not
// hold the others at the barrier. Every unit is claimed by exactly one thread.
//
// Threading: reset() on one thread before the parallel region (ThreadPool::run publishes
// it); next() from the region's threads, concurrently, each with its own i_thread.
class StealingRanges {
public:
    explicit StealingRanges(int n_threads);

    // Deals out [0, n_units), n_units < 2^32.
    void reset(int64_t n_units);

    // The next unit for thread i_thread: the front of its own share, then the back of the
    // others' (i_thread + 1, i_thread + 2, ...); -1 once every unit is claimed.
    int64_t next(int i_thread);

    // Up to max_units consecutive units [*begin, *end) for thread i_thread, false once every
    // unit is claimed: from the front of its own share, max_units at a time while at least
    // twice that many are left there and then half of what is left (rounded up); else from the
    // back of another share, half of what is left there (rounded up, at most max_units). So the
    // work is claimed in long runs and the last pieces, which decide how long one thread waits
    // for the other at the barrier, are short.
    bool next_span(int i_thread, int64_t max_units, int64_t* begin, int64_t* end);

private:
    // The unclaimed units [next, end) of one share: next in the low 32 bits, end in the high.
    struct alignas(64) Range {
        std::atomic<uint64_t> v{0};
    };
    int n_threads_;
    std::unique_ptr<Range[]> ranges_;
};

int hardware_threads();

}  // namespace ferrox
