// Records over one Link (docs/protocol.md §4-5): framing, byte credits with
// a reserve for control records, the ring wrap rule and credit return.
//
// Ring layout: records are [RecordHeader | payload], padded to 64 bytes.
// A record never crosses the ring end: when it does not fit in the bytes
// left before the end, both sides skip those bytes and the record starts at
// offset 0 (deterministic, so no padding message is needed).  The immediate
// carries the padded record length.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "flow/credits.h"
#include "verbs/link.h"

namespace xp::flow {

enum class RecordType : uint8_t {
  data = 1,   // stream bytes from `seq` on
  credit = 2, // channel-level, handled here: `seq` is the cumulative consumed offset
  ack = 3,    // stream: everything below `seq` was delivered to the application
  fin = 4,    // stream: the sender's half-close at `seq`
  rst = 5,    // stream: abort
  // Upgrade control (recover/, docs/protocol.md §1-3); payload up to
  // kMaxControlPayload bytes, never application data.
  attach = 6,     // payload: the TCP 4-tuple and nonce; `stream` proposes the id
  attach_ack = 7, // payload: nonce
  attach_nak = 8, // `seq`: reason code
  switch_ = 9,    // `seq`: switch offset S of the sender's direction; payload: proof
  keepalive = 10,
  proof = 11, // payload: binding proof (recover/upgrade_wire.h)
  move_ = 12, // stream leaves the channel for its TCP connection (stream/move.cc)
  // A resumed stream comes back (stream/reattach.cc, recover/reattach_wire.h).
  reattach = 13,     // `stream` proposes the id, `seq`: attempt counter; payload: tuple, tag
  reattach_ack = 14, // `seq`: the counter; payload: tag
  share = 15,        // payload: the binding's key exchange share (recover/pake.h)
  last = share,
};
constexpr size_t kMaxControlPayload = 128;

struct RecordHeader {
  uint8_t type;
  uint8_t flags;
  uint16_t reserved;
  uint32_t stream;
  uint64_t seq; // data: stream sequence of the first byte; credit: consumed offset
  uint32_t len; // payload bytes
  uint32_t pad;
};
static_assert(sizeof(RecordHeader) == 24);

constexpr size_t kRecordAlign = 64;
// Ring bytes that only control records may use, so credit can always flow
// back even when data filled the ring in both directions.
constexpr size_t kControlReserve = 4 * kRecordAlign;

inline size_t record_bytes(size_t payload) {
  return (sizeof(RecordHeader) + payload + kRecordAlign - 1) & ~(kRecordAlign - 1);
}

// Bare data records (docs/protocol.md §4): a data record that continues its
// stream where that stream's previous data record on this channel ended
// travels without its header, which the immediate value stands for: bit 31
// set, the stream id in bits 19-30, the payload length in bits 0-18.  The
// receiver makes up the header itself (Record::hdr), the sequence being where
// the stream's previous data record ended (RC delivers in order).  So a
// 4 KiB message is 4 KiB on the wire (four 1 KiB packets on rxe, one at a
// 4096-byte MTU) rather than 4 KiB and a header (five; two).  A regular
// record's immediate is its ring bytes, below 2^31.  Stream ids are 32-bit
// (never reused on a channel, stream/mux.h): the immediate carries the low
// 12 bits (the id's "bare slot"), and the receiver takes the whole id from
// the last data record in that slot, which the sender made sure was this
// stream's (otherwise it sends a regular record).
constexpr uint32_t kBareFlag = 1u << 31;
constexpr uint32_t kBareLenBits = 19;
constexpr uint32_t kBareStreams = 1u << 12; // bare slots
inline uint32_t bare_slot(uint32_t stream) {
  return stream & (kBareStreams - 1);
}
inline uint32_t bare_imm(uint32_t stream, uint32_t len) {
  return kBareFlag | (bare_slot(stream) << kBareLenBits) | len;
}

// A record as received.  hdr is poll()'s private copy of the header, the
// one it validated: the ring is peer-writable (any RDMA WRITE may change it
// at any time), so nothing reads a header or a length from it again
// (docs/protocol.md §4).  payload points into the ring, at the record's
// slot, and stays valid until release() gives the record back; at most
// hdr.len bytes of it are read, all inside the slot.
struct Record {
  RecordHeader hdr;
  const uint8_t* payload;
  uint32_t slot; // pass to release()
};

struct ChannelCounters {
  uint64_t records_sent = 0, records_received = 0;
  uint64_t credit_records_sent = 0, credit_stalls = 0, protocol_errors = 0;
  uint64_t control_deferred = 0; // control records that waited for room
  // Autocorking: records held back, and writes appended to a held one.
  uint64_t corked_records = 0, cork_appends = 0;
};

class RecordChannel {
public:
  explicit RecordChannel(verbs::Link* link, uint32_t signal_every = 16);

