// Logging for the layers below preload/: they must not include it, so the
// preload layer installs its writer here at start-up (log once where an
// error is found).  Levels as xp::LogLevel: 0 error .. 4 trace.
#pragma once
#include <atomic>
#include <cstdarg>

namespace xp::logsink {

using Writer = void (*)(int level, const char* fmt, va_list ap);
extern std::atomic<Writer> g_writer;
extern std::atomic<int> g_level; // -1 until installed: nothing is formatted

void install(Writer w, int level);
void emit(int level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace xp::logsink

#define XP_SLOG(lvl, ...)                                                                          \
  do {                                                                                             \
    if (::xp::logsink::g_level.load(std::memory_order_relaxed) >= (lvl))                           \
      ::xp::logsink::emit((lvl), __VA_ARGS__);                                                     \
  } while (0)
#define XP_SLOG_WARN 1
#define XP_SLOG_INFO 2
#define XP_SLOG_DEBUG 3
#define XP_SLOG_TRACE 4
