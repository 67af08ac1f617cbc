#include "engine/histogram.h"

#include <cstdio>

namespace ferrox {

std::string Histogram::prometheus(const std::string& name, const std::string& help) const {
    std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    uint64_t cumulative = 0;
    char buf[160];
    for (size_t i = 0; i <= kBounds.size(); ++i) {
        cumulative += counts_[i].load(std::memory_order_relaxed);
        if (i < kBounds.size()) {
            std::snprintf(buf, sizeof buf, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), kBounds[i],
                          static_cast<unsigned long long>(cumulative));
        } else {
            std::snprintf(buf, sizeof buf, "%s_bucket{le=\"+Inf\"} %llu\n", name.c_str(),
                          static_cast<unsigned long long>(cumulative));
        }
        out += buf;
    }
    std::snprintf(buf, sizeof buf, "%s_sum %.6f\n%s_count %llu\n", name.c_str(),
                  static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1e6, name.c_str(),
                  static_cast<unsigned long long>(cumulative));
    out += buf;
    return out;
}

}  // namespace ferrox
