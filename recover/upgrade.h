// The upgrade state machine of one TCP connection, from one end's point of
// view (docs/protocol.md §1-3): attach, the binding proofs, and each
// direction's switch at byte S.  Pure logic: control records come in as
// (type, stream, seq, payload) and records to send come out of a small
// outbox; the stream layer wires both to the channel, the preload layer
// feeds the TCP bytes and reads the modes.  No clock, no randomness: the
// caller passes time to tick() and the nonce and key exchange seed (from
// getrandom) at set-up.
//
// Life of a session:
//   client: idle -start_attach-> attaching -ACK-> bound
//                                          -NAK unknown/busy-> refused (may attach again)
//   server: idle -on_attach (valid, our 4-tuple)-> bound
//   both:   idle/refused -adopt (nonces came through rdma_cm)-> bound
//   bound:  the binding is a CPace exchange over the covered bytes
//           (recover/pake.h, docs/protocol.md §2): the client sends SHARE
//           once the bytes that crossed reach one of the protocol's coverage
//           forms; the server, once it has the bytes that form covers,
//           answers SHARE and PROOF (its key confirmation); the client
//           answers PROOF.  A direction switches (try_switch_tx) once the
//           peer's PROOF verified here.
//   any:    -> failed (final; the stream stays on TCP, fallback_reason()).
//
// Not thread-safe: the caller serializes calls (the socket's lock).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/reasons.h"
#include "common/status.h"
#include "recover/pake.h"
#include "recover/upgrade_wire.h"

namespace xp::recover {

enum class Role : uint8_t { client, server };

enum class State : uint8_t { idle, attaching, refused, bound, failed };
const char* state_name(State s);

struct SessionParams {
  Role role = Role::client;
  TcpTuple tuple;                      // this connection, client side first
  Nonce nonce;                         // this end's nonce (getrandom)
  uint8_t seed[pake::kSeedBytes] = {}; // this end's key exchange secret (getrandom)
  uint32_t timeout_ms;                 // XPRESS_HANDSHAKE_TIMEOUT_MS: longest wait for the peer
  // XPRESS_PROGRAM_WAIT_MS: longest wait that a program's pace decides
  // (the server's accept, the server's read of the bytes the client's
  // SHARE covers); 0: timeout_ms.  See tick().
  uint32_t wait_ms = 0;
};

class UpgradeSession {
public:
  explicit UpgradeSession(const SessionParams& p);

  // ---- The TCP path (the preload layer, after each successful send/recv).
  // Bytes actually written to / read from the kernel socket, in order.
  void on_tcp_sent(const void* data, size_t len);
  void on_tcp_received(const void* data, size_t len);

  // ---- Attach (docs/protocol.md §1).
  // Client: the ATTACH to send over an existing channel with the proposed
  // stream id.  From idle or refused; unsupported once failed, else invalid.
  Status start_attach(uint32_t stream_id, Message* out);
  // Server: an ATTACH the stream layer routed here by its 4-tuple (parse_attach).
  // *reply (ACK or NAK) goes back on the channel the ATTACH came from; on ok
  // the session is bound to that channel and stream id.  invalid: refused;
  // from idle, a malformed ATTACH or one naming another 4-tuple also fails
  // the session; otherwise (already bound) the reply is NAK busy and nothing
  // changes, so a third party cannot undo a binding.  closed: the session
  // had failed (reply NAK failed).  Send *reply before anything pop_output() then returns
  // (binding may queue our PROOF, which must follow the ACK).
  Status on_attach(uint32_t stream_id, uint64_t seq, const uint8_t* payload, size_t len,
                   Message* reply);
  // Both: the rendezvous (UPGRADE_REQ/UPGRADE_ACK) exchanged the nonces and
  // the stream id; bind directly.  From idle (or refused, client).
  Status adopt(uint32_t stream_id, const Nonce& peer_nonce);

  // The channel the binding runs over (stream/channel.h binding); set
  // before start_attach, on_attach or adopt.
  void set_channel(const ChannelBinding& b) { channel_ = b; }

  // ---- Control records of this stream from the bound channel.
  // ok: accepted.  invalid: rejected, the session failed (a protocol error;
  // the channel may stay up for other streams).  closed: the session had
  // already failed; the record is ignored.
  Status on_message(uint8_t type, uint32_t stream, uint64_t seq, const uint8_t* payload,
                    size_t len);

