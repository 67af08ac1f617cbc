#include "core/thread_pool.h"

#include <algorithm>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferrox {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
    _mm_pause();
#endif
}
// Spin this long (~50 us on current x86) before sleeping on a futex. Long enough to cover the
// gap between two ops of a forward pass, short enough that on an oversubscribed machine a
// waiting thread gives its core away instead of burning the time slice of the thread it
// waits for (a 1<<14 spin made decode 20x slower under load).
constexpr int kSpinIterations = 2048;

// Raw futex on the generation word: the pool needs exactly these two calls, and a direct
// syscall keeps the sleep/wake cost visible in profiles (no waiter-table indirection).
template <typename T>
void futex_wait(std::atomic<T>* word, T expected) {
    static_assert(sizeof(T) == 4);
    syscall(SYS_futex, reinterpret_cast<T*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
            nullptr, 0);
}
template <typename T>
void futex_wake_all(std::atomic<T>* word) {
    syscall(SYS_futex, reinterpret_cast<T*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
            nullptr, 0);
}
}  // namespace

int hardware_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    workers_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(&generation_);
    for (auto& t : workers_) t.join();
}

void ThreadPool::run(Job job, void* ctx) {
    if (n_threads_ == 1) {
        job(ctx, 0, 1);
        return;
    }
    job_ = job;
    ctx_ = ctx;
    n_pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    // The wake is a syscall: only when a worker went to sleep. (A worker announces its sleep
    // before futex_wait checks the generation, and both sides use sequentially consistent
    // read-modify-writes, so either the worker sees the new generation or we see it asleep.)
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (n_sleeping_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&generation_);
    job(ctx, 0, n_threads_);
    int spins = 0;
    for (int left; (left = n_pending_.load(std::memory_order_acquire)) != 0;) {
        if (++spins < kSpinIterations) {
            cpu_relax();
        } else {
            caller_sleeping_.store(1, std::memory_order_seq_cst);
            futex_wait(&n_pending_, left);  // the last worker wakes us
            caller_sleeping_.store(0, std::memory_order_relaxed);
        }
    }
}

void ThreadPool::worker_main(int i_thread) {
    // Generation 0 is the constructor's: a worker must not read the counter at start-up, or a
    // run() issued before the thread was scheduled would be mistaken for an old one.
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        uint32_t g;
        while ((g = generation_.load(std::memory_order_acquire)) == seen) {
            if (++spins < kSpinIterations) {
                cpu_relax();
            } else {
                n_sleeping_.fetch_add(1, std::memory_order_seq_cst);
                futex_wait(&generation_, seen);
                n_sleeping_.fetch_sub(1, std::memory_order_seq_cst);
            }
        }
        seen = g;
        if (stop_.load(std::memory_order_acquire)) return;
        job_(ctx_, i_thread, n_threads_);
        if (n_pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
            caller_sleeping_.load(std::memory_order_seq_cst) != 0) {
            futex_wake_all(&n_pending_);
        }
    }
}

void ThreadPool::split(int64_t n, int i_thread, int n_threads, int64_t align, int64_t* begin,
                       int64_t* end) {
    int64_t n_units = (n + align - 1) / align;
    int64_t per = n_units / n_threads;
    int64_t rem = n_units % n_threads;
    int64_t b = i_thread * per + std::min<int64_t>(i_thread, rem);
    int64_t e = b + per + (i_thread < rem ? 1 : 0);
    *begin = std::min(n, b * align);
    *end = std::min(n, e * align);
}

StealingRanges::StealingRanges(int n_threads)
    : n_threads_(std::max(1, n_threads)), ranges_(std::make_unique<Range[]>(n_threads_)) {}

void StealingRanges::reset(int64_t n_units) {
    for (int i = 0; i < n_threads_; ++i) {
        int64_t b, e;
        ThreadPool::split(n_units, i, n_threads_, 1, &b, &e);
        ranges_[i].v.store(static_cast<uint64_t>(e) << 32 | static_cast<uint64_t>(b), std::memory_order_relaxed);
    }
}

int64_t StealingRanges::next(int i_thread) {
    int64_t b, e;  // a span of one unit: the front of the own share, else another's back
    return next_span(i_thread, 1, &b, &e) ? b : -1;
}

bool StealingRanges::next_span(int i_thread, int64_t max_units, int64_t* begin, int64_t* end) {
    // Relaxed is enough: the counters only decide who owns a unit; what a unit's work writes is
    // published by the pool's barrier.
    for (int d = 0; d < n_threads_; ++d) {
        const bool own = d == 0;
        std::atomic<uint64_t>& v = ranges_[(i_thread + d) % n_threads_].v;
        uint64_t cur = v.load(std::memory_order_relaxed);
        for (;;) {
            const uint64_t b = cur & 0xffffffffu, e = cur >> 32;
            if (b >= e) break;
            const uint64_t left = e - b, half = (left + 1) / 2, max = static_cast<uint64_t>(std::max<int64_t>(1, max_units));
            const uint64_t n = own ? (left >= 2 * max ? max : half) : std::min(max, half);
            const uint64_t want = own ? (e << 32 | (b + n)) : ((e - n) << 32 | b);
            if (v.compare_exchange_weak(cur, want, std::memory_order_relaxed)) {
                *begin = static_cast<int64_t>(own ? b : e - n);
                *end = static_cast<int64_t>(own ? b + n : e);
                return true;
            }
        }
    }
    return false;
}

}  // namespace ferrox
