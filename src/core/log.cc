#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace ferrox {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}

void log_set_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_printf(LogLevel level, const char* fmt, ...) {
    if (static_cast<int>(level) < g_level.load()) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    std::string line(buf, n < static_cast<int>(sizeof(buf)) ? n : sizeof(buf) - 1);
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ferrox
