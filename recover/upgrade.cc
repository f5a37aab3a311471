#include "recover/upgrade.h"

#include <cstring>

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
    : role_(p.role), tuple_(p.tuple), nonce_(p.nonce), timeout_ms_(p.timeout_ms) {}

// ---- TCP path ----------------------------------------------------------

// Counting is all the data path pays once the first 64 bytes are copied.
void UpgradeSession::record(int d, const void* data, size_t len) {
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
  maybe_prove();
}

void UpgradeSession::on_tcp_received(const void* data, size_t len) {
  if (data == nullptr) return;
  const int d = rx_dir();
  record(d, data, len);
  if (state_ == State::failed) return;
  // The peer announced it stops writing TCP at S: more is a violation.
  const bool limit = rx_switched_ || peer_switch_.present;
  const uint64_t s = rx_switched_ ? rx_offset_ : peer_switch_.offset;
  if (limit && count_[d] > s)
    return fail_internal(Reason::handshake_failed, true,
                         "peer wrote TCP bytes beyond its switch offset");
  verify_pending();
  maybe_prove();
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
  maybe_prove();
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
  case msg::proof:
  case msg::switch_:
    if (state_ != State::bound)
      return reject(Reason::handshake_failed, "PROOF/SWITCH before binding");
    return on_proof_record(type, seq, payload, len);
  default: // ATTACH comes through on_attach; anything else is unknown
    return reject(Reason::handshake_failed, "unknown control record type");
  }
}

Status UpgradeSession::on_proof_record(uint8_t type, uint64_t seq, const uint8_t* payload,
                                       size_t len) {
  if (len != kProofBytes) return reject(Reason::handshake_failed, "PROOF/SWITCH of a wrong length");
  Pending p;
  p.present = true;
  decode_proof(payload, p.tag, p.count);
  const int tx = tx_dir(), rx = rx_dir();
  // The protocol fixes what a proof covers (docs/protocol.md §2); the peer
  // cannot have seen more of our direction than we sent.
  if (!coverage_form(p.count) || p.count[tx] > count_[tx])
    return reject(Reason::handshake_failed, "proof covers other than the protocol's bytes");
  // One-way form over our direction: we know exactly what we sent.
  if (p.count[rx] == 0 && count_[tx] < kOneWayBytes)
    return reject(Reason::handshake_failed, "one-way proof over a direction that is not");
  if (type == msg::proof) {
    if (peer_proof_seen_ || seq != 0) return reject(Reason::handshake_failed, "second PROOF");
    peer_proof_seen_ = true;
    peer_proof_ = p;
  } else {
    // S is at least what the proof covers of the peer's direction (one-way
    // over it: at least kOneWayBytes), and at or beyond what TCP already
    // delivered here.
    const uint64_t least = p.count[tx] == 0 ? kOneWayBytes : p.count[rx];
    if (peer_switch_seen_ || seq < least || count_[rx] > seq)
      return reject(Reason::handshake_failed, "second SWITCH or bad switch offset");
    peer_switch_seen_ = true;
    p.offset = seq;
    peer_switch_ = p;
  }
  verify_pending();
  return state_ == State::failed ? Status::invalid : Status::ok;
}

UpgradeSession::Check UpgradeSession::check(uint8_t kind, const Pending& p) const {
  // Our sending direction was checked on arrival (claimed <= sent, and our
  // copy only grows); the peer's may still be on its way over TCP.
  // One-way over the peer's direction: it carried kOneWayBytes here first.
  const int rx = rx_dir();
  const uint64_t need = p.count[1 - rx] == 0 ? kOneWayBytes : p.count[rx];
  if (count_[rx] < need) return Check::later;
  ProofInput in;
  in.kind = kind;
  in.dir = static_cast<Dir>(rx); // the prover's sending direction
  in.offset = p.offset;
  in.count[0] = p.count[0];
  in.count[1] = p.count[1];
  in.prefix[0] = prefix_[0];
  in.prefix[1] = prefix_[1];
  uint8_t want[kTagBytes];
  proof_tag(nonce_c(), nonce_s(), in, want);
  uint8_t diff = 0;
  for (size_t i = 0; i < kTagBytes; ++i)
    diff |= static_cast<uint8_t>(want[i] ^ p.tag[i]);
  return diff == 0 ? Check::good : Check::bad;
}

