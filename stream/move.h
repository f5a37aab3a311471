// Moving a stream from a working channel to its TCP connection (docs/protocol.md
// §7, "Moving a stream"): both ends exchange MOVE records over the channel,
// each after the last record of the stream it sends, so each knows exactly
// where the other's bytes over RDMA end; every switched direction then
// continues on TCP from there: one RESUME frame flagged "moved" (which
// tells the peer this from the failure path's frames), then raw bytes.  No
// byte needs re-sending and the channel's other streams go on.  Used when a process forks (a fork
// child cannot use the parent's queue pairs, and parent and child share the kernel socket):
// afterwards whichever process uses the socket has a working stream.
#pragma once
#include <cstdint>

#include "flow/record_channel.h"
#include "recover/move_wire.h"
#include "stream/resume.h"

namespace xp::stream {

class Conn;
struct Channel;
namespace engine {
struct Changes;
}

namespace move {

// The payload's layout: recover/move_wire.h.
constexpr uint32_t kPayloadBytes = recover::kMoveBytes;
constexpr uint8_t kTxSwitched = recover::kMoveTxSwitched; // start, end valid
constexpr uint8_t kGone = recover::kMoveGone; // the sender holds no such stream: no reply

// on_control_record (ch->mu held): check a MOVE record and keep it in the
// stream; a MOVE for a stream closed here is answered at once (kGone).
// 1: queue it for on_peer_move; 0: handled; -1: malformed (a protocol
// error of the channel).
int on_record(Channel* ch, const flow::RecordHeader& h, const uint8_t* payload);
// handle_record (c->mu held): the peer moves c's stream: answer and move
// (or, when the stream is not in a state to move, fail the channel).
void on_peer_move(Conn* c, Channel* ch);

// The steps of a move, c->mu held throughout (for_fork; tests):
// c has a direction on RDMA (or the peer's SWITCH arrived).
bool candidate(Conn* c);
// Send our MOVE when the stream is settled (false: not possible now).
bool begin(Conn* c);
// Poll for the peer's MOVE and move: 1 moved (or nothing to move), 0 still
// waiting, -1 not possible (the caller fails the channel over).
int complete(Conn* c, ResumeCause why, uint64_t t0_us, engine::Changes* changed);

// One connection's stream to TCP, as for_fork does for all (stream/pin.cc:
// the program turns on a kernel feature that must see the bytes).  No lock
// held; c referenced.  true: moved (or nothing on RDMA to move); false: it
// could not move cleanly and the channel failed over (its frames follow).
bool for_conn(Conn* c, ResumeCause why);

// engine::before_fork: move every stream on RDMA to TCP; blocks until the
// peers answered (bounded, see kSettleMs/kAnswerMs in move.cc).  No lock held.
void for_fork();

} // namespace move
} // namespace xp::stream
