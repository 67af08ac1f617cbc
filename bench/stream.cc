// A STREAM-like memory read bandwidth probe: sums a buffer much larger than the last-level
// cache (1 GiB by default) with AVX2 loads, split into contiguous chunks over 1, 2, ... threads,
// best of several runs. One decode step reads every weight once, so this bandwidth divided by
// the bytes of weights is the speed limit of decoding (bench/bench_cpu.py reports the fraction
// of it that ferrox and llama.cpp reach).
//
// Not part of the CMake build (it wants -march=native; ferrox's own binary does not):
//   g++ -O3 -march=native -pthread bench/stream.cc -o build/bench/stream
// bench/bench_cpu.py compiles it on first use.
//
// Usage: stream [--gib 1] [--threads 1,2] [--reps 5] [--no-hugepages] [--json]
// Bandwidth is in GB/s (1e9 bytes per second). The buffer is anonymous memory, advised to
// transparent huge pages unless --no-hugepages (4 KiB pages add TLB misses, as a file mapped
// from the page cache has).

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

// Sum of the 64-bit words in [p, p + n_bytes); n_bytes a multiple of 128, p 32-byte aligned.
uint64_t sum_words(const uint8_t* p, size_t n_bytes) {
#if defined(__AVX2__)
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n_bytes; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
    const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n_bytes / 8; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
    }
    return s0 + s1 + s2 + s3;
#endif
}

// One timed pass of n_threads threads over the buffer; returns seconds. Threads are started
// and parked before the clock starts, so thread creation is not timed.
double timed_pass(const uint8_t* buf, size_t n_bytes, int n_threads, uint64_t* checksum) {
    std::atomic<int> n_ready{0};
    std::atomic<bool> go{false};
    std::vector<uint64_t> sums(static_cast<size_t>(n_threads) * 8);  // a cache line apart
    std::vector<std::thread> threads;
    const size_t chunk = n_bytes / n_threads / 128 * 128;
    for (int i = 0; i < n_threads; ++i) {
        threads.emplace_back([&, i] {
            const size_t b = i * chunk;
            const size_t e = i + 1 == n_threads ? n_bytes : b + chunk;
            n_ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) {
            }
            sums[static_cast<size_t>(i) * 8] = sum_words(buf + b, e - b);
        });
    }
    while (n_ready.load() < n_threads) {
    }
    const auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (auto& t : threads) t.join();
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_threads; ++i) *checksum += sums[static_cast<size_t>(i) * 8];
    return std::chrono::duration<double>(t1 - t0).count();
}

std::vector<int> parse_list(const char* s) {
    std::vector<int> out;
    for (const char* p = s; *p;) {
        char* end = nullptr;
        long v = std::strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1024) {
            std::fprintf(stderr, "stream: bad thread list '%s'\n", s);
            std::exit(2);
        }
        out.push_back(static_cast<int>(v));
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            std::fprintf(stderr, "stream: bad thread list '%s'\n", s);
            std::exit(2);
        }
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    double gib = 1.0;
    std::vector<int> threads = {1, 2};
    int reps = 5;
    bool hugepages = true;
    bool json = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--gib" && i + 1 < argc) {
            gib = std::atof(argv[++i]);
        } else if (a == "--threads" && i + 1 < argc) {
            threads = parse_list(argv[++i]);
        } else if (a == "--reps" && i + 1 < argc) {
            reps = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--no-hugepages") {
            hugepages = false;
        } else if (a == "--json") {
            json = true;
        } else {
            std::fprintf(
                stderr,
                "usage: stream [--gib 1] [--threads 1,2] [--reps 5] [--no-hugepages] [--json]\n");
            return a == "-h" || a == "--help" ? 0 : 2;
        }
    }
    const size_t kAlign = size_t{2} << 20;
    const size_t n_bytes =
        std::max<size_t>(kAlign, static_cast<size_t>(gib * 1073741824.0) / kAlign * kAlign);
    void* mem = mmap(nullptr, n_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        std::perror("stream: mmap");
        return 1;
    }
    madvise(mem, n_bytes, hugepages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    uint8_t* buf = static_cast<uint8_t*>(mem);
    for (size_t i = 0; i < n_bytes; i += 8) {
        const uint64_t v = i >> 3;
        std::memcpy(buf + i, &v, 8);  // touches every page before timing
    }

    uint64_t checksum = 0;
    std::string out = json ? "{\"gib\": " + std::to_string(n_bytes / 1073741824.0) +
                                 ", \"hugepages\": " + (hugepages ? "true" : "false") +
                                 ", \"avx2\": " +
#if defined(__AVX2__)
                                 "true"
#else
                                 "false"
#endif
                                 + ", \"results\": ["
                           : "";
    for (size_t it = 0; it < threads.size(); ++it) {
        const int n_threads = threads[it];
        timed_pass(buf, n_bytes, n_threads, &checksum);  // warm-up
        std::vector<double> gbs;
        for (int r = 0; r < reps; ++r)
            gbs.push_back(n_bytes / timed_pass(buf, n_bytes, n_threads, &checksum) / 1e9);
        std::sort(gbs.begin(), gbs.end());
        const double best = gbs.back(), median = gbs[gbs.size() / 2];
        char line[256];
        if (json) {
            std::snprintf(line, sizeof line,
                          "%s{\"threads\": %d, \"best_gbs\": %.3f, \"median_gbs\": %.3f}",
                          it ? ", " : "", n_threads, best, median);
        } else {
            std::snprintf(
                line, sizeof line,
                "read %.2f GiB, %d thread%s: best %.2f GB/s, median %.2f GB/s (%d runs)\n",
                n_bytes / 1073741824.0, n_threads, n_threads == 1 ? "" : "s", best, median, reps);
        }
        out += line;
    }
    if (json) out += "]}\n";
    std::fputs(out.c_str(), stdout);
    // The checksum keeps the sums observable (never printed unless it is impossible).
    if (checksum == 1) std::fputs("\n", stderr);
    munmap(mem, n_bytes);
    return 0;
}
