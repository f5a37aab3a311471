// The narrow interface between the upper layers and one RC connection.
// A Link owns a registered receive ring (the peer writes into it with
// RDMA WRITE_WITH_IMM) and a registered send staging area of the same size
// as the peer's ring, laid out as a mirror of it: bytes staged at offset X
// are written to the peer's ring at offset X.  Upper layers (flow/) decide
// offsets and credits; the Link only posts work and reports completions.
// tests/unit/fake_link.h implements it in memory, verbs/rc_link.cc with
// rdma-core.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace xp::verbs {

struct Completion {
  enum class Kind : uint8_t { send_done, recv_imm, error };
  Kind kind;
  uint32_t imm;   // recv_imm: the immediate the sender attached
  uint64_t wr_id; // send_done: what post_write_imm was given
  int status;     // error: the ibv_wc_status (or an errno for fakes)
};

class Link {
public:
  virtual ~Link() = default;
  virtual uint8_t* send_stage() = 0; // mirror of the peer's ring
  virtual size_t peer_ring_size() const = 0;
  virtual const uint8_t* recv_ring() const = 0;
  virtual size_t recv_ring_size() const = 0;
  virtual uint32_t max_inline() const = 0;
  virtual uint32_t send_queue_depth() const = 0;

  // RDMA WRITE_WITH_IMM of send_stage()[off, off+len) to the peer's ring at
  // the same offset.  Unsignaled posts complete silently; a signaled one
  // reports send_done (and implies all earlier posts completed).  A
  // solicited one raises the peer's completion event even when its queue
  // was armed for solicited completions only (arm(true)).
  virtual Status post_write_imm(size_t off, size_t len, uint32_t imm, bool signaled, bool solicited,
                                uint64_t wr_id) = 0;
  // Zero-copy send (docs/protocol.md §4): the same write (solicited), gathered from two
  // pieces: send_stage()[off, off+hdr_len) (the record header) and
  // [payload, payload+len) under lkey (an application buffer registered with
  // this link's protection domain, mem_domain()), to the peer's ring at off.
  // Always signaled: the caller must learn when the NIC stopped reading the
  // application's buffer.  unsupported when the QP cannot gather
  // (max_send_sge() < 2).
  virtual Status post_write_imm_gather(size_t off, size_t hdr_len, const void* payload, size_t len,
                                       uint32_t lkey, uint32_t imm, uint64_t wr_id) {
    (void)off, (void)hdr_len, (void)payload, (void)len, (void)lkey, (void)imm, (void)wr_id;
    return Status::unsupported;
  }
  virtual uint32_t max_send_sge() const { return 1; }
  // Give back n receive work requests (each WRITE_WITH_IMM consumes one),
  // in as few provider calls as it can.
  virtual Status post_recvs(uint32_t n) = 0;
  // Receive work requests posted beyond one per 64-byte ring slot: how many
  // the layer above may owe back at a time without the queue ever running
  // dry (flow/record_channel.cc, poll).
  virtual uint32_t recv_spare() const { return 0; }
  // Non-blocking; returns how many completions were stored in out.
  virtual int poll(Completion* out, int max) = 0;
  // Sleeping: request a notification, then wait until wait_fd() is readable
  // and call ack_event() before polling again.  solicited_only: only a
  // solicited completion raises it (the peer's records that change a
  // stream's readiness, docs/protocol.md §4); a later arm(false) widens it.
  virtual Status arm(bool solicited_only) = 0;
  virtual int wait_fd() const = 0;
  // Non-blocking: true when an event was taken (the caller then re-arms);
  // false when another thread took it first.
  virtual bool ack_event() = 0;
  // The protection domain's slot for registered memory (alloc/domain.h:
  // lookup_local, reg_cache::get), or alloc::kNoDomain (-1): no zero copy.
  virtual int mem_domain() const { return -1; }
  // The peer's per-stream receive window (a power of two) as it told us at
  // set-up (RcLinkParams::stream_window); 0: not told.  A stream never
  // has more bytes in flight than this.
  virtual size_t peer_stream_window() const { return 0; }
  // Move the connection into the error state, as a failed link would: every
  // outstanding work request completes (flushed).  Used by a zero-copy
  // sender whose channel failed (it must know the NIC no longer reads its
  // buffer before send() returns), and in the test library by
  // XPRESS_FAULT_QP_ERROR_AT (stream/fault.h).
  virtual Status force_error() { return Status::unsupported; }
  // The peer posts its readiness records solicited (its ring descriptor's
  // version is 5 or later): arm(true) may be used.
  virtual bool peer_solicits() const { return true; }
};

} // namespace xp::verbs
