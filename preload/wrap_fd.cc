// Calls that create non-socket fds.  The kernel may hand out a number whose
// socket was closed behind our back (fclose of an fdopen()ed socket, a raw
// close syscall): the stale record must go before anyone looks it up.
#include <cstdarg>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "preload/boundary.h"

using namespace xp;

namespace {
inline int forgotten(int fd) {
  if (fd >= 0) {
    int saved = errno;
    track::forget(fd);
    errno = saved;
  }
  return fd;
}
// The mode argument exists only with O_CREAT or O_TMPFILE.
inline mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}
} // namespace

XP_EXPORT int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return forgotten(XP_REAL(open, path, flags, mode));
}

XP_EXPORT int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return forgotten(XP_REAL(open64, path, flags, mode));
}

XP_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return forgotten(XP_REAL(openat, dirfd, path, flags, mode));
}

XP_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return forgotten(XP_REAL(openat64, dirfd, path, flags, mode));
}

XP_EXPORT int pipe(int fds[2]) noexcept {
  int r = XP_REAL(pipe, fds);
  if (r == 0) {
    forgotten(fds[0]);
    forgotten(fds[1]);
  }
  return r;
}

XP_EXPORT int pipe2(int fds[2], int flags) noexcept {
  int r = XP_REAL(pipe2, fds, flags);
  if (r == 0) {
    forgotten(fds[0]);
    forgotten(fds[1]);
  }
  return r;
}

XP_EXPORT int eventfd(unsigned int initval, int flags) noexcept {
  return forgotten(XP_REAL(eventfd, initval, flags));
}
