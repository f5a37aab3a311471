// Back to RDMA (docs/protocol.md §7 "Back to RDMA after a resume"): a
// stream that resumed on its TCP connection after its channel failed goes
// back onto a new channel once RDMA works again.  The client end drives:
// after XPRESS_REUPGRADE_MS (doubling per failed attempt up to
// XPRESS_REUPGRADE_MAX_MS) it binds the stream to a channel to the peer
// process (an existing one, else rdma_cm) with an authenticated REATTACH;
// then each end switches its sending direction in-band: a SWITCHBACK frame
// at S' ends its frames on TCP, a SWITCH {S'} over the channel starts its
// bytes there.  Once both directions are back and the TCP side is drained,
// the connection is an ordinary RDMA stream again (Conn::resumed false);
// should the new channel fail, its frames continue after the SWITCHBACK
// with a RESUME, as after the first failure.  Cold path.
//
// Locks: as resume.h (Conn::mu, then Channel::mu); start() and
// over_channel() run on the engine thread with State::mu held.
#pragma once
#include <cstdint>

#include "stream/channel.h"

namespace xp::stream {

class Conn;
struct Resume;

namespace reattach {

enum St : uint8_t {
  idle = 0,   // on TCP (scheduled when at_ms != 0)
  queued,     // handed to the engine thread (start())
  connecting, // client: an rdma_cm channel for it is being set up
  waiting,    // client: REATTACH sent, no answer yet
  bound,      // on the new channel, switching (or switched) back
};

// Statistics (preload/track.cc): one event per attempt (client), per
// attempt that failed (client), per stream back on RDMA (either end).
struct Event {
  enum Kind : uint8_t { attempt, failed, returned } kind;
  uint64_t tcp_us; // returned: how long the stream was on TCP
};
using Hook = void (*)(const Event& e);
void set_hook(Hook h);

// c->mu held: the stream just resumed on TCP (resume::start): back-off.
void on_resumed(Conn* c);
// c->mu held, c resumed (engine tick): schedule an attempt (client), time
// out one under way, and advance().
void tick(Conn* c, uint64_t now_ms);
// c->mu held, c resumed: switch our direction back, take the peer's,
// finish once both are back (called from resume::pump and the records).
void advance(Conn* c);
// State::mu held (engine thread, start queue): make the attempt.
void start(Conn* c);
// State::mu held: the rdma_cm channel of c's attempt is up (ch null: it
// failed, was refused or redirected nowhere).
void over_channel(Conn* c, Channel* ch);
// State::mu held: a REATTACH arrived on ch (we are the server end).
void on_reattach(Channel* ch, const ControlRecord& rec);
// c->mu held, c resumed: a control record for c's stream on ch.
void on_record(Conn* c, Channel* ch, const ControlRecord& rec);
// c->mu held, c resumed and bound to a channel that failed: the stream
// goes on over TCP again (frames after our SWITCHBACK start with a RESUME).
void fold(Conn* c);
// Under c->mu, from the frame decoder (resume.cc).  on_switchback: the
// peer's SWITCHBACK payload (in r->rpay, header in r->frame) arrived:
// false when it must not be there or does not verify.  after_switchback:
// a SWITCHBACK was read; true when the TCP bytes after it are frames to
// read now (the attempt it belonged to failed: a RESUME follows).
bool on_switchback(Conn* c, Resume* r);
bool after_switchback(Conn* c, Resume* r);
// c->mu held: no other process holds c's socket any more (a fork shared
// it; stream/fork_share.h).  A stream left framed at the fork (its turn to
// raw TCP did not happen: stream/resume_fork.h) may go back: true.
// Streams moved or turned raw at the fork, or pinned to TCP by a kernel
// feature, stay.
bool unshared(Conn* c);

} // namespace reattach
} // namespace xp::stream
