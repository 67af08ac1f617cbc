#pragma once
// A fixed-bucket latency histogram for Prometheus: observe() from the engine thread, read
// from any thread (relaxed atomics; a scrape may see a sample in the count a moment before
// the sum, which Prometheus tolerates).

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace ferrox {

class Histogram {
public:
    // Upper bounds in seconds, increasing; +Inf is implicit.
    static constexpr std::array<double, 12> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                       0.5,   1.0,  2.5,   5.0,  10.0, 30.0};

    void observe(double seconds) {
        size_t i = 0;
        while (i < kBounds.size() && seconds > kBounds[i]) ++i;
        counts_[i].fetch_add(1, std::memory_order_relaxed);
        sum_us_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
    }

    // Prometheus text exposition of this histogram under `name`.
    std::string prometheus(const std::string& name, const std::string& help) const;

private:
    std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
    std::atomic<uint64_t> sum_us_{0};
};

}  // namespace ferrox
