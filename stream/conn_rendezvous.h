// How one connection finds or sets up its channel (docs/protocol.md §1):
// the rendezvous' own state, apart from the upgrade session it serves.
//
// Lock rule, one lock per field:
// - Conn::mu guards every field below but three.  Its writers hold it
//   whoever they are: the engine's rendezvous steps (which hold State::mu
//   first: State::mu, then Conn::mu), control records handled by any
//   thread (handle_record through drain_inbox), the engine's tick.  The
//   fields that only the engine thread writes (cm_tried, parked_once,
//   no_listener_tries, retry_at_ms) may be read by that thread without it.
// - slot_written belongs to the listening socket's table: State::mu
//   (publish, the fork hand-over).
// - lane and share are written once, when the connection registers and
//   before any other thread can reach it; heard_from_peer is atomic.
#pragma once
#include <atomic>
#include <cstdint>

#include "recover/upgrade.h"

namespace xp::stream {

struct ListenShare;

struct ConnRendezvous {
  ListenShare* share = nullptr;             // server: the listener's rendezvous state
  bool cm_tried = false;                    // client: an rdma_cm connection was attempted
  std::atomic<bool> heard_from_peer{false}; // server: a request or ATTACH named us (any thread)
  bool attach_refused = false;              // client: an ATTACH was NAKed; use rdma_cm
  bool parked_once = false; // client: waited for another connection's channel set-up
  // Client: the connecting thread's lane (engine.cc, thread_lane): its
  // streams go to the channel of that lane, so that a thread's answers
  // raise completion events on a queue of its own (stream/channel_sleep.h).
  uint32_t lane = 0;
  bool redirected = false;       // client: followed a redirect already
  bool redirect_attach = false;  // client: its ATTACH followed a redirect (attach_at_port)
  uint8_t no_listener_tries = 0; // client: rdma_cm said nobody listens (yet?); 1: no more retries
  uint64_t retry_at_ms = 0;      // client: try rdma_cm (again) then (stream/negative_cache.h)
  bool slot_written = false;     // server: published in share's table (State::mu)
  // Server, also under Conn::mu: an rdma_cm accept in flight (one per
  // connection), the stream id its request proposed, the client's nonce.
  bool accepting = false;
  uint16_t pending_sid = 0;
  recover::Nonce peer_nonce{};
  recover::Nonce nonce{}; // ours (the session has a copy)
};

} // namespace xp::stream
