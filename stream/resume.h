// Recovery: a stream whose channel failed continues on its own TCP
// connection from the last byte its receiver holds, losing and duplicating
// nothing (docs/protocol.md §7).  Cold path: resume.cc moves a stream off
// its failed channel; resume_io.cc serves the data calls afterwards (TCP
// frames, stream/conn_io.cc hands resumed connections over).
//
// Locks: everything here runs under Conn::mu (start() also takes the
// channel's lock, in the usual order).
#pragma once
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>

#include "common/io_result.h"
#include "recover/resume_wire.h"
#include "recover/siphash.h"
#include "stream/byte_ring.h"

namespace xp::stream {

class Conn;
struct Channel;

// Why a channel failed (statistics and logs; names are stable).
enum class ResumeCause : uint8_t {
  none = 0,
  completion_error,  // a work completion failed (QP error, retries exhausted, flush)
  disconnected,      // rdma_cm: the peer disconnected or the device went away
  keepalive_timeout, // nothing heard on the channel for XPRESS_KEEPALIVE_MS
  peer_resumed,      // the peer resumed on TCP first (its side of the channel failed)
  protocol_error,    // the peer broke the channel protocol
  local,             // this end gave up on one of the channel's streams
  fork,              // this process forked: the stream moved to TCP (stream/move.cc)
  peer_moved,        // the peer moved the stream to TCP (it forked, or a kernel feature)
  kernel_feature, // this end moved it to TCP: the program turned a kernel feature on (stream/pin.h)
  count
};
const char* resume_cause_name(ResumeCause c);

// Reported once per resumed stream, when it is carried by TCP again (ok)
// or when it could not be (the stream was reset instead).
struct ResumeEvent {
  ResumeCause cause;
  bool ok;
  uint64_t resent_bytes; // bytes this end sent again
  uint64_t recover_us;   // from the failure to the stream flowing on TCP
};
using ResumeHook = void (*)(const ResumeEvent& e);
void set_resume_hook(ResumeHook h);

// The state of a resumed connection (Conn::rs), under Conn::mu.
struct Resume {
  Resume(size_t window);
  bool ok() const { return out.ok() && pre.ok() && buf.ok(); }

  // ---- sending
  enum class Tx : uint8_t {
    raw,    // our direction never switched: plain TCP bytes, as before
    wait,   // switched, but the peer may not know our S: its RESUME decides
    framed, // frames (RESUME, then DATA) after S
    shut,   // we had shut our direction (FIN) before the failure
    dead,   // given up
    back,   // SWITCHBACK queued at S': bytes from S' go to the stream (stream/reattach.cc)
  };
  Tx tx = Tx::raw;
  ByteRing out;              // bytes for the kernel, framed as tx says
  uint8_t* resend = nullptr; // wait: the stream bytes [resend_seq, tx_next)
  size_t resend_cap = 0;
  uint64_t resend_seq = 0;
  uint64_t tx_start = 0;     // our S
  uint64_t tx_next = 0;      // sequence of the next application byte
  bool app_shut = false;     // the program called shutdown(SHUT_WR)
  bool shut_pending = false; // ... and the kernel's shutdown waits for `out` to drain
  bool tx_eof = false;       // the kernel refused (EPIPE): the peer is gone

  // ---- receiving: raw TCP bytes below the peer's S, then the stream
  // bytes that came over RDMA, then (rx_framed) frames' data.
  bool rx_framed = false;
  uint64_t raw_left = 0; // raw bytes below S still in the kernel
  ByteRing pre;          // raw bytes below S read ahead
  ByteRing buf;          // bytes from rx_next - size() on
  uint64_t rx_next = 0;  // sequence after buf's last byte
  uint8_t hdr[recover::kFrameHeaderBytes] = {};
  uint8_t hdr_have = 0;
  recover::FrameHeader frame; // the frame being read (len left to read)
  uint8_t rpay[recover::kResumePayloadBytes] = {};
  uint8_t rpay_have = 0;
  bool in_frame = false;
  bool peer_resumed = false; // the peer's RESUME arrived
  bool fin = false;          // the peer's FIN came over RDMA: end after buf
  bool eof = false;          // TCP end of stream
  bool broken = false;       // reset: the error once, then end of stream
  bool err_reported = false;

