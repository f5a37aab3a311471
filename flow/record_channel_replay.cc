// Recovery's view of the send side (cold path, docs/protocol.md §7): the
// records posted but not yet credited back, read from the staging mirror of
// the peer's ring; and what a zero-copy sender does before it lets its
// buffer go (fill the staged payloads recovery may still need; once per
// large send), or after its channel failed (wait for the flush).
#include <cstring>

#include "flow/record_channel.h"

namespace xp::flow {

Status RecordChannel::walk_uncredited(Visitor visit, void* ctx) const {
  const size_t ring = peer_ring_;
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

size_t RecordChannel::fill_uncredited(uint32_t stream, uint64_t from_cursor, uint64_t lo,
                                      uint64_t hi, uint64_t src_seq, const uint8_t* src) {
  struct Fill {
    uint8_t* stage;
    uint32_t stream;
    uint64_t from, lo, hi, src_seq;
    const uint8_t* src;
    size_t copied;
  } f{link_->send_stage(), stream, from_cursor, lo, hi, src_seq, src, 0};
  // The walk hands out const views into the staging mirror, which this end
  // owns: write through its own pointer at the same place.
  walk_uncredited(
      [](void* ctx, uint64_t cursor, const RecordHeader& h, const uint8_t* payload) {
        auto* f = static_cast<Fill*>(ctx);
        if (h.type != static_cast<uint8_t>(RecordType::data) || h.stream != f->stream ||
            cursor < f->from)
          return true;
        uint64_t a = h.seq > f->lo ? h.seq : f->lo;
        uint64_t b = h.seq + h.len < f->hi ? h.seq + h.len : f->hi;
        if (a >= b) return true;
        uint8_t* dst = f->stage + (payload - f->stage) + (a - h.seq);
        memcpy(dst, f->src + (a - f->src_seq), b - a);
        f->copied += b - a;
        return true;
      },
      &f);
  return f.copied;
}

bool RecordChannel::drain_failed(uint64_t wr_id) {
  if (completed_ >= wr_id) return true;
  // Only the error state guarantees the NIC stops reading soon: a channel
  // failed for a keepalive timeout or a protocol error may still have a
  // working queue pair.  Nobody posts or polls records on a failed channel
  // any more, so its completions are ours to take.
  if (!forced_error_) {
    forced_error_ = true;
    link_->force_error();
  }
  verbs::Completion wc[32];
  // Bounded: a broken CQ may report errors without ids forever; the caller
  // comes back.
  for (int round = 0; round < 64 && completed_ < wr_id; ++round) {
    int n = link_->poll(wc, 32);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i)
      if (wc[i].kind != verbs::Completion::Kind::recv_imm && wc[i].wr_id > completed_)
        completed_ = wc[i].wr_id;
  }
  return completed_ >= wr_id;
}

} // namespace xp::flow
