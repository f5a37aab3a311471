// Recovery's view of the send side (cold path, docs/protocol.md §7): the
// records posted but not yet credited back, read from the staging mirror of
// the peer's ring.  Nothing here runs while the channel carries data.
#include <cstring>

#include "flow/record_channel.h"

namespace xp::flow {

Status RecordChannel::walk_uncredited(Visitor visit, void* ctx) const {
  const size_t ring = link_->peer_ring_size();
  const uint8_t* stage = link_->send_stage();
  const uint64_t tail = send_credit_.tail();
  // The peer granted everything below limit - ring: records from there on
  // may still be unread by it, and their staged bytes are untouched (we
  // write a region again only after a grant covers it).  A grant always
  // ends at a record boundary (the receiver consumes whole records and
  // the skip before each).
  uint64_t cur = tail + send_credit_.available() - ring;
  while (cur < tail) {
    size_t pos = cur % ring;
    RecordHeader h;
    memcpy(&h, stage + pos, sizeof h);
    if (h.type == 0) { // the zero header post() leaves in a skipped tail
      cur += ring - pos;
      continue;
    }
    size_t bytes = record_bytes(h.len);
    if (h.type > static_cast<uint8_t>(RecordType::last) || pos + bytes > ring || cur + bytes > tail)
      return Status::invalid;
    if (!visit(ctx, cur, h, stage + pos + sizeof h)) return Status::ok;
    cur += bytes;
  }
  return cur == tail ? Status::ok : Status::invalid;
}

} // namespace xp::flow
