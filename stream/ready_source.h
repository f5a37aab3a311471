// The seam between the readiness layer (preload/: epoll, poll, select) and a
// connection whose readiness xpress computes itself ("user mode"): while a
// connection upgrades or runs over RDMA, the kernel TCP socket no longer
// tells the truth about it (its bytes arrive over the channel), so the
// readiness layer asks the connection instead of the kernel.
#pragma once
#include <atomic>
#include <boost/intrusive/list.hpp>
#include <cstdint>

namespace xp::stream {

struct Channel;

// One watcher of a source's readiness, as the kernel's epoll entry on a
// socket's wait queue: an epoll set's registration of the socket
// (preload/epoll_regs.h), linked into the source's list while the set
// watches it, so that a change reaches only the sets that watch the socket.
class ReadyWatch : public boost::intrusive::list_base_hook<
                       boost::intrusive::link_mode<boost::intrusive::safe_link>> {
public:
  // The source's readiness changed (ReadySource::tell_watchers).  Called
  // with the source's watch lock held: it may take only locks that are
  // never held while calling watch()/unwatch() of a source (the set's ready
  // list lock, wake's bucket locks).  wake_exclusive false: an EPOLLEXCLUSIVE
  // watcher already woke a sleeper for this change (the kernel wakes one),
  // so an exclusive one only queues it.  Returns true when it is exclusive
  // and woke a sleeper.
  virtual bool on_change(bool wake_exclusive) = 0;

protected:
  ReadyWatch() = default;
  ReadyWatch(const ReadyWatch&) : ReadyWatch() {} // a copy is not linked
  ReadyWatch& operator=(const ReadyWatch&) { return *this; }
  ~ReadyWatch() = default;
};

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
  // Brings ready_gen() up to date with readiness the source has not counted
  // yet: a connection whose receive direction reads TCP has bytes readable
  // in the kernel before the engine's relay of them bumps its generation.
  // An EPOLLEXCLUSIVE look that asks for EPOLLIN, EPOLLPRI or EPOLLRDHUP
  // calls it after reading the generation and the level, before reading
  // the generation again (epoll_regs.cc, Regs::check), so that nothing it sees
  // readable can be at an old generation (two sets would both own that
  // one).  Only adds edges; may add one twice (a duplicate report, never a
  // lost one).
  virtual void catch_up() {}

  // Watchers (stream/wake.cc).  Lock rules: each source's list is guarded
  // by a watch lock (one of a fixed set of striped mutexes, re-made in a
  // fork child), taken inside any lock of the watcher's owner (an epoll
  // set's mu) and outside the locks on_change() takes.  watch/unwatch take
  // it; tell_watchers() takes it only when the list is not empty.
  void watch(ReadyWatch& w);
  void unwatch(ReadyWatch& w); // w is in this source's list, or in none
  // A readiness change: every watcher is told, in the order they came.
  // wake::notify(source) calls it; one load when nobody watches.
  void tell_watchers() const;
  // The same after the caller's own seq_cst fence (wake::notify, whose one
  // fence serves this load and its sleeper counts).
  void tell_watchers_fenced() const;
  uint32_t watchers() const { return n_watchers_.load(std::memory_order_relaxed); }
  // In a fork child, before anything there takes a watch lock
  // (preload/lifecycle.cc's child handler calls it first): the locks re-made.
  static void after_fork_child_watch();

protected:
  ReadySource() = default;
  ReadySource(const ReadySource&) = delete;
  ReadySource& operator=(const ReadySource&) = delete;
  ~ReadySource() = default;

private:
  using WatchList = boost::intrusive::list<ReadyWatch, boost::intrusive::constant_time_size<false>>;
  mutable WatchList watchers_;
  std::atomic<uint32_t> n_watchers_{0};
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
