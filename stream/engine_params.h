// Tunables of the engine, each set by its setting in common/settings.def
// (environment or configuration file; README lists them).  The defaults
// here equal the table's (a unit test checks).  Plain data so stream/ needs
// no preload header.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/bulk_copy.h"

namespace xp::stream {

struct EngineParams {
  uint32_t handshake_timeout_ms = 2000; // XPRESS_HANDSHAKE_TIMEOUT_MS
  uint32_t program_wait_ms = 60000;     // XPRESS_PROGRAM_WAIT_MS (recover/upgrade.h tick)
  // XPRESS_SPIN_US: how long a blocked call busy-polls before it sleeps,
  // while its connection's recent waits average within it; waits longer
  // than this spin kMinSpinUs (engine::spin_budget_ns).
  uint32_t spin_us = 1000;
  bool sleep_on_channel = false;        // XPRESS_SLEEP_ON_CHANNEL (stream/channel_sleep.h)
  bool solicited_events = false;        // XPRESS_SOLICITED_EVENTS (stream/channel_events.cc)
  bool spin_share = false;              // XPRESS_SPIN_SHARE (stream/spin_gate.h)
  uint32_t streams_per_channel = 16384; // XPRESS_STREAMS_PER_CHANNEL
  uint32_t channels_per_peer = 4;       // XPRESS_CHANNELS_PER_PEER
  // XPRESS_SERVER_CHANNELS / XPRESS_SERVER_CHANNELS_PER_PEER: server
  // channels (accepted or being accepted) in this process, and from one
  // requester address.  Each pins a receive ring and a staging mirror (up
  // to 1.5 MiB at the default ring), so the process-wide cap bounds what
  // peers can pin (256: at most ~384 MiB); a client process opens up to
  // XPRESS_CHANNELS_PER_PEER (4) channels to a server, so 32 per address
  // lets 8 client processes per host run at the default.  Beyond them a
  // request is rejected busy and the connection stays on TCP.
  uint32_t server_channels = 256;
  uint32_t server_channels_per_peer = 32;
  // XPRESS_SERVER_UNPROVEN_PER_PEER: server streams from one requester
  // address bound and waiting, untimed, for their client's first proof
  // (its program's pace decides when it comes: docs/protocol.md §2, §8);
  // beyond it a new connection from that address stays on TCP.
  uint32_t server_unproven_per_peer = 16384;
  size_t ring_bytes = 512u << 10;     // XPRESS_RING_KB: each channel's receive ring
  size_t stream_window = 256u << 10;  // XPRESS_STREAM_WINDOW_KB
  uint32_t negative_cache_ms = 10000; // XPRESS_NEGATIVE_CACHE_MS
  uint32_t hangup_grace_ms = 1000;    // a TCP hang-up without an RDMA FIN: reset after this
  // XPRESS_KEEPALIVE_MS: a channel with streams on which nothing arrived for
  // this long is failed (its streams resume on TCP); each end sends a
  // KEEPALIVE every third of it.  0: no keepalive.
  uint32_t keepalive_ms = 3000;
  // XPRESS_FAULT_QP_ERROR_AT (test only): force the queue pair into the
  // error state once this process sent that many stream bytes; 0: off.
  uint64_t fault_qp_error_at = 0;
  // XPRESS_ZEROCOPY / XPRESS_ZEROCOPY_MIN_KB: blocking sends of at least
  // this many bytes from registered memory go out without a copy.
  // XPRESS_REUPGRADE_MS / XPRESS_REUPGRADE_MAX_MS: a stream that resumed on
  // TCP tries to go back onto RDMA after this long, the delay doubling per
  // failed attempt up to the maximum (stream/reattach.cc).  0: never.
  uint32_t reupgrade_ms = 1000;
  uint32_t reupgrade_max_ms = 60000;
  // XPRESS_AUTOCORK_KB: a bulk stream's small writes (a quarter window of
  // earlier bytes in flight, Stream::may_hold) or MSG_MORE ones are
  // gathered into one record of up to this many bytes (0: every write is
  // its own record; flow/record_channel_cork.cc).  A record still held
  // when the process exits without closing the socket (exit, _exit, _Exit)
  // is posted by the exit path (stream/exit.cc, before_exit).
  size_t autocork_max = 64u << 10;
  bool zerocopy = true;
  size_t zerocopy_min = 256u << 10;
  // XPRESS_COPY: the routine of large payload copies, chosen when the engine
  // starts (common/bulk_copy.h).
  CopyMode copy = CopyMode::automatic;
};

} // namespace xp::stream
