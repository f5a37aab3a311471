// Kernel byte counts of a socket shared by a fork (stream/fork_bytes.h).
#include "stream/fork_bytes.h"

#include <atomic>
#include <cstddef>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xp::stream::fork_bytes {
namespace {

std::atomic<AppCounts> g_app{nullptr};

} // namespace

namespace {

// linux/tcp.h's tcp_info has tcpi_bytes_acked and tcpi_bytes_received.
bool info(int fd, ::tcp_info* ti) {
  socklen_t len = sizeof *ti;
  // TCP_ESTABLISHED (1): no FIN either way, whose sequence number the
  // counts include.
  return syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_INFO, ti, &len) == 0 &&
         len >= offsetof(::tcp_info, tcpi_bytes_received) + sizeof ti->tcpi_bytes_received &&
         ti->tcpi_state == 1;
}

} // namespace

bool kernel(int fd, Kernel* out, bool* moving) {
  if (moving) *moving = false;
  for (int i = 0; i < 4; ++i) {
    ::tcp_info a{}, b{};
    int outq = 0, inq = 0;
    if (!info(fd, &a) || syscall(SYS_ioctl, fd, SIOCOUTQ, &outq) != 0 ||
        syscall(SYS_ioctl, fd, SIOCINQ, &inq) != 0 || !info(fd, &b) || outq < 0 || inq < 0 ||
        static_cast<uint64_t>(inq) > a.tcpi_bytes_received)
      return false;
    if (a.tcpi_bytes_acked != b.tcpi_bytes_acked || a.tcpi_bytes_received != b.tcpi_bytes_received)
      continue;
    out->written = a.tcpi_bytes_acked + static_cast<uint64_t>(outq);
    out->read = a.tcpi_bytes_received - static_cast<uint64_t>(inq);
    return true;
  }
  if (moving) *moving = true;
  return false;
}

void set_app_counts(AppCounts f) {
  g_app.store(f, std::memory_order_release);
}

bool app_counts(int fd, Ours* out) {
  AppCounts f = g_app.load(std::memory_order_acquire);
  return f != nullptr && f(fd, out);
}

Sample sample(int fd, Kernel* k, uint64_t* tx, uint64_t* rx) {
  Ours a, b;
  bool moving = false;
  if (!app_counts(fd, &a)) return Sample::failed;
  if (!kernel(fd, k, &moving)) return moving ? Sample::busy : Sample::failed;
  if (!app_counts(fd, &b)) return Sample::failed;
  if (a.begun != a.done || b.begun != a.begun) return Sample::busy;
  *tx = a.tx;
  *rx = a.rx;
  return Sample::ok;
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

bool observe(int fd, const Mark& mark, uint64_t held_left, int tries, Use* out, bool* busy) {
  *busy = false;
  for (int i = 0; i < tries; ++i) {
    Kernel k;
    uint64_t tx, rx;
    switch (sample(fd, &k, &tx, &rx)) {
    case Sample::failed:
      *busy = false;
      return false;
    case Sample::busy:
      *busy = true;
      sched_yield(); // let the thread in its call count it
      continue;
    case Sample::ok:
      *out = judge(mark, k, tx, rx, held_left);
      *busy = false;
      return true;
    }
  }
  return false;
}

} // namespace xp::stream::fork_bytes
