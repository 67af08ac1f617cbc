// The machine's integer multiply-add peak for the u8 x i8 products the quantized kernels use:
// T threads (argument, default 1) each run 6 independent chains of
// vpmaddubsw (32 byte products summed in pairs into 16-bit lanes) + vpmaddwd (the pairs into
// 32-bit lanes) + vpaddd (the accumulate): the instruction sequence of a Q4/Q8 block product on
// AVX2 without VNNI. Reports products per second (one u8 x i8 multiply-add = one product) as
// GMAC/s, for the pair as the quantized kernels need it and for vpmaddubsw alone (the bound of
// any kernel on this ISA); and where the CPU has AVX-512 VNNI, vpdpbusd on zmm alone (the
// instruction the AVX-512 kernels use) and with the Q4_1 kernels' float step per block. Built and run by bench/peak_fraction.py:
//   g++ -O2 -mavx2 -mfma -pthread bench/int_peak.cc -o /tmp/int_peak && /tmp/int_peak 2
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 6;
constexpr long kIters = 40'000'000;

// Returns a value derived from the accumulators so the loop cannot be removed. Written out
// chain by chain: every chain in registers, no loop over an array the compiler might keep in
// memory.
template <bool kWithMadd>
__attribute__((noinline)) int run(long iters) {
    __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2);
    __m256i a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5);
    __m256i x0 = _mm256_set1_epi8(3), x1 = _mm256_set1_epi8(4), x2 = _mm256_set1_epi8(5);
    __m256i x3 = _mm256_set1_epi8(6), x4 = _mm256_set1_epi8(7), x5 = _mm256_set1_epi8(8);
    const __m256i y = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    for (long it = 0; it < iters; ++it) {
        // The inputs are opaque each iteration: no product can be hoisted or shared.
        __asm__ volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3), "+x"(x4), "+x"(x5));
#define FERROX_CHAIN(a, x)                                  \
        {                                                   \
            __m256i p = _mm256_maddubs_epi16(x, y);         \
            if (kWithMadd) p = _mm256_madd_epi16(p, ones);  \
            a = _mm256_add_epi32(a, p);                     \
        }
        FERROX_CHAIN(a0, x0) FERROX_CHAIN(a1, x1) FERROX_CHAIN(a2, x2)
        FERROX_CHAIN(a3, x3) FERROX_CHAIN(a4, x4) FERROX_CHAIN(a5, x5)
#undef FERROX_CHAIN
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                       _mm256_add_epi32(a4, a5));
    return _mm256_extract_epi32(s, 0);
}

// AVX-512 VNNI: vpdpbusd on zmm does the u8 x i8 products of 64 bytes, sums them in fours and
// accumulates into 16 32-bit lanes, one instruction for the three above. Its latency is about
// 4-5 cycles at up to 2 per cycle, so 10 independent chains keep both ports busy.
constexpr int kVnniChains = 10;

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) int run_vnni(long iters) {
    // Written out chain by chain, as run() above: an array of accumulators would live in memory.
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2);
    __m512i a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5);
    __m512i a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8);
    __m512i a9 = _mm512_set1_epi32(9);
    __m512i x0 = _mm512_set1_epi8(3), x1 = _mm512_set1_epi8(4), x2 = _mm512_set1_epi8(5);
    __m512i x3 = _mm512_set1_epi8(6), x4 = _mm512_set1_epi8(7), x5 = _mm512_set1_epi8(8);
    __m512i x6 = _mm512_set1_epi8(9), x7 = _mm512_set1_epi8(10), x8 = _mm512_set1_epi8(11);
    __m512i x9 = _mm512_set1_epi8(12);
    const __m512i y = _mm512_set1_epi8(-2);
    for (long it = 0; it < iters; ++it) {
        __asm__ volatile("" : "+v"(x0), "+v"(x1), "+v"(x2), "+v"(x3), "+v"(x4));
        __asm__ volatile("" : "+v"(x5), "+v"(x6), "+v"(x7), "+v"(x8), "+v"(x9));
        a0 = _mm512_dpbusd_epi32(a0, x0, y);
        a1 = _mm512_dpbusd_epi32(a1, x1, y);
        a2 = _mm512_dpbusd_epi32(a2, x2, y);
        a3 = _mm512_dpbusd_epi32(a3, x3, y);
        a4 = _mm512_dpbusd_epi32(a4, x4, y);
        a5 = _mm512_dpbusd_epi32(a5, x5, y);
        a6 = _mm512_dpbusd_epi32(a6, x6, y);
        a7 = _mm512_dpbusd_epi32(a7, x7, y);
        a8 = _mm512_dpbusd_epi32(a8, x8, y);
        a9 = _mm512_dpbusd_epi32(a9, x9, y);
    }
    const __m512i s = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                         _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
        _mm512_add_epi32(a8, a9));
    return _mm512_reduce_add_epi32(s);
}