  // Largest payload one record can carry.
  size_t max_payload() const { return max_payload_; }
  // Send one data record; no_resource when credit (or send queue) is short:
  // poll and retry later.  Never blocks.  hold: the caller allows it to be
  // held (autocorking, below).
  Status send(uint32_t stream, uint64_t seq, const void* payload, size_t len, bool hold = false);
  // Zero-copy data record (docs/protocol.md §4): the header is staged, the
  // payload gathered from [payload, payload+len), registered under lkey with
  // the link's protection domain.  The staging mirror holds no copy of the
  // payload: the caller keeps the buffer unchanged until completed() reaches
  // *wr_id, and must then fill_uncredited() whatever recovery may still need
  // before it lets the buffer go.  unsupported when the link cannot gather.
  Status send_zero_copy(uint32_t stream, uint64_t seq, const void* payload, size_t len,
                        uint32_t lkey, uint64_t* wr_id);
  bool zero_copy_capable() const { return link_->max_send_sge() >= 2; }
  // Work requests up to this id are no longer processed by the NIC
  // (completed, or flushed after a failure).
  uint64_t completed() const { return completed_; }
  // After a failure: move the link into the error state (once) and take its
  // completions until completed() >= wr_id (the QP flushes every outstanding
  // request).  Non-blocking; true when reached.
  bool drain_failed(uint64_t wr_id);
  // Send a control record (any type but data and credit) with an optional
  // payload of at most kMaxControlPayload bytes.  Control records may use
  // the reserved credit, so they go out even when data filled the ring.
  // One that finds no room even so (the reserve taken by other control
  // records, or the send queue full) waits in a backlog, in order, and
  // leaves before any later record but a credit one (poll() sends it):
  // ok means sent or queued.  A control record is never dropped and never
  // overtaken (an ATTACH_ACK dropped under load let its PROOF arrive
  // first, and the upgrade failed).  no_resource only when the backlog
  // (kDeferredMax records) is full.
  Status send_control(RecordType type, uint32_t stream, uint64_t seq, const void* payload = nullptr,
                      size_t len = 0);
  static constexpr uint32_t kDeferredMax = 64;
  // Control records waiting in the backlog.
  uint32_t deferred() const { return static_cast<uint32_t>(deferred_tail_ - deferred_head_); }
  // Process completions: data and stream control records are appended to
  // out (up to max); credit records are applied here.  io_error when the link failed,
  // invalid on a protocol error from the peer (the channel is unusable).
  Status poll(Record* out, int max, int* got);
  // The caller is done with a received record (any order).  Ring space is
  // credited back in ring order: a record released early waits for the
  // older ones, so the sender never overwrites unreleased bytes.
  Status release(uint32_t slot);
  // Whether a data record of len payload bytes would be accepted now.
  bool can_send(size_t len) const;

  // ---- Autocorking (record_channel_cork.cc, docs/protocol.md §4).  With
  // set_cork(max) > 0, a data record sent with hold is staged but not
  // posted: later bytes of the same stream, in sequence, extend it up to
  // max payload bytes.  It is posted when it is full, before any other
  // record (ring order is stream order), when a send without hold
  // continues it, or by flush_cork().  When to hold and when to flush is
  // the stream layer's choice (stream/mux.cc, Stream::may_hold).
  void set_cork(size_t max_payload_bytes);
  bool corked() const { return cork_.open; }
  uint32_t cork_stream() const { return cork_.stream; }
  size_t cork_len() const { return cork_.open ? cork_.len : 0; }
  // Post the held record now; ok when none is held (any more).
  Status flush_cork();

  // ---- The process exits (stream/exit.cc).  From signal_all() on every
  // work request is signaled, so that settled() can tell when the NIC is
  // done with all of them: nothing held, no control record waiting in the
  // backlog, every posted request completed (the peer's NIC has it).
  void signal_all() { signal_every_ = 1; }
  bool settled() const { return !cork_.open && deferred() == 0 && completed_ == posted_; }
  const ChannelCounters& counters() const { return counters_; }
  uint64_t send_credit_available() const { return send_credit_.available(); }

