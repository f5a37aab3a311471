// The seam between the readiness layer (preload/: epoll, poll, select) and a
// connection whose readiness xpress computes itself ("user mode"): while a
// connection upgrades or runs over RDMA, the kernel TCP socket no longer
// tells the truth about it (its bytes arrive over the channel), so the
// readiness layer asks the connection instead of the kernel.
#pragma once
#include <cstdint>

namespace xp::stream {

struct Channel;

class ReadySource {
public:
  // Readiness now, as epoll bits (EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLHUP,
  // EPOLLERR; poll's POLL* bits have the same values).  Level: what a
  // level-triggered waiter would be told.  Lock-free and cheap.
  virtual uint32_t ready_events() const = 0;
  // Changes whenever a new readiness event happened that concerns a
  // registration for `events` (bytes arrived for EPOLLIN, the send window
  // opened for EPOLLOUT, end of stream, reset, an error for any): an edge
  // for EPOLLET and EPOLLEXCLUSIVE.  As the kernel's: room to write is no
  // EPOLLIN edge.  Monotonic modulo 2^32.
  virtual uint32_t ready_gen(uint32_t events) const = 0;
  // The kernel socket whose own readiness is this source's for some
  // direction now (a connection that upgrades reads and writes TCP until
  // its switch), and in *events the poll bits of those directions; -1 if
  // none.  A sleeper that waits in the kernel watches it too, so that TCP
  // bytes wake it directly: otherwise only the engine's relay of the
  // socket's readiness does, and the engine spends tens of ms creating a
  // channel under TCG just when a new connection's first bytes flow.
  virtual int kernel_watch(short* events) const {
    (void)events;
    return -1;
  }
  // The channel whose completions change this source's readiness now, or
  // null (none, or it failed): a sleeper waits on that channel's completion
  // fd itself (stream/channel_sleep.h).
  virtual Channel* sleep_channel() const { return nullptr; }

protected:
  ~ReadySource() = default;
};

// The readiness layer installs this; the stream layer calls it (from any
// thread, with no lock of its own held) when fd's readiness source changes:
// becomes non-null (the connection entered user mode: kernel registrations
// of fd must stop reporting it) or null (back to the kernel: registrations
// must be restored with the application's mask and data).
using ModeHook = void (*)(int fd, ReadySource* now);
void set_mode_hook(ModeHook h);
void notify_mode(int fd, ReadySource* now);

} // namespace xp::stream
