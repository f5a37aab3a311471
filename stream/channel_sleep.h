// A thread asleep in poll, select or epoll_wait over user-mode connections
// waits on their channels' completion fds itself, as a blocked call does
// (conn_io.cc, Waiter): the completion that ends its sleep wakes it, it
// polls the channel and sees its connection ready.  Problem: left to the
// engine thread, each message costs two wake-ups (the engine's, then the
// sleeper's through its eventfd) where kernel TCP costs one, and the engine
// scans the sleepers under a process-wide lock to find whom to wake.
// Mechanism: while a channel has such a sleeper, the engine stops watching
// its completion fd (channel_events.cc, sleep_enter), so an event wakes the
// sleepers, and the first to take it polls for all; the others find the
// event gone and look at their own connections again.  A channel someone
// busy-polls right now is left to that spinner: it relays what arrives
// through the sleepers' eventfds, and arming the queue under it would wake
// the sleeper for every one of its messages.  Nor does the sleeper wake for
// credits and acknowledgements, its own sends' completions: it arms for
// solicited completions only (docs/protocol.md §4), unless some thread of
// the process may wait for room to send (engine::room_wait_enter).
#pragma once
#include <cstdint>

#include "stream/ready_source.h"

namespace xp::stream {

class ChannelSleep {
public:
  static constexpr int kMax = 4; // channels a sleeper waits on itself; the rest through the engine
  ChannelSleep() = default;
  ~ChannelSleep() { clear(); }
  ChannelSleep(const ChannelSleep&) = delete;
  ChannelSleep& operator=(const ChannelSleep&) = delete;

  // XPRESS_SLEEP_ON_CHANNEL: whether sleepers collect channels at all.
  static bool enabled();
  // The channel src's readiness depends on joins (once; held until clear());
  // nothing unless enabled() (callers check first to skip their scan).
  void add(const ReadySource* src);
  int size() const { return n_; }
  int fd(int i) const { return fds_[i]; }
  // Before the kernel wait, after the sleeper's registration and final
  // look: arms each channel and takes its events from the engine.  True
  // when one was unarmed: what arrived meanwhile raised no event, so it was
  // polled, nothing is held for the sleep, and the caller looks again.
  bool begin();
  // After the kernel wait (only after begin() returned false): fired bit i
  // set when fd(i) was readable; its event is taken and the channel polled.
  void end(uint32_t fired);
  // Lets go of the channels.
  void clear();
  void drop(int i); // lets go of channel i (the others keep their order)

private:
  Channel* chs_[kMax];
  int fds_[kMax];
  int n_ = 0;
  bool entered_ = false;
};

// A sleeper in poll, select or epoll_wait that may wait for room to send on
// an RDMA stream (POLLOUT, EPOLLOUT): credits and acknowledgements must wake
// it, so no channel waits for solicited completions only meanwhile.
class RoomWait {
public:
  RoomWait() = default;
  ~RoomWait() { leave(); }
  RoomWait(const RoomWait&) = delete;
  RoomWait& operator=(const RoomWait&) = delete;
  void enter(); // before the sleeper's final look
  void leave();

private:
  bool in_ = false;
};

} // namespace xp::stream
