// Receive credits over one channel's receive ring (docs/protocol.md §5).
// The receiver owns a ring of `capacity` bytes that the sender writes into
// with RDMA WRITE_WITH_IMM.  The sender may write only up to the credit the
// receiver granted; the receiver grants again (a cumulative "consumed up to"
// offset) once enough space was freed.  Cursors are 64-bit byte counts that
// never wrap in practice; ring positions are cursor % capacity.
#pragma once
#include <cstdint>

#include "common/check.h"
#include "common/status.h"

namespace xp::flow {

// Sender side: how much of the peer's ring it may still fill.
class SendCredit {
public:
  explicit SendCredit(uint64_t capacity) : capacity_(capacity), limit_(capacity) {}
  // Reserve n bytes at the tail; no_resource when the ring has no room (wait
  // for a grant), invalid when n can never fit.
  Status reserve(uint64_t n, uint64_t* offset) {
    if (n == 0 || n > capacity_) return Status::invalid;
    if (tail_ + n > limit_) return Status::no_resource;
    *offset = tail_ % capacity_;
    tail_ += n;
    check();
    return Status::ok;
  }
  // A grant from the receiver: it consumed everything below `consumed`.
  // Grants are cumulative; stale, repeated or impossible ones are rejected.
  Status on_grant(uint64_t consumed) {
    if (consumed > tail_) return Status::invalid; // peer consumed what we never wrote
    uint64_t limit = consumed + capacity_;
    if (limit > limit_) limit_ = limit;
    check();
    return Status::ok;
  }
  uint64_t available() const { return limit_ - tail_; }
  uint64_t tail() const { return tail_; }

private:
  // Never past the credit; never more credit than one ring past what was
  // written.
  void check() const {
    XP_ASSERTV(tail_ <= limit_ && limit_ <= tail_ + capacity_, "tail %llu limit %llu capacity %llu",
               static_cast<unsigned long long>(tail_), static_cast<unsigned long long>(limit_),
               static_cast<unsigned long long>(capacity_));
  }
  uint64_t capacity_;
  uint64_t tail_ = 0; // bytes written so far
  uint64_t limit_;    // may write while tail < limit
};

// Receiver side: what arrived, what the application consumed, when to grant.
class RecvCredit {
public:
  explicit RecvCredit(uint64_t capacity) : capacity_(capacity) {}
  // A record of n bytes arrived at the sender's tail; invalid if the sender
  // overran the credit it had (a protocol error: the channel is closed).
  Status on_arrival(uint64_t n) {
    if (n == 0 || arrived_ + n > granted_consumed_ + capacity_) return Status::invalid;
    arrived_ += n;
    check();
    return Status::ok;
  }
  // The bytes of the oldest records were consumed (copied out or read).
  Status on_consumed(uint64_t n) {
    if (consumed_ + n > arrived_) return Status::invalid;
    consumed_ += n;
    check();
    return Status::ok;
  }
  // Grant when a quarter of the ring was freed since the last grant.  With
  // records of at most a quarter of the ring (RecordChannel::max_payload),
  // an empty ring always has room for the largest record even after a wrap
  // skip, so sender and receiver can never wait on each other; and a grant
  // costs one small record per quarter ring, not one per message.
  bool should_grant() const { return consumed_ - granted_consumed_ >= capacity_ / 4; }
  // Returns the cumulative offset to send and remembers it as granted.
  uint64_t take_grant() {
    granted_consumed_ = consumed_;
    check();
    return consumed_;
  }
  uint64_t in_ring() const { return arrived_ - consumed_; }
  uint64_t consumed() const { return consumed_; }

private:
  // granted <= consumed <= arrived <= granted + capacity: the ring never
  // holds more than the credit the sender had.
  void check() const {
    XP_ASSERTV(granted_consumed_ <= consumed_ && consumed_ <= arrived_ &&
                   arrived_ <= granted_consumed_ + capacity_,
               "granted %llu consumed %llu arrived %llu capacity %llu",
               static_cast<unsigned long long>(granted_consumed_),
               static_cast<unsigned long long>(consumed_),
               static_cast<unsigned long long>(arrived_),
               static_cast<unsigned long long>(capacity_));
  }
  uint64_t capacity_;
  uint64_t arrived_ = 0;
  uint64_t consumed_ = 0;
  uint64_t granted_consumed_ = 0;
};

} // namespace xp::flow
