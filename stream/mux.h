// Streams multiplexed over one RecordChannel (docs/protocol.md §4-5): each
// TCP connection that moved to RDMA is a Stream with its own byte sequence
// numbers in both directions, a send window opened by the peer's cumulative
// ACKs (bytes its application consumed), and a receive buffer the size of
// that window, so a stream whose application does not read never blocks
// the others on the channel: their records are copied out at once.
//
// Threading: a Mux and its streams are used under one lock held by the
// caller (the preload layer); nothing here blocks, allocates on the data
// path or makes a system call other than through the Link.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <sys/uio.h>
#include <vector>

#include "common/status.h"
#include "flow/record_channel.h"
#include "flow/send_window.h"
#include "recover/siphash.h"
#include "stream/byte_ring.h"
#include "stream/id_table.h"

namespace xp::stream {

struct MuxParams {
  // XPRESS_STREAMS_PER_CHANNEL: the most streams open at once; the table
  // holding them grows with use (stream/id_table.h).
  uint32_t max_streams = 16384;
  // XPRESS_STREAM_WINDOW_KB: each stream's receive buffer; its send window
  // is the smaller of this and the peer's (Link::peer_stream_window).
  size_t stream_window = 256 * 1024;
  size_t channel_window = 4 * 1024 * 1024; // unacknowledged bytes over the channel
  // XPRESS_AUTOCORK_KB: largest held record (flow::RecordChannel::set_cork).
  // Off unless asked: the engine asks (EngineParams::autocork_max) and
  // posts held records when the process exits (stream/exit.cc); a direct
  // user of Mux must flush or close its streams before it exits.
  size_t cork_max = 0;
};

struct MuxCounters {
  uint64_t unknown_stream_records = 0; // records for streams closed here (dropped)
  uint64_t acks_sent = 0;
  uint64_t window_stalls = 0;
  uint64_t direct_bytes = 0; // data copied from the ring straight into a lent buffer
};

class Mux;

// The key of the receiver's check of bytes it may see twice
// (Stream::rx_digest): SipHash under a key of this process, so that a
// peer cannot make other bytes digest alike.  false: the kernel gave no
// randomness (no check, and such a stream resets as it did before it).
bool digest_key(uint8_t out[recover::kSipKeyBytes]);

class Stream {
public:
  uint32_t id() const { return id_; }

  // Queues up to len bytes for sending (partial writes allowed): *done is
  // how many were taken.  no_resource when nothing could be taken now (the
  // window or channel credit is full: progress() and retry), closed after
  // shutdown_write() or a reset.  call_taken: bytes the same socket call
  // queued before this one (earlier iovec elements or passes): autocorking
  // never holds bytes because of the call's own earlier bytes.  more: the
  // program said more follows (MSG_MORE): the bytes may be held whatever
  // is in flight, until the next write that does not say so (or the
  // engine's bound, kHeldIdleNs).
  Status write(const void* buf, size_t len, size_t* done, size_t call_taken = 0, bool more = false);
  // Zero copy (docs/protocol.md §4): like write(), but the records' payloads
  // are read by the NIC straight from buf, registered under lkey with the
  // link's protection domain.  The caller must keep buf unchanged until the
  // channel's completed() reaches zero_copy_wr(), then call
  // zero_copy_release() (both under the channel lock) before it lets buf
  // go.  Until then recovery takes the bytes from buf itself
  // (zero_copy_overlay).  unsupported (nothing taken: copy instead) when the
  // link cannot gather or another zero-copy write of this stream is pending
  // for a different buffer.
  Status write_zero_copy(const void* buf, size_t len, uint32_t lkey, size_t* done);
  bool zero_copy_pending() const { return zc_active_; }
  uint64_t zero_copy_wr() const { return zc_last_wr_; }
  // The buffer is about to be released: its bytes the peer has neither
  // acknowledged nor credited are copied into their staged records (what
  // recovery re-sends from).  Returns the bytes copied.
  size_t zero_copy_release();
  // Recovery: bytes [lo, hi) of a pending zero-copy write, copied from the
  // application's buffer into dst (dst[0] is sequence lo).
  void zero_copy_overlay(uint64_t lo, uint64_t hi, uint8_t* dst) const;
  // Reads up to len bytes.  would_block when nothing is buffered and the
  // peer has not finished; ok with *got == 0 at end of stream; closed after
  // a reset (the caller reports ECONNRESET).
  Status read(void* buf, size_t len, size_t* got, bool peek);
  // Direct receive: a reader that found nothing buffered lends its buffer
  // (v[0..n), valid until take_lent) while it polls the channel; data
  // records of this stream that arrive meanwhile are copied from the ring
  // straight into it, in order, instead of into the receive buffer and
  // from there into the reader's (one copy of each byte instead of two).
  // Only while the receive buffer is empty, so no byte overtakes another;
  // what does not fit goes to the receive buffer as before.  take_lent
  // ends the loan and returns the bytes placed, consumed as by read().
  void lend(const iovec* v, int n);
  size_t take_lent();
  // Half-close: the peer reads end of stream after the bytes sent so far.
  Status shutdown_write();

