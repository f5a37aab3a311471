// A resumed stream at fork (docs/protocol.md §7 "At the fork"): parent and
// child would each number frames from their own copy of its state, so its
// framed TCP directions turn back into plain TCP before the fork and both
// processes share a kernel socket, which the kernel serialises.  Each end
// writes one RAW frame after its last DATA frame (an end that reads the
// peer's RAW before writing its own answers with it); the bytes after a
// RAW are raw, and the stream is then handled as a moved one
// (stream/move.h): once its buffers are read the kernel serves it.
#pragma once

namespace xp::stream {

class Conn;
struct Resume;

namespace resume {

// engine::before_fork, after move::for_fork; no lock held.  Waits for the
// peers' RAW frames up to one bounded round trip (kAnswerMs); a stream
// whose peer does not answer in time stays framed in the parent (its child
// copy is reset when bytes for the kernel were still queued, as any).
void raw_for_fork();
// decode (c->mu held): the peer's RAW frame arrived whole (r->frame,
// r->rpay).  false: it does not verify or fits no state of ours (the
// caller resets the stream).
bool on_peer_raw(Conn* c, Resume* r);
// flush_out (c->mu held): a RAW answer owed while `out` had no room.
void write_owed_raw(Conn* c, Resume* r);

} // namespace resume
} // namespace xp::stream
