// One RC connection between two processes, carrying many streams
// (docs/protocol.md §4): the link, the mux over it, and which connection
// each stream id belongs to.  Control records for the upgrade are not
// handled under the channel lock: the mux's handler queues them in the
// inbox, and whoever ran progress() drains it after unlocking (see
// engine_control.cc), because handling them takes Conn::mu, which orders
// before Channel::mu.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/ptr_table.h"
#include "flow/record_channel.h"
#include "recover/upgrade_wire.h"
#include "stream/conn.h"
#include "stream/mux.h"
#include "verbs/link.h"

namespace xp::stream {

class Conn;

struct ControlRecord {
  flow::RecordHeader h;
  uint8_t payload[flow::kMaxControlPayload];
};

struct Channel {
  std::mutex mu;
  verbs::Link* link = nullptr;
  std::unique_ptr<Mux> mux; // freed with the channel
  bool client_side = false;
  // Client side: the server's address and TCP port (the key).  Server side:
  // the rdma_cm requester's address; every stream bound here must name it
  // as its TCP client address (docs/protocol.md §2).  Unknown (never set)
  // matches no connection.
  recover::IpAddr peer_addr;
  uint16_t peer_port = 0;
  // Client side: the address it connected from (the requester the server
  // recorded; attach_at_port matches it).  Unknown: set by neither path.
  recover::IpAddr local_addr;
  // The rdma_cm port this channel was set up on (client: the port it
  // reached, after any redirect; server: its listener's): a redirect to a
  // port attaches over a channel to it (attach_at_port).
  uint16_t cm_port = 0;
  // What names this channel to both ends (its rdma_cm addresses and ports,
  // the accept's nonce): every binding over it covers it (docs/protocol.md
  // §2), so that a binding relayed from another channel does not hold.
  recover::ChannelBinding binding{};
  // Client side: the lane of the connection it was set up for (Conn::lane,
  // modulo XPRESS_CHANNELS_PER_PEER).
  uint32_t lane = 0;
  ChannelConns conns; // streams' connections (each holds a ref)
  // Stream id -> connection: the mux's table (hash-indexed), each stream
  // naming its connection (Stream::owner).
  Conn* conn_of(uint32_t id) const {
    Stream* s = mux->find(id);
    return s ? static_cast<Conn*>(s->owner) : nullptr;
  }
  std::atomic<bool> failed{false};
  std::atomic<bool> inbox_pending{false};
  std::vector<ControlRecord> inbox; // guarded by mu
  // One thread at a time hands the inbox's records out (drain_inbox), so a
  // stream's records are handled in the order they arrived.
  std::mutex drain_mu;
  // Completion events (stream/channel_events.cc): whether the completion
  // queue is armed, how many threads busy-poll the channel right now, and
  // when the last one stopped.
  std::atomic<bool> armed{true};
  // The arm in place may be for solicited completions only (a sleeper's,
  // stream/channel_sleep.h): whoever needs every completion widens it.
  std::atomic<bool> armed_solicited{false};
  std::atomic<int> spinners{0};
  std::atomic<uint64_t> last_spin_ns{0};
  // When a send() last left the channel (it polls an unarmed channel
  // itself, so a sending thread keeps it unarmed: channel_events.cc).
  std::atomic<uint64_t> last_send_ns{0};
  // Polls of the channel so far (progress_locked), and their count when the
  // last send() left it: a send polls an unarmed channel only if nobody
  // polled it since the previous send (a request/response loop's receive
  // just did).  Both guarded by mu.
  uint64_t polls = 0;
  uint64_t polls_at_send = ~uint64_t{0};
  // Blocked calls sleeping on their eventfd only, leaving the channel to
  // whoever polls it (conn_io.cc): the engine re-arms the channel for them
  // once nobody does any more (channel_events.cc, arm_idle_channels).
  std::atomic<int> left_sleepers{0};
  // The engine took an event but found the channel's lock taken (a sender
  // at work): it owes a poll, which whoever gets the lock first pays
  // (channel_events.cc).
  std::atomic<uint8_t> poll_owed{0};
  // Threads sleeping in the kernel on the completion fd themselves (a
  // blocked call): while there are any, the engine's epoll does not watch
  // it, so an event wakes one thread, not two (stream/channel_events.cc).
  std::mutex sleep_mu;
  int sleepers = 0;            // guarded by sleep_mu
  uint64_t idle_since_ms = 0;  // client side: no streams since then (torn down when idle)
  uint64_t dying_since_ms = 0; // unlinked; freed after a grace period
  bool fail_logged = false;
  // Recovery (stream/resume.h): why the channel failed (ResumeCause, set
  // once), and the keepalive (engine_control.cc): when we last sent one,
  // and when the receive cursor last moved.
  std::atomic<uint8_t> fail_cause{0};
  uint64_t ka_sent_ms = 0, ka_heard_ms = 0, ka_cursor = 0;
  bool ka_asked = false;      // mu: a KEEPALIVE asking for an answer came since the last one
  uint64_t ka_checked_ms = 0; // the engine thread's alone: no lock
  // Stall report (debug log, engine_control.cc): a digest of the streams'
  // counters, since when it has not changed, and whether that was logged.
  uint64_t stall_sig = 0, stall_since_ms = 0;
  bool stall_logged = false;
  // send() calls with zero-copy records on this channel not finished yet:
  // the channel (and its link, whose completions they wait for) is not
  // freed before they are done, even after it failed.
  std::atomic<int> zc_users{0};
  // Sleepers in poll, select or epoll_wait that hold the channel to wait on
  // its completion fd (stream/channel_sleep.h): not freed before they let go.
  std::atomic<int> sleep_refs{0};
  // A send() left a record held here (autocorking); the engine posts it
  // once no send() took bytes for a while (channel_events.cc,
  // post_idle_held): a writer retrying on EAGAIN does not count.
  std::atomic<bool> held{false};
  std::atomic<uint64_t> last_write_ns{0};
  TableHook in_table{}; // in ChannelTable's live or dying list (stream/channel_table.h)
};

} // namespace xp::stream
