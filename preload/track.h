// Bookkeeping behind the wrappers: which fds are TCP sockets we track, their
// mode and fallback reason, and the statistics.  Wrappers call these after
// the real call, with its result; none of them changes errno.
#pragma once
#include <sys/socket.h>
#include <sys/types.h>

#include "preload/fd_table.h"
#include "preload/stats.h"

namespace xp::track {

extern FdTable g_table;
inline FdTable& table() {
  return g_table;
}

// Lock-free counted lookup (empty when fd is not a tracked socket): for
// anything that acts on the socket's state.
inline SocketRef lookup(int fd) {
  FdTable& t = table();
  if (__builtin_expect(t.empty(), 0)) return {};
  return t.get(fd);
}
// Uncounted lookup for statistics only (see FdTable::peek).
inline SocketRecord* peek(int fd) {
  FdTable& t = table();
  if (__builtin_expect(t.empty(), 0)) return nullptr;
  return t.peek(fd);
}

void on_socket(int fd, int domain, int type);
void on_listen(int fd);
// After connect() returned 0 or failed with EINPROGRESS.
void on_connect(int fd, const struct sockaddr* addr, socklen_t len);
void on_accept(int listen_fd, int fd);
// Before the real close: forget the fd (the kernel may reuse the number as
// soon as close returns).
void on_close(int fd);
// The program turns a kernel feature on for fd (preload/kernel_features.h):
// the connection leaves RDMA for good first (stream/pin.h).  false: it
// could not be handed to the kernel cleanly; the option must be refused.
bool on_kernel_feature(int fd, Reason why, bool rx);
// The kernel took the option: a socket not connected yet (or a listener,
// whose accepted sockets inherit it) never upgrades.
void after_kernel_feature(int fd, Reason why);
void on_close_range(unsigned first, unsigned last);
// newfd now names the same socket as oldfd (dup family, F_DUPFD).
void on_dup(int oldfd, int newfd);
// An fd created by a call that makes no socket: any stale record goes.
void forget(int fd);
// The upgrade of a connected non-blocking socket starts at its first data call.
void start_deferred(SocketRecord& r);
// The readiness layer's part of a readiness-source change (stream/ready_source.h).
void set_readiness_hook(void (*h)(int fd, stream::ReadySource* now));

// Descriptors that arrived with SCM_RIGHTS.
void forget_passed_fds(const struct msghdr* msg);

// One data call on a tracked socket, from before its bytes reach the
// kernel (or the stream) until its result is counted: the after-fork
// check takes the kernel's counts only while no call is in between
// (stream/fork_bytes.h observe()).  seq_cst: the begun count is visible
// before the call's system call can move a byte.
class CallInFlight {
public:
  explicit CallInFlight(SocketRecord* r) : s_(r ? r->slot : nullptr) {
    if (s_) {
      gen_ = s_->calls_gen.load(std::memory_order_acquire);
      s_->calls_begun.fetch_add(1, std::memory_order_seq_cst);
    }
  }
  ~CallInFlight() {
    if (s_ && s_->calls_gen.load(std::memory_order_relaxed) == gen_)
      s_->calls_done.fetch_add(1, std::memory_order_seq_cst);
  }
  CallInFlight(const CallInFlight&) = delete;
  CallInFlight& operator=(const CallInFlight&) = delete;

private:
  ConnSlot* s_;
  uint64_t gen_ = 0;
};

// The connection's own row when it has one (see ConnSlot), else the totals.
inline void count_tx(SocketRecord& r, ssize_t n) {
  if (n <= 0) return;
  if (ConnSlot* s = r.slot) {
    s->bytes_tx.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    s->msgs_tx.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Counters& c = stats::c();
  int m = static_cast<int>(r.mode);
  c.bytes_tx[m].fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  c.msgs_tx[m].fetch_add(1, std::memory_order_relaxed);
}
inline void count_rx(SocketRecord& r, ssize_t n) {
  if (n <= 0) return;
  if (ConnSlot* s = r.slot) {
    s->bytes_rx.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    s->msgs_rx.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Counters& c = stats::c();
  int m = static_cast<int>(r.mode);
  c.bytes_rx[m].fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  c.msgs_rx[m].fetch_add(1, std::memory_order_relaxed);
}

} // namespace xp::track
