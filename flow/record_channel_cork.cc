// Autocorking (docs/protocol.md §4, "Autocorking"): the mechanics of a
// held record.  Writes that the stream layer allows to wait (its stream
// has enough bytes in flight that the peer is busy with those; see
// Stream::may_hold) are gathered into one staged record, so a stream of
// 4 KiB writes costs one work request, one doorbell and one receive
// completion per 64 KiB instead of per write.  Hot path: no system call,
// no allocation; one memcpy per write, as without it.
#include <cstddef>
#include <cstring>

#include "common/bulk_copy.h"
#include "flow/record_channel.h"

namespace xp::flow {

void RecordChannel::set_cork(size_t max_payload_bytes) {
  size_t max = max_payload();
  cork_max_ = max_payload_bytes < max ? max_payload_bytes : max;
}

bool RecordChannel::try_extend_cork(uint32_t stream, uint64_t seq, const void* payload,
                                    size_t len) {
  if (cork_.stream != stream || cork_.seq + cork_.len != seq || cork_.len + len > cork_max_ ||
      deferred_tail_ != deferred_head_)
    return false;
  const size_t old_bytes = record_bytes(cork_.len), new_bytes = record_bytes(cork_.len + len);
  // The held record is the last one staged (anything else posts it
  // first), so it grows at the credit tail; it never crosses the ring end.
  if (cork_.off + new_bytes > peer_ring_) return false;
  const size_t more = new_bytes - old_bytes;
  if (more > 0) {
    if (send_credit_.available() < more + kControlReserve) return false;
    uint64_t ignored;
    if (send_credit_.reserve(more, &ignored) != Status::ok) return false;
  }
  uint8_t* rec = link_->send_stage() + cork_.off;
  bulk_copy(rec + sizeof(RecordHeader) + cork_.len, payload, len);
  cork_.len += len;
  // The staged header is what the recovery walk reads: keep it true.
  const uint32_t l = static_cast<uint32_t>(cork_.len);
  memcpy(rec + offsetof(RecordHeader, len), &l, sizeof l);
  ++counters_.cork_appends;
  return true;
}

Status RecordChannel::open_cork(uint32_t stream, uint64_t seq, const void* payload, size_t len) {
  if (Status st = flush_cork(); st != Status::ok) return st;
  size_t off = 0;
  Status st = stage(RecordType::data, stream, seq, len, false, &off);
  if (st != Status::ok) return st;
  bulk_copy(link_->send_stage() + off + sizeof(RecordHeader), payload, len);
  cork_.open = true;
  cork_.stream = stream;
  cork_.seq = seq;
  cork_.len = len;
  cork_.off = off;
  ++counters_.corked_records;
  return Status::ok;
}

Status RecordChannel::flush_cork() {
  if (!cork_.open) return Status::ok;
  if (failed_) return Status::io_error; // recovery finds it staged
  if (send_queue_stall()) return Status::no_resource;
  cork_.open = false;
  return post_staged(RecordType::data, cork_.stream, cork_.seq, nullptr, cork_.len, cork_.off,
                     nullptr);
}

} // namespace xp::flow
