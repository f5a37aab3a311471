// The software send window (docs/protocol.md §5): unacknowledged bytes are
// bounded per stream and, through a shared parent, per channel or peer.  A
// send that does not fit gets Status::no_resource and waits in the caller's
// pending queue (UCX's NO_RESOURCE idea) until acknowledgements open room.
// Acknowledgements are cumulative per stream, in stream byte sequence
// numbers; recovery resumes from acked().
#pragma once
#include <cstdint>

#include "common/check.h"
#include "common/status.h"

namespace xp::flow {

// A budget shared by several windows (a channel, a peer).
class WindowBudget {
public:
  explicit WindowBudget(uint64_t limit) : limit_(limit) {}
  bool fits(uint64_t n) const { return in_flight_ + n <= limit_; }
  void take(uint64_t n) {
    in_flight_ += n;
    XP_ASSERTV(in_flight_ <= limit_, "in flight %llu limit %llu",
               static_cast<unsigned long long>(in_flight_),
               static_cast<unsigned long long>(limit_));
  }
  void give(uint64_t n) {
    XP_ASSERTV(n <= in_flight_, "give %llu in flight %llu", static_cast<unsigned long long>(n),
               static_cast<unsigned long long>(in_flight_));
    in_flight_ -= n;
  }
  uint64_t in_flight() const { return in_flight_; }
  uint64_t limit() const { return limit_; }

private:
  uint64_t limit_;
  uint64_t in_flight_ = 0;
};

class SendWindow {
public:
  // start: the stream sequence where this path begins (the switch offset S).
  SendWindow(uint64_t start, uint64_t limit, WindowBudget* channel, WindowBudget* peer)
      : acked_(start), next_(start), limit_(limit), channel_(channel), peer_(peer) {}

  // Ask to send n more bytes starting at next(); a partial fit is offered
  // through *allowed so large sends make progress in pieces.
  Status reserve(uint64_t n, uint64_t* allowed) {
    uint64_t room = limit_ - (next_ - acked_);
    if (channel_) room = min(room, channel_->limit() - channel_->in_flight());
    if (peer_) room = min(room, peer_->limit() - peer_->in_flight());
    *allowed = min(n, room);
    if (*allowed == 0) return n == 0 ? Status::invalid : Status::no_resource;
    next_ += *allowed;
    if (channel_) channel_->take(*allowed);
    if (peer_) peer_->take(*allowed);
    check();
    return Status::ok;
  }

  // Give back the last n bytes reserve() handed out (they were never sent:
  // the post failed), so next() counts only bytes the caller accepted.
  void unreserve(uint64_t n) {
    if (n > next_ - acked_) n = next_ - acked_;
    next_ -= n;
    if (channel_) channel_->give(n);
    if (peer_) peer_->give(n);
  }

  // Cumulative ack: everything below seq was delivered to the peer's
  // application.  Old acks are harmless; an ack beyond what was sent is a
  // protocol error (invalid).
  Status on_ack(uint64_t seq) {
    if (seq > next_) return Status::invalid;
    if (seq <= acked_) return Status::ok;
    uint64_t freed = seq - acked_;
    acked_ = seq;
    if (channel_) channel_->give(freed);
    if (peer_) peer_->give(freed);
    check();
    return Status::ok;
  }

  uint64_t acked() const { return acked_; } // resume point for recovery
  uint64_t next() const { return next_; }   // next sequence to send
  uint64_t unacked() const { return next_ - acked_; }

private:
  static uint64_t min(uint64_t a, uint64_t b) { return a < b ? a : b; }
  // acked <= next, and never more unacknowledged than the window.
  void check() const {
    XP_ASSERTV(acked_ <= next_ && next_ - acked_ <= limit_, "acked %llu next %llu limit %llu",
               static_cast<unsigned long long>(acked_), static_cast<unsigned long long>(next_),
               static_cast<unsigned long long>(limit_));
  }
  uint64_t acked_, next_, limit_;
  WindowBudget* channel_;
  WindowBudget* peer_;
};

} // namespace xp::flow