  // A stream is opened when the channel binds, before either direction's
  // switch offset S is known; each is set once, when that direction
  // switches (docs/protocol.md §3).  invalid if bytes already flowed in that
  // direction or the offset was set before.
  Status set_tx_start(uint64_t s);
  Status set_rx_start(uint64_t s);

  size_t readable_bytes() const { return rx_.size(); } // FIONREAD
  bool readable() const { return rx_.size() > 0 || fin_received_ || reset_; }
  bool writable() const;
  bool peer_finished() const { return fin_received_; }
  bool write_shut() const { return fin_sent_; }
  uint64_t received() const { return rx_next_; } // sequence after the last byte received
  // Abort: tell the peer (RST) and fail local calls.
  void reset();
  bool was_reset() const { return reset_; }
  // What the kernel's close() does to a connection: a reset when unread
  // bytes are left, else the end of stream after the bytes sent.  For
  // close (engine::on_close) and exit (stream/exit.cc).
  void end_as_close();

  // Sequence state (recovery resumes from these).
  uint64_t send_next() const { return window_.next(); }
  uint64_t send_acked() const { return window_.acked(); }
  uint64_t delivered() const { return delivered_; }
  // Recovery (docs/protocol.md §7): the peer acknowledged something on this
  // stream, so it verified our SWITCH (it knows where our TCP bytes end);
  // the ring cursor of this stream's first record (older records with its
  // id belong to an earlier stream).
  bool peer_knows_tx_start() const { return peer_rx_started_; }
  uint64_t open_cursor() const { return open_cursor_; }
  // Our receiving direction's SWITCH verified: acknowledge at once (the
  // sender learns we know its S; see peer_knows_tx_start()).
  void ack_switch();
  // The peer's SWITCH arrived (set_rx_start ran): its direction is on RDMA.
  bool rx_started() const { return rx_start_set_; }
  // Our bytes from S until the peer acknowledged our SWITCH (its first ACK).
  // A peer that gives the upgrade up before it processed our SWITCH drops
  // them and reads our direction as plain TCP from S (ATTACH_NAK "reads
  // plain", docs/protocol.md §3); its credit for them may come before we
  // handle its NAK, so the staging ring cannot be trusted to hold them, and
  // this copy lets the stream alone continue on TCP.  true: *p, *n are all
  // of [S, send_next()).
  bool early_bytes(const uint8_t** p, size_t* n) const;