  // ---- Switching this end's sending direction (§3).
  // ok: a SWITCH {S = bytes sent on TCP so far} is queued; from now on the
  // caller writes nothing more on TCP in this direction and sends bytes >= S
  // over RDMA (after the SWITCH record).  would_block: not yet (not bound,
  // too few bytes crossed to prove, or the peer has not proven itself); unsupported: the
  // session failed; invalid: already switched.
  Status try_switch_tx();

  // Fails the session with handshake_timeout when a wait outlasted its
  // bound (docs/protocol.md §2, "Every wait"), timed from the first tick
  // that sees it and again whenever its kind changes:
  //   program (wait_ms): an answer to ATTACH (the server's program must
  //     accept first), the server's answer to our SHARE (it must have read
  //     the bytes the form covers), a SHARE of the client's held until our
  //     program read those bytes;
  //   peer (timeout_ms): the peer's PROOF once both shares crossed (its
  //     engine answers at once);
  //   none: a server waiting for the client's opening SHARE, which the
  //     client sends once its program read 64 bytes of ours: the same wait
  //     as too few bytes (coverage_short), for the client's bytes.
  void tick(uint64_t now_ms);
  enum class Wait : uint8_t { none, peer, program };
  Wait waiting() const;
  // Bound, nobody owes anything timed: the program's bytes move it on
  // (no engine tick needed for the timer).
  bool untimed() const {
    return state_ == State::bound && !peer_proven_ && waiting() == Wait::none;
  }
  // Whether tick(now_ms) would fail the session now.
  bool timer_due(uint64_t now_ms) const {
    return state_ != State::failed && timer_armed_ && now_ms >= deadline_ms_;
  }
  // The caller gives up (channel lost, refused and no other way, ...).
  void fail(Reason why);

  // ---- A fork (docs/protocol.md §7 "A fork child that holds an accepted
  // connection").  Server: whether the upgrade may start over in another
  // process: no SHARE crossed either way and nothing switched.
  bool can_hand_over() const;
  // Server, the process that lets the connection go: the session ends
  // (failed, shared_by_fork) and *nak, when the client knows the stream
  // (attaching or bound), is the NAK moved to send it.  false: nothing to send.
  bool hand_over(Message* nak);
  // Server, the process that holds the connection alone now: a fresh
  // upgrade under new secrets (idle); what crossed on TCP is kept.
  void restart(const Nonce& nonce, const uint8_t seed[pake::kSeedBytes]);
  // Client: a NAK moved made the session refused (once): the caller asks
  // rdma_cm again, whether or not it did before.  true once.
  bool take_moved() {
    const bool m = moved_pending_;
    moved_pending_ = false;
    return m;
  }

  // Client, attaching: the channel the ATTACH went over failed before its
  // answer came (the process at its other end exited: a fork-per-connection
  // server's earlier child, docs/protocol.md §7).  Nothing was bound, so
  // the session is refused as after a NAK unknown_stream and the caller asks
  // rdma_cm, which finds the process that holds the connection.  false in
  // any other state (nothing changes: the caller fails the upgrade).
  bool attach_channel_lost();

  // Records for the bound channel, oldest first; false when none is queued.
  bool pop_output(Message* out);

  // ---- State for the preload and stream layers.
  State state() const { return state_; }
  Reason fallback_reason() const { return reason_; } // none unless refused or failed
  // What ended the upgrade, for the log ("" while it has not failed).
  const char* fail_detail() const { return detail_; }
  uint32_t stream_id() const { return stream_id_; }
  bool peer_proven() const { return peer_proven_; }
  Mode tx_mode() const { return tx_switched_ ? Mode::rdma : Mode::tcp; }
  uint64_t tx_offset() const { return tx_offset_; } // S of our direction once rdma
  // rdma once the peer's SWITCH verified: read rx_tcp_remaining() more bytes
  // from TCP, then RDMA bytes from rx_offset() on.  Before that: tcp, and
  // rx_tcp_remaining() is UINT64_MAX (no limit).
  Mode rx_mode() const { return rx_switched_ ? Mode::rdma : Mode::tcp; }
  uint64_t rx_offset() const { return rx_offset_; }
  uint64_t rx_tcp_remaining() const;
  // Failed after a direction already switched: that direction must be
  // resumed on TCP by recovery (recover/resume.h) rather than just continue.
  bool needs_resume() const { return state_ == State::failed && (tx_switched_ || rx_switched_); }
  // Our PROOF left: from then on the peer may switch its direction.
  bool proof_sent() const { return proof_sent_; }
  // Bound, but the connection has not carried enough bytes for the binding
  // (docs/protocol.md §2): it stays on TCP until it does (Reason::too_few_bytes).
  bool coverage_short() const;
  // Failed because the peer's binding did not hold: a coverage form that is
  // not the protocol's, a key confirmation that does not verify (a wrong
  // guess of the covered bytes), or (server) any end after our PROOF left
  // unanswered.  Counted per peer address.
  bool binding_refused() const { return binding_refused_; }
  // The peer's NAK said it processed no SWITCH of ours (kNakReadsPlain).
  bool peer_reads_plain() const { return state_ == State::failed && peer_reads_plain_; }
  // Recovery (recover/resume_wire.h): the key that authenticates RESUME
  // frames (from the key exchange; before it completed, which no switched
  // direction can be, nonce_c XOR nonce_s) and this end's sending direction.
  void session_key(uint8_t out[kNonceBytes]) const;
  Dir tx_direction() const { return static_cast<Dir>(tx_dir()); }
  uint64_t tcp_sent() const { return count_[tx_dir()]; }
  uint64_t tcp_received() const { return count_[rx_dir()]; }

private:
  // The client's SHARE, until this (server) end has the bytes its form
  // covers (TCP is slower than the channel).
  struct PeerShare {
    bool present = false;
    uint64_t count[2] = {0, 0};
    uint8_t point[kPointBytes] = {};
  };