// vpdpbusd with the float step the Q4_1 kernels add per block: per 16 rows, one column and one
// block (512 products) 8 vpdpbusd, then the block's integer sums converted and scaled,
// acc = fma(dx * dy, sums, fma(m, s, acc)): one multiply and two fused multiply-adds, which on
// Zen 4 issue to the same two pipes as vpdpbusd (8 vpdpbusd alone ~8 cycles, with the three
// ~11; the conversion goes elsewhere). The bound of a Q4_1 kernel that keeps a float step per
// block, as the reference order does.
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) int run_vnni_q4_1_step(long iters) {
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2);
    __m512i a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5);
    __m512i a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7);
    __m512i x0 = _mm512_set1_epi8(3), x1 = _mm512_set1_epi8(4), x2 = _mm512_set1_epi8(5);
    __m512i x3 = _mm512_set1_epi8(6), x4 = _mm512_set1_epi8(7), x5 = _mm512_set1_epi8(8);
    __m512i x6 = _mm512_set1_epi8(9), x7 = _mm512_set1_epi8(10);
    __m512 dx = _mm512_set1_ps(0.5f), dy = _mm512_set1_ps(0.25f), m = _mm512_set1_ps(0.125f);
    __m512 sy = _mm512_set1_ps(2.0f), f0 = _mm512_setzero_ps(), f1 = _mm512_setzero_ps();
    const __m512i y = _mm512_set1_epi8(-2);
    for (long it = 0; it < iters; ++it) {
        __asm__ volatile("" : "+v"(x0), "+v"(x1), "+v"(x2), "+v"(x3), "+v"(x4), "+v"(x5), "+v"(x6), "+v"(x7));
        __asm__ volatile("" : "+v"(dx), "+v"(dy), "+v"(m), "+v"(sy));
        a0 = _mm512_dpbusd_epi32(a0, x0, y);
        a1 = _mm512_dpbusd_epi32(a1, x1, y);
        a2 = _mm512_dpbusd_epi32(a2, x2, y);
        a3 = _mm512_dpbusd_epi32(a3, x3, y);
        a4 = _mm512_dpbusd_epi32(a4, x4, y);
        a5 = _mm512_dpbusd_epi32(a5, x5, y);
        a6 = _mm512_dpbusd_epi32(a6, x6, y);
        a7 = _mm512_dpbusd_epi32(a7, x7, y);
        f0 = _mm512_fmadd_ps(m, sy, f0);
        f1 = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(a0), f1);
    }
    const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    return _mm512_reduce_add_epi32(s) + static_cast<int>(_mm512_reduce_add_ps(_mm512_add_ps(f0, f1)));
}

enum class Kind { kMaddubsMadd, kMaddubs, kVnni512, kVnni512Q4_1Step };

double gmacs(int n_threads, Kind kind) {
    std::vector<std::thread> ts;
    std::vector<int> sink(n_threads);
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < n_threads; ++t) {
        ts.emplace_back([&, t] {
            sink[t] = kind == Kind::kMaddubsMadd ? run<true>(kIters)
                      : kind == Kind::kMaddubs   ? run<false>(kIters)
                      : kind == Kind::kVnni512   ? run_vnni(kIters)
                                                 : run_vnni_q4_1_step(kIters);
        });
    }
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    volatile int keep = 0;
    for (int v : sink) keep += v;
    (void)keep;
    // 32 byte products per vpmaddubsw chain step, 64 per vpdpbusd zmm.
    const double per_iter = kind == Kind::kVnni512 ? 64.0 * kVnniChains
                            : kind == Kind::kVnni512Q4_1Step ? 64.0 * 8
                                                             : 32.0 * kChains;
    return per_iter * kIters * n_threads / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
    const int n_threads = argc > 1 ? std::atoi(argv[1]) : 1;
    const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
    double best_pair = 0, best_alone = 0, best_vnni = 0, best_step = 0;
    for (int rep = 0; rep < 3; ++rep) {
        best_pair = std::max(best_pair, gmacs(n_threads, Kind::kMaddubsMadd));
        best_alone = std::max(best_alone, gmacs(n_threads, Kind::kMaddubs));
        if (vnni) best_vnni = std::max(best_vnni, gmacs(n_threads, Kind::kVnni512));
        if (vnni) best_step = std::max(best_step, gmacs(n_threads, Kind::kVnni512Q4_1Step));
    }
    std::printf("{\"threads\": %d, \"maddubs_madd_gmacs\": %.2f, \"maddubs_gmacs\": %.2f", n_threads, best_pair,
                best_alone);
    if (vnni) std::printf(", \"vnni512_gmacs\": %.2f, \"vnni512_q4_1_step_gmacs\": %.2f", best_vnni, best_step);
    std::printf("}\n");
    return 0;
}
