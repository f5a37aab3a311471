// Logging that never allocates, never clobbers errno and never re-enters our
// wrappers (raw syscalls only), so it is safe in wrappers and signal handlers.
#pragma once
#include <atomic>
#include <cstdarg>
#include <fcntl.h>

namespace xp {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3, trace = 4 };

namespace log {
// Current threshold; set by configuration (default warn), and at run time
// by xpress-stat -l (set_level: the lower layers' threshold too).
extern std::atomic<LogLevel> g_level;
inline bool enabled(LogLevel l) {
  return static_cast<int>(l) <= static_cast<int>(g_level.load(std::memory_order_relaxed));
}
void set_level(LogLevel l);

// Open the log destination: nullptr/"" means stderr; "%p" in the path becomes the pid.
void open_destination(const char* path_template);
// After fork: a per-pid log file is reopened under the child's pid.
void after_fork_child();
int fd();

void write(LogLevel l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void vwrite(LogLevel l, const char* fmt, va_list ap);
// Unconditional line on stderr (configuration errors: the user must see them).
void to_stderr(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Every file xpress creates from a path it was given (XPRESS_LOG_FILE,
// XPRESS_STATS_FILE): never through a symbolic link at the last component,
// never inherited across exec, readable by the owner only (logs name peers).
constexpr int kCreateFlags = O_CREAT | O_CLOEXEC | O_NOFOLLOW;
constexpr unsigned kCreateMode = 0600;
// Opens tmpl ("%p" expanded) for appending with kCreateFlags; -1 and errno.
int open_append(const char* tmpl);

// Expand "%p" to the pid into out (size n); returns false if it does not fit.
bool expand_path(const char* tmpl, int pid, char* out, unsigned n);
} // namespace log

} // namespace xp

#define XP_LOG(level, ...)                                                                         \
  do {                                                                                             \
    if (::xp::log::enabled(::xp::LogLevel::level))                                                 \
      ::xp::log::write(::xp::LogLevel::level, __VA_ARGS__);                                        \
  } while (0)
