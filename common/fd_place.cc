#include "common/fd_place.h"

#include <atomic>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp {
namespace {
// Internal fds are few (a handful per channel): a small table, scanned.
constexpr int kMax = 4096;
std::atomic<int> g_fds[kMax];
std::atomic<int> g_n{0};

void remember(int fd) {
  int n = g_n.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (g_fds[i].load(std::memory_order_relaxed) == fd) return;
  int slot = g_n.fetch_add(1, std::memory_order_acq_rel);
  if (slot < kMax) g_fds[slot].store(fd, std::memory_order_release);
}
} // namespace

bool is_internal(int fd) {
  int n = g_n.load(std::memory_order_acquire);
  if (n > kMax) n = kMax;
  for (int i = 0; i < n; ++i)
    if (g_fds[i].load(std::memory_order_relaxed) == fd) return true;
  return false;
}

int next_internal(int from) {
  int n = g_n.load(std::memory_order_acquire);
  if (n > kMax) n = kMax;
  int best = -1;
  for (int i = 0; i < n; ++i) {
    int f = g_fds[i].load(std::memory_order_relaxed);
    if (f >= from && (best < 0 || f < best)) best = f;
  }
  return best;
}

int place_high(int fd) {
  rlimit rl;
  if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return fd;
  rlim_t base = rl.rlim_cur - rl.rlim_cur / 16;
  if (base > 8192) base = 8192;
  if (static_cast<rlim_t>(fd) >= base) {
    remember(fd);
    return fd;
  }
  long moved = syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, static_cast<long>(base));
  if (moved < 0) return fd;
  syscall(SYS_close, fd);
  remember(static_cast<int>(moved));
  return static_cast<int>(moved);
}

} // namespace xp