void UpgradeSession::verify_pending() {
  if (peer_proof_.present) {
    const Check c = check(kProofKindProof, peer_proof_);
    if (c == Check::bad)
      return fail_internal(Reason::handshake_failed, true, "PROOF tag does not verify");
    if (c == Check::good) {
      peer_proof_.present = false;
      peer_proven_ = true;
    }
  }
  if (peer_switch_.present) {
    const Check c = check(kProofKindSwitch, peer_switch_);
    if (c == Check::bad)
      return fail_internal(Reason::handshake_failed, true, "SWITCH tag does not verify");
    if (c == Check::good) {
      peer_switch_.present = false;
      peer_proven_ = true; // a SWITCH proves as much as a PROOF
      rx_switched_ = true;
      rx_offset_ = peer_switch_.offset;
    }
  }
}

// ---- Proofs and switching ----------------------------------------------

void UpgradeSession::make_proof(uint8_t kind, uint64_t offset, Message* m) const {
  ProofInput in;
  in.kind = kind;
  in.dir = static_cast<Dir>(tx_dir());
  in.offset = offset;
  in.count[0] = cover_[0];
  in.count[1] = cover_[1];
  in.prefix[0] = prefix_[0];
  in.prefix[1] = prefix_[1];
  uint8_t tag[kTagBytes];
  proof_tag(nonce_c(), nonce_s(), in, tag);
  *m = Message{};
  m->stream = stream_id_;
  m->len = static_cast<uint8_t>(kProofBytes);
  encode_proof(tag, cover_, m->payload);
}

bool UpgradeSession::reach(uint64_t cover[2]) const {
  if (count_[0] >= kCoverBytes && count_[1] >= kCoverBytes) {
    cover[0] = cover[1] = kCoverBytes;
    return true;
  }
  for (int d = 0; d < 2; ++d) {
    if (count_[d] >= kOneWayBytes) {
      cover[d] = kCoverBytes;
      cover[1 - d] = 0;
      return true;
    }
  }
  return false;
}

// Each end proves as soon as it can, whether or not it switches: the peer
// needs our proof before it may send us anything over RDMA.
void UpgradeSession::maybe_prove() {
  if (state_ != State::bound || proof_sent_ || !reach(cover_)) return;
  Message m;
  make_proof(kProofKindProof, 0, &m);
  m.type = msg::proof;
  if (!push(m)) return fail_internal(Reason::handshake_failed, false, "PROOF not queued");
  proof_sent_ = true;
}

Status UpgradeSession::try_switch_tx() {
  if (state_ == State::failed) return Status::unsupported;
  if (tx_switched_) return Status::invalid;
  // Until the peer proved it holds this connection, bytes sent over RDMA
  // could reach a process that is not the TCP peer.
  if (state_ != State::bound || !peer_proven_) return Status::would_block;
  maybe_prove();                                // our PROOF (if any) goes before the SWITCH
  if (!proof_sent_) return Status::would_block; // too few bytes here yet
  const uint64_t s = count_[tx_dir()];
  Message m;
  make_proof(kProofKindSwitch, s, &m);
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

bool UpgradeSession::waiting_for_peer() const {
  if (state_ == State::attaching) return true;
  // The bytes we saw reach a coverage form, so the peer can prove; a proof
  // it sent that waits for our own reading is not the peer's delay.
  uint64_t cover[2];
  return state_ == State::bound && !peer_proven_ && !peer_proof_.present && !peer_switch_.present &&
         reach(cover);
}

void UpgradeSession::tick(uint64_t now_ms) {
  if (state_ == State::failed) return;
  if (!waiting_for_peer()) {
    timer_armed_ = false;
    return;
  }
  if (!timer_armed_) {
    timer_armed_ = true;
    deadline_ms_ = now_ms + timeout_ms_;
    return;
  }
  if (now_ms >= deadline_ms_) fail_internal(Reason::handshake_timeout, true, "timeout");
}

void UpgradeSession::fail(Reason why) {
  fail_internal(why == Reason::none ? Reason::handshake_failed : why, true, "caller");
}

Status UpgradeSession::reject(Reason why, const char* detail) {
  fail_internal(why, true, detail);
  return Status::invalid;
}

void UpgradeSession::fail_internal(Reason why, bool tell_peer, const char* detail) {
  if (state_ == State::failed) return;
  detail_ = detail;
  const bool peer_knows = state_ == State::attaching || state_ == State::bound;
  state_ = State::failed;
  reason_ = why;
  peer_proof_.present = false;
  peer_switch_.present = false;
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
  for (size_t i = 0; i < kNonceBytes; ++i)
    out[i] = static_cast<uint8_t>(nonce_c().b[i] ^ nonce_s().b[i]);
}

uint64_t UpgradeSession::rx_tcp_remaining() const {
  if (!rx_switched_) return UINT64_MAX;
  const uint64_t got = count_[rx_dir()];
  return rx_offset_ > got ? rx_offset_ - got : 0;
}

} // namespace xp::recover