  int tx_dir() const { return role_ == Role::client ? 0 : 1; }
  int rx_dir() const { return 1 - tx_dir(); }
  const Nonce& nonce_c() const { return role_ == Role::client ? nonce_ : peer_nonce_; }
  const Nonce& nonce_s() const { return role_ == Role::client ? peer_nonce_ : nonce_; }
  // The coverage form our own counts reach now (false: none yet).
  bool reach(uint64_t cover[2]) const;
  void record(int d, const void* data, size_t len);

  Status reject(Reason why, const char* detail); // fail and return invalid
  Status refuse_binding(const char* detail);     // reject: the peer proved nothing
  void fail_internal(Reason why, bool tell_peer, const char* detail);
  void bind(uint32_t stream_id, const Nonce& peer_nonce);
  bool push(const Message& m);
  void maybe_share();
  bool make_share(const uint64_t cover[2]);
  bool key_with(const uint8_t peer_point[kPointBytes]);
  void send_proof();
  void make_confirm(uint8_t kind, uint64_t offset, Message* m) const;
  Status on_share(const uint8_t* payload, size_t len);
  void answer_share();
  Status on_confirm(uint8_t type, uint64_t seq, const uint8_t* payload, size_t len);

  Role role_;
  State state_ = State::idle;
  Reason reason_ = Reason::none;
  const char* detail_ = "";
  TcpTuple tuple_;
  Nonce nonce_, peer_nonce_{};
  uint32_t timeout_ms_, wait_ms_;
  uint32_t stream_id_ = 0;
  ChannelBinding channel_{};

  uint64_t count_[2] = {0, 0};            // bytes that crossed each direction (Dir index)
  uint8_t prefix_[2][kPrefixBytes]{};     // their first bytes
  uint64_t other_at_one_way_[2] = {0, 0}; // min(other direction, 64) when one reached 16 KiB

  uint8_t seed_[pake::kSeedBytes];
  bool share_sent_ = false, keyed_ = false, proof_sent_ = false;
  uint64_t cover_[2] = {0, 0}; // the coverage form of the key exchange
  uint8_t scalar_[pake::kScalarBytes] = {}, my_point_[kPointBytes] = {};
  uint8_t confirm_key_[kTagBytes] = {}, resume_key_[kNonceBytes] = {};
  PeerShare peer_share_;
  bool peer_share_seen_ = false, peer_proven_ = false;
  bool reformed_ = false; // the "both" form was asked for (answer_share)
  bool peer_proof_seen_ = false, peer_switch_seen_ = false; // duplicates are violations
  bool peer_reads_plain_ = false;
  bool binding_refused_ = false;
  bool moved_ = false, moved_pending_ = false; // a NAK moved came (client: once)
  bool tx_switched_ = false, rx_switched_ = false;
  uint64_t tx_offset_ = 0, rx_offset_ = 0;

  bool timer_armed_ = false;
  Wait timer_kind_ = Wait::none; // the wait the armed timer is for
  uint64_t deadline_ms_ = 0;

  // At most one SHARE, one PROOF, one SWITCH and one NAK are ever queued
  // (ATTACH and its answers are returned directly).
  static constexpr int kOutboxSlots = 6;
  Message outbox_[kOutboxSlots];
  int out_head_ = 0, out_count_ = 0;
};

} // namespace xp::recover
