#include "common/fd_place.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp {

int place_high(int fd) {
  rlimit rl;
  if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return fd;
  rlim_t base = rl.rlim_cur - rl.rlim_cur / 16;
  if (base > 8192) base = 8192;
  if (static_cast<rlim_t>(fd) >= base) return fd;
  long moved = syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, static_cast<long>(base));
  if (moved < 0) return fd;
  syscall(SYS_close, fd);
  return static_cast<int>(moved);
}

} // namespace xp