  // ---- moved over a working channel (stream/move.cc): each switched
  // direction's TCP bytes after S are one RESUME frame with the *moved*
  // flag (from = where RDMA ended), then raw bytes, so once the buffers
  // here are empty and the peer's frame was read the kernel serves the
  // socket again (Phase::tcp).  A plain RESUME instead says the peer took
  // the failure path: frames follow, as for any resumed stream.  Only the
  // program's data calls read a moved stream's socket (never the engine:
  // a fork child may be the one using it).
  bool moved = false;
  bool rx_cont = false; // the peer's direction had switched: pre, buf, then its frame
  bool rx_raw = false;  // the peer's moved RESUME was read: raw bytes follow
  // A fork turns the stream (resume_fork.cc): reads stop at frame
  // boundaries, never past the peer's RAW (what follows it is the kernel's,
  // for whichever process reads it).
  bool turning = false;
  uint64_t rx_skip = 0; // ... of which this many we hold already
  // The peer went on unframed from its S (resume.cc peer_went_plain): its
  // first check_left raw bytes must digest (Stream::rx_digest) to rx_digest.
  bool rx_digest_ok = false;
  uint64_t rx_digest = 0, check_left = 0;
  recover::SipStream check;
  // At fork a framed stream turns into a moved one (stream/resume_fork.h):
  // the peer's RAW was read and ours waits for room in `out`.
  bool raw_owed = false;

  // ---- back to RDMA (stream/reattach.cc).  The peer's SWITCHBACK ends
  // its frames on TCP: the bytes after it come over the new channel, or,
  // when that failed too (again), in a RESUME and frames that follow it.
  bool rx_back = false;    // the peer's SWITCHBACK was read (at rx_next): TCP is not read on
  uint64_t sb_counter = 0; // ... the attempt it belonged to
  bool again = false;      // an attempt's channel failed after we were bound to it
  uint64_t again_counter = 0;
  uint8_t* ahead = nullptr; // bytes from the peer's S' that came over that channel
  size_t ahead_len = 0, ahead_cap = 0;
  uint64_t ahead_seq = 0, ahead_counter = 0;
  bool ahead_fin = false; // ... and the peer's FIN came after them

  // ---- bookkeeping
  ResumeCause cause = ResumeCause::none;
  uint8_t key[recover::kNonceBytes] = {};
  recover::Dir dir = recover::Dir::c2s; // our sending direction
  uint64_t started_ms = 0, deadline_ms = 0, started_us = 0;
  uint64_t resent = 0;
  bool reported = false;
};

namespace resume {

// Test only: runs when a resuming stream just left its channel (c->mu held).
using DetachHook = void (*)(Conn* c);
void set_detach_hook(DetachHook h);

// c->mu held, c->ch failed (the caller marked it): move c's stream off its
// channel onto TCP.  The channel's lock is taken here.
void start(Conn* c, ResumeCause why);
// c->mu held, c->ch working: the peer gave c's upgrade up before it
// processed our SWITCH and reads our direction as plain TCP from S (its
// ATTACH_NAK said so; docs/protocol.md §3).  The stream alone leaves the
// channel (no record of it follows on either side: the peer dropped it) and
// continues on TCP at S with our bytes sent over RDMA, unframed; the channel
// and its other streams go on.  false: not this case (the peer's direction
// came over RDMA, or our copy of the bytes is not whole): the caller fails
// the channel as before.
bool start_alone(Conn* c, ResumeCause why);
// Free a connection's resume state (Conn::rs).
void release(Resume* r);
// c->mu held: move bytes between the kernel and the buffers, without
// blocking; readiness and sleepers are updated.
void pump(Conn* c);
// Engine tick (c->mu held): deadlines, a drain nobody asked for.
void tick(Conn* c, uint64_t now_ms);
// Readiness of a resumed connection (lock-free, as ReadySource's).
uint32_t ready_events(const Conn* c);
// The program closes the connection: bytes it wrote that still wait in
// user space go to the kernel first (bounded wait), as the kernel's close
// would send them.  No lock held.
void before_close(Conn* c);
// What the TCP bytes after the peer's S start with (docs/protocol.md §7):
// nothing yet, a frame (the peer resumed), or anything else (no byte may
// follow S but a frame: the stream is reset).  rx_rdma must be set (no raw
// byte is left); no lock needed.
enum class AfterS : uint8_t { nothing, frames, garbage };
AfterS tcp_after_s(int fd);
inline bool peer_frames_waiting(int fd) {
  return tcp_after_s(fd) == AfterS::frames;
}

// The data calls of a resumed connection (conn_io.cc hands over); `done`
// bytes of this call were already moved before the connection resumed.
// Status::to_kernel (a moved stream): the kernel takes the call from here,
// *done bytes being moved already (recv: the connection is Phase::tcp
// again; send: its sends go to the kernel).  Status::look_again: a
// direction went back to the stream (stream/reattach.cc) or the stream is
// no longer resumed: the caller starts over, *done bytes moved.
IoResult recv(Conn* c, const iovec* iov, int iovcnt, int flags, size_t* done);
IoResult send(Conn* c, const iovec* iov, int iovcnt, int flags, size_t* done);
IoResult shutdown(Conn* c, int how); // c->mu held
IoResult readable_bytes(Conn* c);    // the count in bytes

} // namespace resume
} // namespace xp::stream