  // Moving the stream to its TCP connection over a working channel
  // (stream/move.cc): after our MOVE no data, FIN or RST of ours may
  // follow it, so writes take nothing (no_resource) until the stream is
  // gone; the peer's MOVE is kept here when it arrives.
  struct PeerMove {
    bool seen = false;
    uint8_t flags = 0;
    uint64_t end = 0, start = 0, received = 0;
  };
  void freeze_tx() { frozen_ = true; }
  // The peer's ATTACH_NAK "reads plain" for this stream was polled: the
  // peer dropped it right after that NAK (docs/protocol.md §3), so any
  // record with its id that follows is the peer's answer to our bytes for a
  // stream it no longer holds (RST), never this stream's: ignored.  The
  // same once our handshake timer fired: our NAK "reads plain" follows, and
  // the peer's SWITCH, if it comes, must not start the receive side.
  void peer_dropped() { peer_dropped_ = true; }
  // Until the peer's first ACK it may, after a channel failure, go on
  // unframed from its S on TCP (it never verified our SWITCH nor had our
  // ACK of its own, docs/protocol.md §7): a receiver that expected its
  // frames then checks that those bytes are the ones it had over RDMA.
  // true: *h is the tag of [S, received()) (digest_key()).  Kept for at
  // most kRxDigestMax bytes.
  bool rx_digest(uint64_t* h) const {
    *h = rx_digest_.tag();
    return rx_digest_on_;
  }
  static constexpr uint64_t kRxDigestMax = 4u << 20;
  // Whose stream this is (the engine's connection), for the channel's
  // lookups by stream id.
  void* owner = nullptr;
  bool frozen() const { return frozen_; }
  // Marked by the engine (Mux::set_marked): counted by its Mux while open.
  bool marked() const { return marked_; }
  PeerMove peer_move;

private:
  // The next record of at most want bytes the channel's credit and the
  // window allow: its length (0: none now) and first sequence.
  size_t reserve_record(size_t want, uint64_t* seq);
  // Autocorking: whether this stream's newest bytes (`fresh`, already
  // reserved in the window) may wait in a held record.  Only while the
  // bytes it has in flight, posted and not acknowledged, reach the peer's
  // acknowledgement step (a quarter of the window, maybe_ack): the peer
  // has those to read, and reading them sends the ACK whose arrival
  // (Mux::progress) posts the held record.  Stream::write also requires
  // that much from earlier socket calls: a request/response stream never
  // has it (the peer's ACK comes before its answer), so its writes are
  // never held, however large; nor are the bytes that fill the window (no
  // later write could join them).
  bool may_hold(size_t fresh) const;

  friend class Mux;
  Stream(Mux* mux, uint32_t id, uint64_t tx_start, uint64_t rx_start, size_t window,
         size_t tx_window, flow::WindowBudget* channel_budget);
  Status on_record(const flow::RecordHeader& h, const uint8_t* payload);
  Status maybe_ack();

  Mux* mux_;
  uint32_t id_;
  flow::SendWindow window_;
  ByteRing rx_;
  size_t window_size_;  // our receive buffer: the most the peer may have in flight
  size_t tx_window_;    // the most we may have in flight: min(ours, the peer's)
  uint64_t rx_next_;    // next sequence expected from the peer
  uint64_t delivered_;  // consumed by the application
  uint64_t acked_sent_; // last cumulative ack sent
  bool fin_sent_ = false, fin_received_ = false, reset_ = false, ack_pending_ = false;
  bool tx_start_set_ = false, rx_start_set_ = false;
  uint64_t open_cursor_ = 0;
  bool peer_rx_started_ = false;
  // The pending zero-copy write: sequences [zc_lo_, zc_hi_) are in records
  // whose payload is only in the application's buffer (zc_src_ holds zc_lo_).
  bool zc_active_ = false;
  uint64_t zc_lo_ = 0, zc_hi_ = 0, zc_last_wr_ = 0;
  const uint8_t* zc_src_ = nullptr;
  bool frozen_ = false;
  bool peer_dropped_ = false;
  bool rx_digest_on_ = false;
  recover::SipStream rx_digest_;
  uint64_t rx_digest_len_ = 0;
  bool marked_ = false;
  // early_bytes(): kept from set_tx_start until the peer's first ACK.
  bool early_keep_ = false;
  uint64_t early_start_ = 0;
  std::vector<uint8_t> early_;
  void keep_early(const uint8_t* p, size_t n);
  bool more_ = false; // the last write said MSG_MORE: Mux::progress keeps its record held
  // The lent buffer (lend): element lent_i_ is filled up to lent_off_.
  const iovec* lent_ = nullptr;
  int lent_n_ = 0, lent_i_ = 0;
  size_t lent_off_ = 0, lent_got_ = 0;
  size_t fill_lent(const uint8_t* p, size_t n);
};

class Mux {
public:
  Mux(verbs::Link* link, const MuxParams& p);
  ~Mux();
  Mux(const Mux&) = delete;
  Mux& operator=(const Mux&) = delete;

