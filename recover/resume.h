// Resuming a stream on another path (interface; the recovery issue fills it
// in).  Both ends know, per direction, the sender's next sequence and the
// receiver's cumulative delivered sequence; the resume point of a direction
// is what its receiver delivered, and everything the sender kept from there
// on is re-sent, nothing before it (docs/protocol.md, principle 2).
#pragma once
#include <cstdint>

#include "common/status.h"

namespace xp::recover {

struct DirectionState {
  uint64_t sender_acked;       // cumulative ack the sender last received
  uint64_t sender_next;        // next sequence the sender would send
  uint64_t receiver_delivered; // what the receiver handed to its application
};

// Where to resume and how many bytes to re-send; invalid when the two sides'
// numbers contradict each other (a receiver claims more than was sent, or
// less than it already acknowledged).
inline Status resume_point(const DirectionState& d, uint64_t* from, uint64_t* resend) {
  if (d.receiver_delivered > d.sender_next || d.receiver_delivered < d.sender_acked)
    return Status::invalid;
  *from = d.receiver_delivered;
  *resend = d.sender_next - d.receiver_delivered;
  return Status::ok;
}

} // namespace xp::recover
