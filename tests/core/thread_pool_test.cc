#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

namespace ferrox {
namespace {

TEST(ThreadPool, EveryThreadRunsEveryJob) {
    for (int n : {1, 2, 3, 5}) {
        ThreadPool pool(n);
        std::vector<std::atomic<int>> hits(n);
        for (int rep = 0; rep < 1000; ++rep) {
            pool.run([&](int i, int nt) {
                ASSERT_EQ(nt, n);
                hits[i].fetch_add(1);
            });
        }
        for (int i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1000) << "thread " << i;
    }
}

TEST(ThreadPool, SplitCoversRangeExactlyOnce) {
    for (int64_t n : {0, 1, 7, 16, 17, 1000}) {
        for (int nt : {1, 2, 3, 8}) {
            for (int64_t align : {1, 4, 16}) {
                std::vector<int> seen(n, 0);
                int64_t prev_end = 0;
                for (int i = 0; i < nt; ++i) {
                    int64_t b, e;
                    ThreadPool::split(n, i, nt, align, &b, &e);
                    EXPECT_EQ(b, prev_end);
                    EXPECT_TRUE(b % align == 0 || b == n);
                    for (int64_t k = b; k < e; ++k) ++seen[k];
                    prev_end = e;
                }
                EXPECT_EQ(prev_end, n);
                for (int64_t k = 0; k < n; ++k) EXPECT_EQ(seen[k], 1);
            }
        }
    }
}

TEST(StealingRanges, OwnShareInOrderThenTheOthersFromTheBack) {
    StealingRanges r(3);
    r.reset(10);  // shares [0, 4), [4, 7), [7, 10)
    std::vector<int64_t> got;
    for (int64_t u; (u = r.next(1)) >= 0;) got.push_back(u);
    EXPECT_EQ(got, (std::vector<int64_t>{4, 5, 6, 9, 8, 7, 3, 2, 1, 0}));
    EXPECT_EQ(r.next(0), -1);
    EXPECT_EQ(r.next(2), -1);

    r.reset(5);  // [0, 2), [2, 4), [4, 5)
    EXPECT_EQ(r.next(0), 0);
    EXPECT_EQ(r.next(2), 4);
    EXPECT_EQ(r.next(2), 0 + 1);  // its share is done: the back of thread 0's
    EXPECT_EQ(r.next(0), 3);      // then thread 0 takes from thread 1's back
    EXPECT_EQ(r.next(1), 2);
    EXPECT_EQ(r.next(1), -1);

    r.reset(0);
    EXPECT_EQ(r.next(0), -1);
}

// 4 threads claim every unit of n_units through `claim` (i_thread, &begin, &end: false when
// done), thread 0 slowly so the others run out and take from its share; each unit exactly once.
template <typename Claim>
void check_every_unit_once(StealingRanges& r, Claim claim) {
    constexpr int kThreads = 4;
    ThreadPool pool(kThreads);
    for (int64_t n : {1, 7, 1000, 200000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        r.reset(n);
        pool.run([&](int i, int) {
            for (int64_t b, e; claim(i, &b, &e);) {
                if (i == 0) std::this_thread::yield();
                EXPECT_TRUE(b < e && e - b <= 8);
                for (int64_t u = b; u < e; ++u) seen[static_cast<size_t>(u)].fetch_add(1);
            }
        });
        int64_t once = 0;
        for (auto& s : seen) once += s.load() == 1;
        EXPECT_EQ(once, n) << "n " << n;
    }
}

TEST(StealingRanges, EveryUnitOnceUnderContention) {
    StealingRanges r(4);
    check_every_unit_once(r, [&](int i, int64_t* b, int64_t* e) {
        *b = r.next(i);
        *e = *b + 1;
        return *b >= 0;
    });
}

TEST(StealingRanges, SpansAreWholeTilesThenHalvesThenStolenHalves) {
    StealingRanges r(2);
    r.reset(40);  // shares [0, 20), [20, 40)
    const auto span = [&](int i) {
        int64_t b = -1, e = -1;
        return r.next_span(i, 8, &b, &e) ? std::pair{b, e} : std::pair<int64_t, int64_t>{-1, -1};
    };
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{0, 8}));    // 20 left: a whole 8
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{8, 14}));   // 12 left (< 16): half
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{14, 17}));  // 6 left: 3
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{17, 19}));
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{19, 20}));
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{32, 40}));  // thread 1's back: half of 20, at most 8
    EXPECT_EQ(span(1), (std::pair<int64_t, int64_t>{20, 26}));  // its own front, 12 left: half
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{29, 32}));  // half of the 6 left, from the back
    EXPECT_EQ(span(1), (std::pair<int64_t, int64_t>{26, 28}));
    EXPECT_EQ(span(1), (std::pair<int64_t, int64_t>{28, 29}));
    EXPECT_EQ(span(1), (std::pair<int64_t, int64_t>{-1, -1}));
    EXPECT_EQ(span(0), (std::pair<int64_t, int64_t>{-1, -1}));
}

TEST(StealingRanges, SpansCoverEveryUnitOnceUnderContention) {
    StealingRanges r(4);
    check_every_unit_once(r, [&](int i, int64_t* b, int64_t* e) { return r.next_span(i, 8, b, e); });
}

TEST(ThreadPool, ParallelSumIsCorrect) {
    ThreadPool pool(2);
    std::vector<int64_t> v(100000);
    std::iota(v.begin(), v.end(), 0);
    std::atomic<int64_t> total{0};
    pool.run([&](int i, int n) {
        int64_t b, e;
        ThreadPool::split(static_cast<int64_t>(v.size()), i, n, 1, &b, &e);
        int64_t s = 0;
        for (int64_t k = b; k < e; ++k) s += v[k];
        total += s;
    });
    EXPECT_EQ(total.load(), int64_t{99999} * 100000 / 2);
}

}  // namespace
}  // namespace ferrox