  // Both ends open the same id (the attach handshake assigns it) with the
  // switch offsets of each direction.  null: the id in use, max_streams
  // open already, or no memory for the receive buffer or the table.
  Stream* open(uint32_t id, uint64_t tx_start, uint64_t rx_start);
  // The channel's client proposes stream ids (docs/protocol.md §4 "Stream
  // ids"): 0 is the first stream's (named in the rdma_cm request), then 1,
  // 2, ... and never one that was opened here before, so a record the peer
  // sent for an earlier stream can never be taken for a later one (the
  // peer may still hold a stream this end closed, and its records cross our
  // ATTACH).  False when max_streams are open or the ids ran out (then a
  // new channel serves).
  bool fresh_id(uint32_t* id) const;
  static constexpr uint32_t kMaxStreamId = 0x7fffffffu;
  // Forget a stream (after close()); later records for it are dropped.
  void close(Stream* s);
  // Forget a stream that moved to TCP: no FIN (the stream goes on there).
  void forget(Stream* s);
  // Poll the channel and dispatch records.  io_error / invalid: the channel
  // is unusable and its streams must be recovered (docs/protocol.md).
  Status progress();
  flow::RecordChannel& channel() { return channel_; }
  // Upgrade control records (attach, attach_ack, attach_nak, switch_,
  // keepalive) go to this handler (recover/); without one they are protocol
  // errors.  A non-ok return marks the channel failed.
  using ControlHandler = Status (*)(void* ctx, const flow::RecordHeader& h, const uint8_t* payload);
  void set_control_handler(ControlHandler fn, void* ctx) {
    control_ = fn;
    control_ctx_ = ctx;
  }
  Stream* find(uint32_t id) const { return streams_.find(id); }
  size_t stream_count() const { return streams_.size(); }
  // A mark the owner sets on its streams and the count of the open ones
  // that carry it (the engine marks a server stream that waits for its
  // client's first proof: docs/protocol.md §8).  A stream's mark leaves
  // the count with it (close, forget, the Mux's end), so the count needs
  // no bookkeeping on the owner's many ways out.  marked_count() may be
  // read without the caller's lock.
  void set_marked(Stream* s, bool on);
  uint32_t marked_count() const { return marked_.load(std::memory_order_relaxed); }
  // Recovery: stop using the channel (no record is processed or sent any
  // more; the streams' state is frozen for the resume).
  void fail() {
    failed_ = true;
    channel_.fail();
  }
  bool failed() const { return failed_; }
  const MuxCounters& counters() const { return counters_; }

private:
  friend class Stream;
  flow::RecordChannel channel_;
  verbs::Link* link_; // for the test-only fault injection (stream/fault.h)
  MuxParams params_;
  flow::WindowBudget budget_;
  IdTable<Stream> streams_;
  std::atomic<uint32_t> marked_{0};
  uint32_t fresh_from_ = 1; // above every id opened here (0: the first stream's)
  MuxCounters counters_;
  bool failed_ = false;
  bool acks_pending_ = false; // some stream owes an ack that found no credit
  ControlHandler control_ = nullptr;
  void* control_ctx_ = nullptr;
};

} // namespace xp::stream
