// Kernel byte counts of a socket shared by a fork (stream/fork_bytes.h).
#include "stream/fork_bytes.h"

#include <atomic>
#include <cstddef>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp::stream::fork_bytes {
namespace {

std::atomic<AppCounts> g_app{nullptr};

} // namespace

bool kernel(int fd, Kernel* out) {
  ::tcp_info ti{}; // linux/tcp.h: has tcpi_bytes_acked, tcpi_bytes_received
  socklen_t len = sizeof ti;
  if (syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(::tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
    return false;
  // TCP_ESTABLISHED (1): no FIN either way, whose sequence number the
  // counts include.
  if (ti.tcpi_state != 1) return false;
  int outq = 0, inq = 0;
  if (syscall(SYS_ioctl, fd, SIOCOUTQ, &outq) != 0 || syscall(SYS_ioctl, fd, SIOCINQ, &inq) != 0 ||
      outq < 0 || inq < 0 || static_cast<uint64_t>(inq) > ti.tcpi_bytes_received)
    return false;
  out->written = ti.tcpi_bytes_acked + static_cast<uint64_t>(outq);
  out->read = ti.tcpi_bytes_received - static_cast<uint64_t>(inq);
  return true;
}

void set_app_counts(AppCounts f) {
  g_app.store(f, std::memory_order_release);
}

bool app_counts(int fd, uint64_t* tx, uint64_t* rx) {
  AppCounts f = g_app.load(std::memory_order_acquire);
  return f != nullptr && f(fd, tx, rx);
}

Use judge(const Mark& mark, const Kernel& now, uint64_t app_tx, uint64_t app_rx,
          uint64_t held_left) {
  // What our calls took from the kernel: what they read, less what came
  // from the bytes held in user space at the mark.
  const uint64_t held_read = mark.held_rx - held_left;
  if (held_left > mark.held_rx || now.written < mark.k.written || now.read < mark.k.read ||
      app_tx < mark.app_tx || app_rx < mark.app_rx || app_rx - mark.app_rx < held_read)
    return Use::inconsistent;
  const uint64_t ours_w = app_tx - mark.app_tx;
  const uint64_t ours_r = app_rx - mark.app_rx - held_read;
  const uint64_t kern_w = now.written - mark.k.written;
  const uint64_t kern_r = now.read - mark.k.read;
  if (kern_w < ours_w || kern_r < ours_r) return Use::inconsistent;
  return kern_w == ours_w && kern_r == ours_r ? Use::alone : Use::other;
}

const char* use_name(Use u) {
  switch (u) {
  case Use::alone:
    return "alone";
  case Use::other:
    return "other";
  case Use::inconsistent:
    return "inconsistent";
  }
  return "?";
}

bool observe(int fd, const Mark& mark, uint64_t held_left, int tries, Use* out) {
  Use u = Use::other;
  int judged = 0;
  // At most this many samples in all: a socket our threads keep busy may
  // never hold still between two of our counts.
  for (int sample = 0; sample < 16 * tries && judged < tries; ++sample) {
    uint64_t tx0, rx0, tx1, rx1;
    Kernel k;
    // Ours, the kernel's, ours again: a call of ours that completed in
    // between changes ours, and the sample is taken again.
    if (!app_counts(fd, &tx0, &rx0) || !kernel(fd, &k) || !app_counts(fd, &tx1, &rx1)) return false;
    if (tx0 != tx1 || rx0 != rx1) continue;
    u = judge(mark, k, tx1, rx1, held_left);
    ++judged;
    if (u != Use::other) break;
    if (judged < tries) usleep(1000);
  }
  if (judged == 0) return false;
  *out = u;
  return true;
}

} // namespace xp::stream::fork_bytes
