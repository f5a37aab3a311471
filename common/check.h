// Assertions with context for the checked builds (UCX's ucs_assertv): the
// test library (-DXP_TESTING) and the sanitizer unit build
// (-DXP_CHECK_LOCKS) check invariants and lock rules (common/lock_check.h);
// the release library compiles the checks away, so they may sit on the
// data path.
#pragma once
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#if defined(XP_TESTING) || defined(XP_CHECK_LOCKS)
#define XP_CHECKED 1
#else
#define XP_CHECKED 0
#endif

namespace xp {

// A failed check: reported on stderr directly (the log's own lock may be
// held), then abort.
[[noreturn, gnu::cold, gnu::noinline, gnu::format(printf, 3, 4)]] inline void
check_failed(const char* file, int line, const char* fmt, ...) {
  char buf[320];
  int n = snprintf(buf, sizeof buf, "xpress: check failed at %s:%d: ", file, line);
  if (n < 0 || static_cast<size_t>(n) >= sizeof buf) n = 0;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m > 0 ? static_cast<size_t>(m) : 0);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  (void)!write(2, buf, len);
  abort();
}

} // namespace xp

#if XP_CHECKED
#define XP_ASSERTV(cond, ...)                                                                      \
  do {                                                                                             \
    if (__builtin_expect(!(cond), 0))                                                              \
      ::xp::check_failed(__FILE__, __LINE__, #cond ": " __VA_ARGS__);                              \
  } while (0)
#else
#define XP_ASSERTV(cond, ...) ((void)0)
#endif
