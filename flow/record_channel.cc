#include "flow/record_channel.h"

#include "common/bulk_copy.h"
#include "common/logsink.h"

#include <cstring>
#include <sys/mman.h>

namespace xp::flow {
namespace {

size_t pow2_mask(size_t n) {
  return n != 0 && (n & (n - 1)) == 0 ? n - 1 : 0;
}

size_t max_payload_of(size_t ring) {
  // Worst case a record is placed after skipping almost its own size at the
  // ring end, with the control reserve free and up to a quarter of the ring
  // consumed but not yet granted (RecvCredit::should_grant): 2 records +
  // reserve + quarter must fit, so a record may use at most a quarter.
  size_t max_record = (ring / 4) & ~(kRecordAlign - 1);
  return max_record - sizeof(RecordHeader);
}

} // namespace

RecordChannel::RecordChannel(verbs::Link* link, uint32_t signal_every)
    : link_(link), repost_spare_(link->recv_spare()), peer_ring_(link->peer_ring_size()),
      recv_ring_(link->recv_ring_size()), peer_mask_(pow2_mask(peer_ring_)),
      recv_mask_(pow2_mask(recv_ring_)), max_payload_(max_payload_of(peer_ring_)),
      sq_depth_(link->send_queue_depth()), signal_every_(signal_every == 0 ? 1 : signal_every),
      send_credit_(peer_ring_), recv_credit_(recv_ring_) {
  pending_cap_ = static_cast<uint32_t>(recv_ring_ / kRecordAlign);
  pending_mask_ = static_cast<uint32_t>(pow2_mask(pending_cap_));
  // Set-up time allocation (mmap: no malloc, which the allocator hook
  // serves), the control backlog after the pending table.
  void* mem =
      mmap(nullptr, alloc_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    failed_ = true;
    pending_cap_ = 0;
  } else {
    pending_ = static_cast<Pending*>(mem);
    deferred_ = reinterpret_cast<Deferred*>(static_cast<uint8_t*>(mem) + deferred_offset());
    tx_bare_ = reinterpret_cast<BareTrack*>(static_cast<uint8_t*>(mem) + seq_offset());
    rx_bare_ = tx_bare_ + kBareStreams;
    for (uint32_t i = 0; i < kBareStreams; ++i)
      tx_bare_[i] = rx_bare_[i] = BareTrack{kNoSeq, 0, 0};
  }
}

RecordChannel::~RecordChannel() {
  if (pending_) munmap(pending_, alloc_bytes());
}

size_t RecordChannel::deferred_offset() const {
  size_t at = sizeof(Pending) * pending_cap_;
  return (at + alignof(Deferred) - 1) & ~(alignof(Deferred) - 1);
}

size_t RecordChannel::seq_offset() const {
  size_t at = deferred_offset() + sizeof(Deferred) * kDeferredMax;
  return (at + alignof(BareTrack) - 1) & ~(alignof(BareTrack) - 1);
}

size_t RecordChannel::alloc_bytes() const {
  return seq_offset() + 2 * sizeof(BareTrack) * kBareStreams;
}

Status RecordChannel::post(RecordType type, uint32_t stream, uint64_t seq, const void* payload,
                           size_t len, bool control, const uint32_t* lkey) {
  if (failed_) return Status::io_error;
  // A held record goes before anything sent after it (ring order is
  // stream order).
  if (Status st = flush_cork(); st != Status::ok) return st;
  // Data waits behind the control backlog (a stream's SWITCH before its
  // bytes, a MOVE after them).
  if (!control && deferred_tail_ != deferred_head_ && flush_deferred() != Status::ok)
    return Status::no_resource;
  // Send queue: keep one slot free so a signaled WR can always be posted.
  if (send_queue_stall()) return Status::no_resource;
  size_t off = 0;
  Status st = stage(type, stream, seq, len, control, &off);
  if (st != Status::ok) return st;
  if (len && !lkey) bulk_copy(link_->send_stage() + off + sizeof(RecordHeader), payload, len);
  return post_staged(type, stream, seq, payload, len, off, lkey);
}

Status RecordChannel::stage(RecordType type, uint32_t stream, uint64_t seq, size_t len,
                            bool control, size_t* off) {
  size_t ring = peer_ring_;
  size_t bytes = record_bytes(len);
  size_t pos = peer_pos(send_credit_.tail());
  size_t skip = pos + bytes > ring ? ring - pos : 0;
  size_t need = skip + bytes + (control ? 0 : kControlReserve);
  if (send_credit_.available() < need) {
    ++counters_.credit_stalls;
    return Status::no_resource;
  }
  uint64_t ignored;
  if (send_credit_.reserve(skip + bytes, &ignored) != Status::ok) return Status::no_resource;
  // A skipped tail gets a zero header in the staging mirror (never sent):
  // the recovery walk (record_channel_replay.cc) must tell a skip from a
  // stale record left there by the previous lap.
  if (skip) memset(link_->send_stage() + pos, 0, sizeof(RecordHeader));
  *off = peer_pos(pos + skip);
  RecordHeader h{};
  h.type = static_cast<uint8_t>(type);
  h.stream = stream;
  h.seq = seq;
  h.len = static_cast<uint32_t>(len);
  memcpy(link_->send_stage() + *off, &h, sizeof h);
  return Status::ok;
}

Status RecordChannel::post_staged(RecordType type, uint32_t stream, uint64_t seq,
                                  const void* payload, size_t len, size_t off,
                                  const uint32_t* lkey) {
  const size_t bytes = record_bytes(len);
  Status st;
  if (lkey) {
    // Zero copy: the payload stays in the application's buffer; the
    // completion (always signaled) tells when the NIC is done reading it.
    since_signal_ = 0;
    ++posted_;
    st = link_->post_write_imm_gather(off, sizeof(RecordHeader), payload, len, *lkey,
                                      static_cast<uint32_t>(bytes), posted_);
  } else {
    bool signaled = ++since_signal_ >= signal_every_;
    if (signaled) since_signal_ = 0;
    ++posted_;
    // The staged header stays (the recovery walk reads it); only the
    // payload goes when the stream continues where it left off.
    const BareTrack& t = tx_bare_[bare_slot(stream)];
    bool bare = type == RecordType::data && len > 0 && len < (1u << kBareLenBits) &&
                t.stream == stream && t.next == seq;
    // Credits and acknowledgements only open room to send: a sleeper that
    // waits for none (docs/protocol.md §4, "Completion events") is not woken.
    bool solicited = type != RecordType::credit && type != RecordType::ack;
    if (bare)
      st = link_->post_write_imm(off + sizeof(RecordHeader), len,
                                 bare_imm(stream, static_cast<uint32_t>(len)), signaled, true,
                                 posted_);
    else
      st = link_->post_write_imm(off, bytes, static_cast<uint32_t>(bytes), signaled, solicited,
                                 posted_);
  }
  if (st != Status::ok) {
    failed_ = true;
    return st;
  }
  if (type == RecordType::data) tx_bare_[bare_slot(stream)] = BareTrack{seq + len, stream, 0};
  ++counters_.records_sent;
  XP_SLOG(XP_SLOG_TRACE, "rc %p: sent type %u stream %u seq %llu len %zu at %zu", (void*)this,
          static_cast<unsigned>(type), stream, static_cast<unsigned long long>(seq), len, off);
  return Status::ok;
}

Status RecordChannel::send_control(RecordType type, uint32_t stream, uint64_t seq,
                                   const void* payload, size_t len) {
  if (type == RecordType::data || type == RecordType::credit || len > kMaxControlPayload)
    return Status::invalid;
  if (failed_) return Status::io_error;
  Status st = flush_deferred(); // the older ones first
  if (st == Status::ok) st = post(type, stream, seq, payload, len, true);
  if (st != Status::no_resource) return st;
  // (Without backlog memory the constructor set failed_: not here then.)
  if (deferred() >= kDeferredMax) return Status::no_resource;
  Deferred& d = deferred_[deferred_tail_ % kDeferredMax];
  d.type = static_cast<uint8_t>(type);
  d.stream = stream;
  d.seq = seq;
  d.len = static_cast<uint32_t>(len);
  if (len) memcpy(d.payload, payload, len);
  ++deferred_tail_;
  ++counters_.control_deferred;
  return Status::ok;
}

Status RecordChannel::flush_deferred() {
  while (deferred_head_ != deferred_tail_) {
    const Deferred& d = deferred_[deferred_head_ % kDeferredMax];
    Status st = post(static_cast<RecordType>(d.type), d.stream, d.seq, d.payload, d.len, true);
    if (st != Status::ok) return st;
    ++deferred_head_;
  }
  return Status::ok;
}

bool RecordChannel::can_send(size_t len) const {
  if (failed_ || len > max_payload() || deferred_tail_ != deferred_head_) return false;
  // A held record may have to go first: room for both.
  if (send_queue_full(cork_.open ? 1 : 0)) return false;
  size_t ring = peer_ring_;
  size_t bytes = record_bytes(len);
  size_t pos = peer_pos(send_credit_.tail());
  size_t skip = pos + bytes > ring ? ring - pos : 0;
  return send_credit_.available() >= skip + bytes + kControlReserve;
}

Status RecordChannel::send(uint32_t stream, uint64_t seq, const void* payload, size_t len,
                           bool hold) {
  if (len > max_payload()) return Status::invalid;
  if (cork_max_ != 0 && !failed_) {
    // Bytes that continue the held record join it; without hold it then
    // goes at once (one record, not two).  The bytes are taken either
    // way: a post that must wait leaves the record held for the stream
    // layer's next look, a failed link leaves it staged for recovery
    // (failed_ tells the next call).
    if (cork_.open && try_extend_cork(stream, seq, payload, len)) {
      if (!hold) (void)flush_cork();
      return Status::ok;
    }
    if (hold && len < cork_max_ && deferred_tail_ == deferred_head_)
      return open_cork(stream, seq, payload, len);
  }
  return post(RecordType::data, stream, seq, payload, len, false);
}

Status RecordChannel::send_zero_copy(uint32_t stream, uint64_t seq, const void* payload, size_t len,
                                     uint32_t lkey, uint64_t* wr_id) {
  if (len > max_payload() || len == 0) return Status::invalid;
  if (!zero_copy_capable()) return Status::unsupported;
  Status st = post(RecordType::data, stream, seq, payload, len, false, &lkey);
  if (st == Status::ok) *wr_id = posted_;
  return st;
}

Status RecordChannel::maybe_grant() {
  if (!recv_credit_.should_grant()) return Status::ok;
  // Commit the grant only once the credit record was posted: a post that
  // must wait must not lose the grant.
  Status st = post(RecordType::credit, 0, recv_credit_.consumed(), nullptr, 0, true);
  if (st == Status::ok) {
    recv_credit_.take_grant();
    ++counters_.credit_records_sent;
  }
  return st == Status::no_resource ? Status::ok : st; // retried on the next poll
}

Status RecordChannel::repost() {
  Status st = link_->post_recvs(repost_owed_);
  repost_owed_ = 0;
  if (st != Status::ok) failed_ = true;
  return st == Status::ok ? Status::ok : Status::io_error;
}

Status RecordChannel::poll(Record* out, int max, int* got) {
  *got = 0;
  if (failed_) return Status::io_error;
  verbs::Completion wc[32];
  while (*got < max) {
    int want = max - *got < 32 ? max - *got : 32;
    int n = link_->poll(wc, want);
    if (n <= 0) {
      // Nothing came: the caller is waiting, so the receive requests owed
      // go back now, off the way from a completion to its reader.
      if (*got == 0 && repost_owed_ > 0 && repost() != Status::ok) return Status::io_error;
      break;
    }
    // Fewer than asked: the queue was empty after them.  Not polling it
    // again saves a provider call (its lock) on every receive; whatever
    // completes later is seen by the next poll, or raises an event once
    // the queue is armed.
    const bool drained = n < want;
    for (int i = 0; i < n; ++i) {
      const verbs::Completion& c = wc[i];
      if (c.kind == verbs::Completion::Kind::error) {
        // The request is no longer processed either (a zero-copy sender
        // waits for exactly that: drain_failed()).
        if (c.wr_id > completed_) completed_ = c.wr_id;
        failed_ = true;
        return Status::io_error;
      }
      if (c.kind == verbs::Completion::Kind::send_done) {
        if (c.wr_id > completed_) completed_ = c.wr_id;
        continue;
      }
      // A record arrived and took a receive WR.  The peer's credit bounds
      // the records it can have in our ring unreleased at one per 64-byte
      // slot, and the link posts one WR per slot plus repost_spare_: while
      // we owe fewer than the spares back, the queue never runs dry (no
      // RNR).  One provider call per batch instead of one per record.
      if (++repost_owed_ >= repost_spare_ && repost() != Status::ok) return Status::io_error;
      size_t ring = recv_ring_;
      size_t bytes = c.imm;
      const bool bare = c.imm & kBareFlag;
      const BareTrack& bt = rx_bare_[(c.imm & ~kBareFlag) >> kBareLenBits];
      const uint32_t bare_len = c.imm & ((1u << kBareLenBits) - 1);
      if (bare) {
        // A slot that had no data record here yet cannot continue one.
        if (bare_len == 0 || bt.next == kNoSeq) {
          ++counters_.protocol_errors;
          failed_ = true;
          return Status::invalid;
        }
        bytes = record_bytes(bare_len);
      }
      if (bytes < kRecordAlign || bytes % kRecordAlign != 0 || bytes > ring) {
        ++counters_.protocol_errors;
        failed_ = true;
        return Status::invalid;
      }
      size_t pos = recv_pos(recv_cursor_);
      size_t skip = pos + bytes > ring ? ring - pos : 0;
      if (recv_credit_.on_arrival(skip + bytes) != Status::ok ||
          pending_tail_ - pending_head_ >= pending_cap_) {
        ++counters_.protocol_errors; // the peer wrote beyond its credit
        failed_ = true;
        return Status::invalid;
      }
      recv_cursor_ += skip + bytes;
      size_t off = recv_pos(pos + skip);
      // The header, read from the ring once into a private copy that is
      // validated here and handed on (Record::hdr): the peer can rewrite its
      // ring at any time, so no later check may read the ring's bytes again.
      RecordHeader hdr;
      const uint8_t* at = link_->recv_ring() + off;
      if (bare) {
        // The header the sender left out (nothing reads it from the ring).
        hdr = RecordHeader{};
        hdr.type = static_cast<uint8_t>(RecordType::data);
        hdr.stream = bt.stream;
        hdr.seq = bt.next;
        hdr.len = bare_len;
      } else {
        memcpy(&hdr, at, sizeof hdr);
        // hdr is the value from here on: the compiler may not re-load a
        // field of it from the ring instead.
        asm volatile("" : "+m"(hdr));
      }
      uint32_t slot = pending_slot(pending_tail_);
      pending_[slot] = Pending{static_cast<uint32_t>(skip + bytes), false};
      ++pending_tail_;
      if (record_bytes(hdr.len) != bytes) {
        ++counters_.protocol_errors;
        failed_ = true;
        return Status::invalid;
      }
      if (hdr.type == static_cast<uint8_t>(RecordType::credit)) {
        if (send_credit_.on_grant(hdr.seq) != Status::ok) {
          ++counters_.protocol_errors;
          failed_ = true;
          return Status::invalid;
        }
        release(slot);
        continue;
      }
      if (hdr.type == 0 || hdr.type > static_cast<uint8_t>(RecordType::last) ||
          (hdr.type != static_cast<uint8_t>(RecordType::data) && hdr.len > kMaxControlPayload)) {
        ++counters_.protocol_errors;
        failed_ = true;
        return Status::invalid;
      }
      if (hdr.type == static_cast<uint8_t>(RecordType::data))
        rx_bare_[bare_slot(hdr.stream)] = BareTrack{hdr.seq + hdr.len, hdr.stream, 0};
      ++counters_.records_received;
      XP_SLOG(XP_SLOG_TRACE, "rc %p: got type %u stream %u seq %llu len %u at %zu", (void*)this,
              hdr.type, hdr.stream, static_cast<unsigned long long>(hdr.seq), hdr.len, off);
      out[(*got)++] = Record{hdr, at + sizeof(RecordHeader), slot};
    }
    if (drained) break;
  }
  Status st = maybe_grant(); // credit first: it is what frees the peer
  if (st != Status::ok) return st;
  st = flush_deferred(); // room may have come back
  return st == Status::no_resource ? Status::ok : st;
}

Status RecordChannel::release(uint32_t slot) {
  if (slot >= pending_cap_ || pending_head_ == pending_tail_) return Status::invalid;
  pending_[slot].released = true;
  // Credit back the released prefix, in ring order.
  while (pending_head_ != pending_tail_) {
    Pending& p = pending_[pending_slot(pending_head_)];
    if (!p.released) break;
    recv_credit_.on_consumed(p.ring_bytes);
    p.released = false;
    ++pending_head_;
  }
  return maybe_grant();
}

} // namespace xp::flow
