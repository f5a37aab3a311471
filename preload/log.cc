#include "preload/log.h"
#include "common/fork_parts.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/logsink.h"
#include "common/switches.h"

namespace xp::log {

std::atomic<LogLevel> g_level{LogLevel::warn};

void set_level(LogLevel l) {
  g_level.store(l, std::memory_order_relaxed);
  // The lower layers' threshold, once their writer is installed.
  int cur = logsink::g_level.load(std::memory_order_relaxed);
  while (cur >= 0 && !logsink::g_level.compare_exchange_weak(cur, static_cast<int>(l))) {
  }
}

namespace {
int g_fd = 2;
char g_template[256]; // kept to reopen per pid after fork

const char* level_name(LogLevel l) {
  static const char* names[] = {"error", "warn", "info", "debug", "trace"};
  return names[static_cast<int>(l)];
}

void raw_write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    long r = ::syscall(SYS_write, fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

} // namespace

int open_append(const char* tmpl) {
  char path[512];
  if (!expand_path(tmpl, static_cast<int>(::syscall(SYS_getpid)), path, sizeof path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return static_cast<int>(
      ::syscall(SYS_openat, AT_FDCWD, path, kCreateFlags | O_WRONLY | O_APPEND, kCreateMode));
}

bool expand_path(const char* tmpl, int pid, char* out, unsigned n) {
  unsigned o = 0;
  for (const char* p = tmpl; *p; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      int w = snprintf(out + o, n - o, "%d", pid);
      if (w < 0 || static_cast<unsigned>(w) >= n - o) return false;
      o += static_cast<unsigned>(w);
      ++p;
      continue;
    }
    if (o + 1 >= n) return false;
    out[o++] = *p;
  }
  out[o] = '\0';
  return true;
}

void open_destination(const char* path_template) {
  if (path_template == nullptr || *path_template == '\0') return;
  if (strstr(path_template, "%p") != nullptr) fork_parts::mark(fork_parts::kLog);
  snprintf(g_template, sizeof g_template, "%s", path_template);
  int fd = open_append(g_template);
  if (fd >= 0) {
    g_fd = fd;
  } else {
    to_stderr("xpress: cannot open XPRESS_LOG_FILE '%s' (%s); logging to stderr", path_template,
              strerror(errno));
  }
}

void after_fork_child() {
  if (!fork_parts::used(fork_parts::kLog)) return; // g_template's page untouched
  if (g_template[0] == '\0' || strstr(g_template, "%p") == nullptr) return;
  int fd = open_append(g_template);
  if (fd < 0) return;
  if (g_fd != 2) ::syscall(SYS_close, g_fd);
  g_fd = fd;
}

int fd() {
  return g_fd;
}

void vwrite(LogLevel l, const char* fmt, va_list ap) {
  int saved = errno;
  char line[sw::kLogLineMax];
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  int n = snprintf(line, sizeof line, "xpress[%ld] %ld.%06ld %s: ", ::syscall(SYS_getpid),
                   static_cast<long>(ts.tv_sec), ts.tv_nsec / 1000, level_name(l));
  if (n < 0) n = 0;
  int m = vsnprintf(line + n, sizeof line - static_cast<size_t>(n) - 1, fmt, ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  raw_write_all(g_fd, line, len);
  errno = saved;
}

void write(LogLevel l, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite(l, fmt, ap);
  va_end(ap);
}

void to_stderr(const char* fmt, ...) {
  int saved = errno;
  char line[sw::kLogLineMax];
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  size_t len = m < 0 ? 0 : static_cast<size_t>(m);
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  raw_write_all(2, line, len);
  errno = saved;
}

} // namespace xp::log
