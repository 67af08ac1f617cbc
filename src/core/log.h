#pragma once
// Minimal leveled logging to stderr. Thread-safe (one fprintf per line).

#include <cstdarg>

namespace ferrox {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void log_set_level(LogLevel level);
LogLevel log_level();
void log_printf(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ferrox

#define FERROX_LOG_DEBUG(...) ::ferrox::log_printf(::ferrox::LogLevel::kDebug, __VA_ARGS__)
#define FERROX_LOG_INFO(...) ::ferrox::log_printf(::ferrox::LogLevel::kInfo, __VA_ARGS__)
#define FERROX_LOG_WARN(...) ::ferrox::log_printf(::ferrox::LogLevel::kWarn, __VA_ARGS__)
#define FERROX_LOG_ERROR(...) ::ferrox::log_printf(::ferrox::LogLevel::kError, __VA_ARGS__)
