#include "recover/upgrade.h"

#include <cstring>

#include "recover/wire_bytes.h"

namespace xp::recover {

const char* state_name(State s) {
  switch (s) {
  case State::idle:
    return "idle";
  case State::attaching:
    return "attaching";
  case State::refused:
    return "refused";
  case State::bound:
    return "bound";
  case State::failed:
    return "failed";
  }
  return "unknown";
}

UpgradeSession::UpgradeSession(const SessionParams& p)
    : role_(p.role), tuple_(p.tuple), nonce_(p.nonce), timeout_ms_(p.timeout_ms),
      wait_ms_(p.wait_ms > p.timeout_ms ? p.wait_ms : p.timeout_ms) {
  memcpy(seed_, p.seed, sizeof seed_);
}

// ---- TCP path ----------------------------------------------------------

// Counting is all the data path pays once the first 64 bytes are copied.
void UpgradeSession::record(int d, const void* data, size_t len) {
  // What crossed the other way when this direction reached kOneWayBytes
  // (on_share, answer_share: which one-way forms the connection allows).
  if (count_[d] < kOneWayBytes && count_[d] + len >= kOneWayBytes)
    other_at_one_way_[d] = count_[1 - d] < kCoverBytes ? count_[1 - d] : kCoverBytes;
  if (count_[d] < kPrefixBytes) {
    const size_t room = kPrefixBytes - static_cast<size_t>(count_[d]);
    memcpy(prefix_[d] + count_[d], data, room < len ? room : len);
  }
  count_[d] += len;
}

void UpgradeSession::on_tcp_sent(const void* data, size_t len) {
  if (data == nullptr) return;
  record(tx_dir(), data, len);
  if (state_ == State::failed) return;
  // The receiver reads exactly S bytes from TCP, so a byte written after the
  // switch would never be delivered: a caller bug that ends the upgrade.
  if (tx_switched_ && len > 0)
    return fail_internal(Reason::handshake_failed, true, "TCP bytes written after our switch");
  maybe_share();
}

void UpgradeSession::on_tcp_received(const void* data, size_t len) {
  if (data == nullptr) return;
  const int d = rx_dir();
  record(d, data, len);
  if (state_ == State::failed) return;
  // The peer announced it stops writing TCP at S: more is a violation.
  if (rx_switched_ && count_[d] > rx_offset_)
    return fail_internal(Reason::handshake_failed, true,
                         "peer wrote TCP bytes beyond its switch offset");
  answer_share();
  maybe_share();
}

// ---- Attach ------------------------------------------------------------

Status UpgradeSession::start_attach(uint32_t stream_id, Message* out) {
  if (role_ != Role::client) return Status::invalid;
  if (state_ == State::failed) return Status::unsupported;
  if (state_ != State::idle && state_ != State::refused) return Status::invalid;
  stream_id_ = stream_id;
  state_ = State::attaching;
  reason_ = Reason::none;
  timer_armed_ = false;
  *out = Message{};
  out->type = msg::attach;
  out->stream = stream_id;
  out->len = static_cast<uint8_t>(kAttachBytes);
  encode_attach(tuple_, nonce_, out->payload);
  return Status::ok;
}

Status UpgradeSession::on_attach(uint32_t stream_id, uint64_t seq, const uint8_t* payload,
                                 size_t len, Message* reply) {
  // A client session holds no listening side: nobody may attach to it.
  if (role_ != Role::server) {
    *reply = make_nak(stream_id, NakCode::unknown_stream);
    return Status::invalid;
  }
  if (state_ == State::failed) {
    *reply = make_nak(stream_id, NakCode::failed);
    return Status::closed;
  }
  if (state_ != State::idle) {
    *reply = make_nak(stream_id, NakCode::busy);
    return Status::invalid;
  }
  TcpTuple t;
  Nonce nc;
  NakCode why = NakCode::failed;
  Status st = seq == 0 ? parse_attach(payload, len, &t, &nc, &why) : Status::invalid;
  if (st == Status::ok && !(t == tuple_)) {
    // Routed here by its 4-tuple, yet naming another: forged or misrouted.
    why = NakCode::unknown_stream;
    st = Status::invalid;
  }
  if (st != Status::ok) {
    *reply = make_nak(stream_id, why);
    fail_internal(Reason::handshake_failed, false,
                  "bad ATTACH"); // the reply already tells the sender
    return Status::invalid;
  }
  bind(stream_id, nc);
  *reply = Message{};
  reply->type = msg::attach_ack;
  reply->stream = stream_id;
  reply->len = static_cast<uint8_t>(kAttachAckBytes);
  memcpy(reply->payload, nonce_.b, kNonceBytes);
  return Status::ok;
}

Status UpgradeSession::adopt(uint32_t stream_id, const Nonce& peer_nonce) {
  if (state_ == State::failed) return Status::unsupported;
  if (state_ != State::idle && !(state_ == State::refused && role_ == Role::client))
    return Status::invalid;
  bind(stream_id, peer_nonce);
  return Status::ok;
}

void UpgradeSession::bind(uint32_t stream_id, const Nonce& peer_nonce) {
  stream_id_ = stream_id;
  peer_nonce_ = peer_nonce;
  state_ = State::bound;
  reason_ = Reason::none;
  timer_armed_ = false;
  maybe_share();
}

// ---- Control records ---------------------------------------------------

Status UpgradeSession::on_message(uint8_t type, uint32_t stream, uint64_t seq,
                                  const uint8_t* payload, size_t len) {
  if (state_ == State::failed) return Status::closed;
  if ((payload == nullptr && len > 0) || len > kMaxControlPayload)
    return reject(Reason::handshake_failed, "control payload too long");
  // Idle or refused: the peer knows no stream of ours, so nothing may come.
  if (state_ != State::attaching && state_ != State::bound)
    return reject(Reason::handshake_failed, "control record while not attached");
  if (stream != stream_id_)
    return reject(Reason::handshake_failed, "control record for another stream id");
  switch (type) {
  case msg::attach_ack:
    if (state_ != State::attaching || seq != 0 || len != kAttachAckBytes)
      return reject(Reason::handshake_failed, "bad ATTACH_ACK");
    {
      Nonce ns;
      memcpy(ns.b, payload, kNonceBytes);
      bind(stream_id_, ns);
    }
    return Status::ok;
  case msg::attach_nak: {
    if (len != 0) return reject(Reason::handshake_failed, "NAK with a payload");
    const auto code = static_cast<NakCode>(seq & kNakCodeMask);
    if (code == NakCode::moved && role_ == Role::client && !moved_ && !share_sent_ &&
        !peer_share_seen_ && !tx_switched_ && !rx_switched_) {
      // The server forked and let the connection go before any share
      // crossed: one more try through rdma_cm finds the process that holds
      // it (docs/protocol.md §7).  A second one, or one after a share, is
      // a failure like any NAK.
      moved_ = moved_pending_ = true;
      state_ = State::refused;
      reason_ = Reason::shared_by_fork;
      timer_armed_ = false;
      return Status::ok;
    }
    if (state_ == State::attaching && (code == NakCode::unknown_stream || code == NakCode::busy)) {
      // The protocol's answer is another try through UPGRADE_REQ (another
      // process may hold the tuple, or a fresh channel has room): keep what
      // was observed on TCP and let the caller attach again or give up.
      state_ = State::refused;
      reason_ = nak_reason(seq);
      timer_armed_ = false;
      return Status::ok;
    }
    peer_reads_plain_ = (seq & kNakReadsPlain) != 0;
    fail_internal(nak_reason(seq), false, "the peer refused (NAK)"); // the peer already knows
    return Status::ok;
  }
  case msg::keepalive:
    return len == 0 ? Status::ok : reject(Reason::handshake_failed, "KEEPALIVE with a payload");
  case msg::share:
    if (state_ != State::bound || seq != 0)
      return reject(Reason::handshake_failed, "SHARE before binding");
    return on_share(payload, len);
  case msg::proof:
  case msg::switch_:
    if (state_ != State::bound || !keyed_)
      return reject(Reason::handshake_failed, "PROOF/SWITCH before the key exchange");
    return on_confirm(type, seq, payload, len);
  default: // ATTACH comes through on_attach; anything else is unknown
    return reject(Reason::handshake_failed, "unknown control record type");
  }
}

// ---- The key exchange (docs/protocol.md §2) ----------------------------

bool UpgradeSession::reach(uint64_t cover[2]) const {
  if (count_[0] >= kCoverBytes && count_[1] >= kCoverBytes) {
    cover[0] = cover[1] = kCoverBytes;
    return true;
  }
  if (reformed_) return false; // the server asked for the "both" form
  for (int d = 0; d < 2; ++d) {
    if (count_[d] >= kOneWayBytes) {
      cover[d] = kCoverBytes;
      cover[1 - d] = count_[1 - d]; // below kCoverBytes: the "both" form failed
      return true;
    }
  }
  return false;
}

bool UpgradeSession::coverage_short() const {
  uint64_t cover[2];
  return state_ == State::bound && !share_sent_ && !peer_share_.present && !reach(cover);
}

// Our share under the generator of `cover` over the bytes we saw.
bool UpgradeSession::make_share(const uint64_t cover[2]) {
  uint8_t password[kPasswordMax], cid[kChannelIdBytes], sid[2 * kNonceBytes];
  const uint8_t* prefix[2] = {prefix_[0], prefix_[1]};
  pake::Inputs in;
  in.password = password;
  in.password_len = binding_password(cover, prefix, password);
  binding_channel_id(tuple_, stream_id_, channel_, cid);
  in.channel_id = cid;
  in.channel_id_len = sizeof cid;
  memcpy(sid, nonce_c().b, kNonceBytes);
  memcpy(sid + kNonceBytes, nonce_s().b, kNonceBytes);
  in.sid = sid;
  in.sid_len = sizeof sid;
  if (!pake::make_share(in, seed_, scalar_, my_point_)) return false;
  cover_[0] = cover[0];
  cover_[1] = cover[1];
  Message m;
  m.type = msg::share;
  m.stream = stream_id_;
  m.len = static_cast<uint8_t>(kShareBytes);
  encode_share(cover_, my_point_, m.payload);
  if (!push(m)) return false;
  share_sent_ = true;
  return true;
}

// ISK from the peer's share; the confirmation and resume keys from it.
bool UpgradeSession::key_with(const uint8_t peer_point[kPointBytes]) {
  uint8_t sid[2 * kNonceBytes], isk[pake::kKeyBytes];
  memcpy(sid, nonce_c().b, kNonceBytes);
  memcpy(sid + kNonceBytes, nonce_s().b, kNonceBytes);
  const bool client = role_ == Role::client;
  if (!pake::derive_key(scalar_, peer_point, client ? my_point_ : peer_point,
                        client ? peer_point : my_point_, sid, sizeof sid, isk))
    return false;
  memcpy(confirm_key_, isk, kTagBytes);
  memcpy(resume_key_, isk + kTagBytes, kNonceBytes);
  keyed_ = true;
  return true;
}

void UpgradeSession::make_confirm(uint8_t kind, uint64_t offset, Message* m) const {
  ConfirmInput in;
  in.kind = kind;
  in.dir = static_cast<Dir>(tx_dir());
  in.offset = offset;
  in.count[0] = cover_[0];
  in.count[1] = cover_[1];
  uint8_t tag[kTagBytes];
  confirm_tag(confirm_key_, in, tag);
  *m = Message{};
  m->stream = stream_id_;
  m->len = static_cast<uint8_t>(kProofBytes);
  encode_proof(tag, cover_, m->payload);
}

void UpgradeSession::send_proof() {
  Message m;
  make_confirm(kProofKindProof, 0, &m);
  m.type = msg::proof;
  if (!push(m)) return fail_internal(Reason::handshake_failed, false, "PROOF not queued");
  proof_sent_ = true;
}

// The client opens the exchange as soon as its bytes reach a coverage form:
// the form is the client's, so both ends derive the generator from the same
// counts (the server checks them against what it saw, on_share).
void UpgradeSession::maybe_share() {
  if (state_ != State::bound || role_ != Role::client || share_sent_) return;
  uint64_t cover[2];
  if (!reach(cover)) return;
  if (!make_share(cover)) fail_internal(Reason::handshake_failed, true, "no key exchange share");
}

Status UpgradeSession::on_share(const uint8_t* payload, size_t len) {
  if (len != kShareBytes || peer_share_seen_)
    return reject(Reason::handshake_failed, "second SHARE or one of a wrong length");
  peer_share_seen_ = true;
  PeerShare p;
  p.present = true;
  decode_share(payload, p.count, p.point);
  if (role_ == Role::client) {
    // The server asks once for the "both" form instead of our one-way form
    // over our direction (answer_share).
    if (share_sent_ && !reformed_ && p.count[0] == 0 && p.count[1] == 0 &&
        one_way_over(cover_, tx_dir())) {
      reformed_ = true;
      share_sent_ = false;
      peer_share_seen_ = false;
      maybe_share();
      return state_ == State::failed ? Status::invalid : Status::ok;
    }
    // The server answers our form; nothing else is an answer.
    if (!share_sent_ || p.count[0] != cover_[0] || p.count[1] != cover_[1])
      return reject(Reason::handshake_failed, "SHARE answers another coverage form");
    if (!key_with(p.point)) return reject(Reason::handshake_failed, "SHARE is not a valid point");
    send_proof();
    return state_ == State::failed ? Status::invalid : Status::ok;
  }
  const int tx = tx_dir(), rx = rx_dir();
  // What the client's form covers is fixed by what crossed, not chosen by
  // the client (docs/protocol.md §2): it cannot have seen more of our
  // direction than we sent.
  if (!coverage_form(p.count) || p.count[tx] > count_[tx])
    return refuse_binding("SHARE covers other than the protocol's bytes");
  if (one_way_over(p.count, tx)) {
    // One-way over our direction: we know exactly what we sent; and a
    // client that read kOneWayBytes of it had sent what we had received
    // when we sent them, so its form covers at least that (a request that
    // came before the replies is never left out).
    if (count_[tx] < kOneWayBytes)
      return refuse_binding("one-way form over a direction that is not");
    if (p.count[rx] < other_at_one_way_[tx])
      return refuse_binding("one-way form leaves out bytes sent before");
  }
  peer_share_ = p;
  answer_share();
  return state_ == State::failed ? Status::invalid : Status::ok;
}

// Server: the client's share, once the bytes its form covers arrived here
// (one-way over the client's direction: kOneWayBytes of it first).
void UpgradeSession::answer_share() {
  if (!peer_share_.present || state_ != State::bound) return;
  const int rx = rx_dir();
  const bool one_way_rx = one_way_over(peer_share_.count, rx);
  const uint64_t need = one_way_rx ? kOneWayBytes : peer_share_.count[rx];
  if (count_[rx] < need) return;
  peer_share_.present = false;
  // One-way over the client's direction: only on a connection that had
  // not carried kCoverBytes our way when the client's 16 KiB arrived here
  // (an upload).  A request/response connection whose requests add up to
  // 16 KiB binds on both directions, not on its first request alone: the
  // client is asked once for the "both" form (a SHARE with counts (0, 0)),
  // which it sends when it has read kCoverBytes of ours.
  if (one_way_rx && other_at_one_way_[rx] >= kCoverBytes) {
    if (reformed_) {
      refuse_binding("one-way form over a connection that answered");
      return;
    }
    reformed_ = true;
    peer_share_seen_ = false;
    Message m;
    m.type = msg::share;
    m.stream = stream_id_;
    m.len = static_cast<uint8_t>(kShareBytes);
    const uint64_t none[2] = {0, 0};
    const uint8_t zero[kPointBytes] = {};
    encode_share(none, zero, m.payload);
    if (!push(m)) fail_internal(Reason::handshake_failed, false, "SHARE not queued");
    return;
  }
  if (!make_share(peer_share_.count))
    return fail_internal(Reason::handshake_failed, true, "no key exchange share");
  if (!key_with(peer_share_.point))
    return fail_internal(Reason::handshake_failed, true, "SHARE is not a valid point");
  send_proof();
}

Status UpgradeSession::on_confirm(uint8_t type, uint64_t seq, const uint8_t* payload, size_t len) {
  if (len != kProofBytes) return reject(Reason::handshake_failed, "PROOF/SWITCH of a wrong length");
  uint8_t tag[kTagBytes];
  uint64_t count[2];
  decode_proof(payload, tag, count);
  if (count[0] != cover_[0] || count[1] != cover_[1])
    return reject(Reason::handshake_failed, "PROOF/SWITCH names another coverage form");
  const int rx = rx_dir();
  uint64_t offset = 0;
  if (type == msg::proof) {
    if (peer_proof_seen_ || seq != 0) return reject(Reason::handshake_failed, "second PROOF");
    peer_proof_seen_ = true;
  } else {
    // S is at least what the form covers of the peer's direction (one-way
    // over it: at least kOneWayBytes), and at or beyond what TCP already
    // delivered here.
    const uint64_t least = one_way_over(cover_, rx) ? kOneWayBytes : cover_[rx];
    if (peer_switch_seen_ || seq < least || count_[rx] > seq)
      return reject(Reason::handshake_failed, "second SWITCH or bad switch offset");
    peer_switch_seen_ = true;
    offset = seq;
  }
  ConfirmInput in;
  in.kind = type == msg::proof ? kProofKindProof : kProofKindSwitch;
  in.dir = static_cast<Dir>(rx); // the prover's sending direction
  in.offset = offset;
  in.count[0] = cover_[0];
  in.count[1] = cover_[1];
  uint8_t want[kTagBytes];
  confirm_tag(confirm_key_, in, want);
  if (!same_bytes(want, tag, kTagBytes))
    return refuse_binding(type == msg::proof ? "PROOF tag does not verify"
                                             : "SWITCH tag does not verify");
  peer_proven_ = true; // a SWITCH proves as much as a PROOF
  if (type == msg::switch_) {
    rx_switched_ = true;
    rx_offset_ = offset;
  }
  return Status::ok;
}

// ---- Switching ---------------------------------------------------------

Status UpgradeSession::try_switch_tx() {
  if (state_ == State::failed) return Status::unsupported;
  if (tx_switched_) return Status::invalid;
  // Until the peer proved it holds this connection, bytes sent over RDMA
  // could reach a process that is not the TCP peer.
  if (state_ != State::bound || !peer_proven_) return Status::would_block;
  if (!proof_sent_) return Status::would_block; // our PROOF goes before the SWITCH
  const uint64_t s = count_[tx_dir()];
  Message m;
  make_confirm(kProofKindSwitch, s, &m);
  m.type = msg::switch_;
  m.seq = s;
  if (!push(m)) {
    fail_internal(Reason::handshake_failed, false, "SWITCH not queued");
    return Status::unsupported;
  }
  tx_switched_ = true;
  tx_offset_ = s;
  return Status::ok;
}

// ---- Time, failure, output ---------------------------------------------

UpgradeSession::Wait UpgradeSession::waiting() const {
  if (state_ == State::attaching) return Wait::program; // the server accepts first
  if (state_ != State::bound || peer_proven_) return Wait::none;
  if (keyed_) return Wait::peer; // both shares crossed: its PROOF is due
  // A share waits here for the bytes its form covers (our program reads
  // them), or ours waits there (its program reads them): every such wait
  // ends, whoever chose the form.
  if (peer_share_.present || share_sent_) return Wait::program;
  // Nothing sent yet: the client's SHARE leaves once its program read the
  // bytes its form covers, which nothing here can see.  A client that
  // reached a form shares at once (maybe_share).
  return Wait::none;
}

void UpgradeSession::tick(uint64_t now_ms) {
  if (state_ == State::failed) return;
  const Wait w = waiting();
  if (w == Wait::none) {
    timer_armed_ = false;
    return;
  }
  if (!timer_armed_ || timer_kind_ != w) {
    timer_armed_ = true;
    timer_kind_ = w;
    deadline_ms_ = now_ms + (w == Wait::peer ? timeout_ms_ : wait_ms_);
    return;
  }
  if (now_ms >= deadline_ms_) fail_internal(Reason::handshake_timeout, true, "timeout");
}

bool UpgradeSession::can_hand_over() const {
  return role_ == Role::server && state_ != State::failed && !share_sent_ && !peer_share_seen_ &&
         !peer_share_.present && !tx_switched_ && !rx_switched_;
}

bool UpgradeSession::hand_over(Message* nak) {
  const bool peer_knows = state_ == State::attaching || state_ == State::bound;
  fail_internal(Reason::shared_by_fork, false, "handed to a fork child");
  if (peer_knows) *nak = make_nak(stream_id_, NakCode::moved);
  return peer_knows;
}

bool UpgradeSession::attach_channel_lost() {
  if (role_ != Role::client || state_ != State::attaching) return false;
  state_ = State::refused;
  reason_ = Reason::rdma_error_fallback;
  timer_armed_ = false;
  out_head_ = out_count_ = 0; // nothing more goes over that channel
  return true;
}

void UpgradeSession::restart(const Nonce& nonce, const uint8_t seed[pake::kSeedBytes]) {
  nonce_ = nonce;
  peer_nonce_ = Nonce{};
  memcpy(seed_, seed, sizeof seed_);
  state_ = State::idle;
  reason_ = Reason::none;
  detail_ = "";
  stream_id_ = 0;
  channel_ = ChannelBinding{};
  share_sent_ = keyed_ = proof_sent_ = false;
  peer_share_ = PeerShare{};
  peer_share_seen_ = peer_proven_ = reformed_ = false;
  peer_proof_seen_ = peer_switch_seen_ = peer_reads_plain_ = binding_refused_ = false;
  timer_armed_ = false;
  timer_kind_ = Wait::none;
  out_head_ = out_count_ = 0;
}

void UpgradeSession::fail(Reason why) {
  fail_internal(why == Reason::none ? Reason::handshake_failed : why, true, "caller");
}

Status UpgradeSession::refuse_binding(const char* detail) {
  binding_refused_ = true;
  return reject(Reason::handshake_failed, detail);
}

Status UpgradeSession::reject(Reason why, const char* detail) {
  fail_internal(why, true, detail);
  return Status::invalid;
}

void UpgradeSession::fail_internal(Reason why, bool tell_peer, const char* detail) {
  if (state_ == State::failed) return;
  // Our PROOF answered a share: the peer could test its guess against it,
  // and whatever ends the binding now (silence, a malformed record) counts
  // as a failed guess (stream/bind_failures.h).
  if (proof_sent_ && !peer_proven_ && role_ == Role::server) binding_refused_ = true;
  detail_ = detail;
  const bool peer_knows = state_ == State::attaching || state_ == State::bound;
  state_ = State::failed;
  reason_ = why;
  peer_share_.present = false;
  timer_armed_ = false;
  // Tell the peer, so it stops waiting and keeps (or resumes) the stream on TCP.
  if (tell_peer && peer_knows)
    push(make_nak(stream_id_,
                  why == Reason::handshake_timeout ? NakCode::timeout : NakCode::failed));
}

bool UpgradeSession::push(const Message& m) {
  if (out_count_ == kOutboxSlots) return false;
  outbox_[(out_head_ + out_count_) % kOutboxSlots] = m;
  ++out_count_;
  return true;
}

bool UpgradeSession::pop_output(Message* out) {
  if (out_count_ == 0) return false;
  *out = outbox_[out_head_];
  out_head_ = (out_head_ + 1) % kOutboxSlots;
  --out_count_;
  return true;
}

void UpgradeSession::session_key(uint8_t out[kNonceBytes]) const {
  if (keyed_) {
    memcpy(out, resume_key_, kNonceBytes);
    return;
  }
  for (size_t i = 0; i < kNonceBytes; ++i)
    out[i] = static_cast<uint8_t>(nonce_c().b[i] ^ nonce_s().b[i]);
}

uint64_t UpgradeSession::rx_tcp_remaining() const {
  if (!rx_switched_) return UINT64_MAX;
  const uint64_t got = count_[rx_dir()];
  return rx_offset_ > got ? rx_offset_ - got : 0;
}

} // namespace xp::recover