  // ---- Recovery (cold path: record_channel_replay.cc, docs/protocol.md §7).
  // Ring cursor of the next record this end sends (a stream opened now
  // owns only records at or after it), and of the next record it receives.
  uint64_t send_cursor() const { return send_credit_.tail(); }
  uint64_t recv_cursor() const { return recv_cursor_; }
  // Stop using the link: every later post and poll fails.
  void fail() { failed_ = true; }
  bool failed() const { return failed_; }
  // Every record posted and not yet credited back by the peer, oldest
  // first, read from the staging mirror: a region is reused only after the
  // peer's CREDIT covers it, and the peer credits a record only after it
  // copied it out, so every byte the peer has not received is among them.
  // visit gets the record's ring cursor, header and payload; it returns
  // false to stop.  invalid when the staging area does not parse (a bug).
  using Visitor = bool (*)(void* ctx, uint64_t cursor, const RecordHeader& h,
                           const uint8_t* payload);
  Status walk_uncredited(Visitor visit, void* ctx) const;
  // Copy stream bytes [lo, hi) of this stream's uncredited data records
  // (ring cursor >= from_cursor) from src (which holds sequence src_seq at
  // src[0]) into their staged payloads: what a zero-copy record's staging
  // slot lacks, so that a later walk_uncredited() finds real bytes.
  // Returns the bytes copied.
  size_t fill_uncredited(uint32_t stream, uint64_t from_cursor, uint64_t lo, uint64_t hi,
                         uint64_t src_seq, const uint8_t* src);

private:
  Status post(RecordType type, uint32_t stream, uint64_t seq, const void* payload, size_t len,
              bool control, const uint32_t* lkey = nullptr);
  // Reserves credit for a record of len payload bytes at the tail and
  // stages its header; *off is where it starts.  no_resource without room.
  Status stage(RecordType type, uint32_t stream, uint64_t seq, size_t len, bool control,
               size_t* off);
  // Posts the record staged at off (payload in place unless lkey).
  Status post_staged(RecordType type, uint32_t stream, uint64_t seq, const void* payload,
                     size_t len, size_t off, const uint32_t* lkey);
  bool send_queue_full(uint32_t extra) const {
    return posted_ - completed_ + 1 + extra >= sq_depth_;
  }
  // No slot for one more WR now: counted as a stall.
  bool send_queue_stall() {
    if (!send_queue_full(0)) return false;
    ++counters_.credit_stalls;
    return true;
  }
  bool try_extend_cork(uint32_t stream, uint64_t seq, const void* payload, size_t len);
  Status open_cork(uint32_t stream, uint64_t seq, const void* payload, size_t len);
  Status maybe_grant();
  // Posts the backlog, oldest first; ok when it is empty now.
  Status flush_deferred();
  size_t deferred_offset() const;
  size_t seq_offset() const;
  size_t alloc_bytes() const;

  // Received records in ring order, until released.  Sized once at set-up
  // (the ring holds at most ring_size / kRecordAlign records).
  struct Pending {
    uint32_t ring_bytes; // the record plus any bytes skipped before it
    bool released;
  };
  Pending* pending_ = nullptr;
  uint32_t pending_cap_ = 0;
  uint64_t pending_head_ = 0, pending_tail_ = 0;

  // The control backlog (send_control), allocated with pending_.
  struct Deferred {
    uint8_t type;
    uint32_t stream;
    uint64_t seq;
    uint32_t len;
    uint8_t payload[kMaxControlPayload];
  };
  Deferred* deferred_ = nullptr;
  uint64_t deferred_head_ = 0, deferred_tail_ = 0;

  // Bare data records: per bare slot, the stream of the last data record
  // in it and where that record ended, as posted (tx) and as received
  // (rx); next is kNoSeq before the first.  Allocated with pending_.
  static constexpr uint64_t kNoSeq = ~uint64_t{0};
  struct BareTrack {
    uint64_t next;
    uint32_t stream;
    uint32_t unused;
  };
  BareTrack* tx_bare_ = nullptr;
  BareTrack* rx_bare_ = nullptr;

  verbs::Link* link_;
  // Receive work requests consumed by records and not yet given back, and
  // how many may be (the link's spares: see poll()).
  uint32_t repost_owed_ = 0;
  uint32_t repost_spare_;
  Status repost();
  // The link's sizes, fixed at set-up: read on every send and readiness
  // check, without a virtual call each time.
  size_t peer_ring_;
  size_t recv_ring_;
  // Ring positions are cursor % size: a mask when the size is a power of
  // two (the default sizes; a division costs tens of ns under emulation and
  // several run per record), 0 otherwise.
  size_t peer_mask_, recv_mask_;
  uint32_t pending_mask_ = 0;
  size_t max_payload_;
  static size_t wrap(uint64_t cursor, size_t size, size_t mask) {
    return mask ? static_cast<size_t>(cursor & mask) : static_cast<size_t>(cursor % size);
  }
  size_t peer_pos(uint64_t cursor) const { return wrap(cursor, peer_ring_, peer_mask_); }
  size_t recv_pos(uint64_t cursor) const { return wrap(cursor, recv_ring_, recv_mask_); }
  uint32_t pending_slot(uint64_t n) const {
    return static_cast<uint32_t>(wrap(n, pending_cap_, pending_mask_));
  }
  uint32_t sq_depth_;
  uint32_t signal_every_; // 1 after signal_all()
  SendCredit send_credit_;
  RecvCredit recv_credit_;
  uint64_t recv_cursor_ = 0; // ring bytes accounted on arrival (incl. skips)
  uint64_t posted_ = 0;      // WRs posted
  uint64_t completed_ = 0;   // WRs known complete (through signaled ones)
  uint32_t since_signal_ = 0;
  // The record held by autocorking (staged at off, not posted).
  struct Cork {
    bool open = false;
    uint32_t stream = 0;
    uint64_t seq = 0;
    size_t len = 0, off = 0;
  };
  Cork cork_;
  size_t cork_max_ = 0; // 0: autocorking off
  bool failed_ = false;
  bool forced_error_ = false; // drain_failed() moved the link into the error state
  ChannelCounters counters_;

public:
  ~RecordChannel();
  RecordChannel(const RecordChannel&) = delete;
  RecordChannel& operator=(const RecordChannel&) = delete;
};

} // namespace xp::flow
