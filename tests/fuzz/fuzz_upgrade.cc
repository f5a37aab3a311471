// libFuzzer target: the upgrade's peer-controlled bytes (docs/protocol.md
// §1-3, §7): ATTACH payloads, the binding's SHARE/PROOF/SWITCH records
// (with a hostile key exchange share), NAKs, and the recovery frames
// (RESUME, REATTACH, SWITCHBACK) and the rendezvous' rdma_cm private data.  Two honest sessions are
// bound to each other; the input interleaves TCP bytes, the delivery (or mutation, or loss) of each
// one's records to the other, and records of its own.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "recover/move_wire.h"
#include "recover/reattach_wire.h"
#include "recover/rendezvous_wire.h"
#include "recover/resume_wire.h"
#include "recover/upgrade.h"

using namespace xp;
using namespace xp::recover;

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t{byte()} << (8 * i);
    return v;
  }
  size_t take(uint8_t* out, size_t max) {
    const size_t k = n < max ? n : max;
    memcpy(out, p, k);
    p += k;
    n -= k;
    return k;
  }
};

SessionParams params(Role r, uint8_t salt) {
  SessionParams s;
  s.role = r;
  s.tuple.family = 4;
  s.tuple.client_addr[0] = 10;
  s.tuple.server_addr[0] = 10;
  s.tuple.server_addr[3] = 2;
  s.tuple.client_port = 41000;
  s.tuple.server_port = 8080;
  for (size_t i = 0; i < kNonceBytes; ++i)
    s.nonce.b[i] = static_cast<uint8_t>(salt * 16 + i);
  for (size_t i = 0; i < sizeof s.seed; ++i)
    s.seed[i] = static_cast<uint8_t>(salt * 31 + i * 7 + 1);
  s.timeout_ms = 1000;
  return s;
}

void frames(Input& in) {
  uint8_t buf[256] = {};
  const size_t len = in.take(buf, sizeof buf);
  uint8_t key[kNonceBytes] = {1, 2, 3};
  FrameHeader h;
  if (len >= kFrameHeaderBytes && parse_frame_header(buf, &h) == Status::ok) {
    ResumeInfo ri;
    uint64_t counter;
    if (len >= kResumeFrameBytes)
      (void)parse_resume(key, Dir::c2s, h, buf + kFrameHeaderBytes, &ri);
    if (len >= kSwitchbackFrameBytes)
      (void)check_switchback(key, Dir::s2c, h, buf + kFrameHeaderBytes, &counter);
  }
  TcpTuple t;
  Nonce nc;
  NakCode nak;
  (void)parse_attach(buf, len, &t, &nc, &nak);
  if (parse_reattach_tuple(buf, len, &t, &nak) == Status::ok)
    (void)check_reattach(key, buf, len, 7, 1, ChannelBinding{});
  (void)check_reattach_ack(key, t, 7, 1, ChannelBinding{}, buf, len);
  // The rendezvous' rdma_cm private data.
  CmRequestWire req;
  (void)parse_cm_request(buf, len, &req);
  uint8_t chan[kChanNonceBytes];
  (void)parse_cm_accept(buf, len, &nc, chan);
  (void)parse_cm_reject(buf, len, true);
  MoveInfo mi;
  (void)parse_move(buf, len, &mi);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  UpgradeSession c(params(Role::client, 1)), s(params(Role::server, 2));
  const SessionParams cp = params(Role::client, 1), sp = params(Role::server, 2);
  if (in.byte() & 1) {
    Message a, r;
    c.start_attach(5, &a);
    if (s.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::ok)
      c.on_message(r.type, r.stream, r.seq, r.payload, r.len);
  } else {
    c.adopt(5, sp.nonce);
    s.adopt(5, cp.nonce);
  }
  uint8_t bytes[256];
  uint64_t now = 0;
  while (in.n > 0) {
    const uint8_t op = in.byte();
    UpgradeSession& me = op & 0x80 ? s : c;
    UpgradeSession& peer = op & 0x80 ? c : s;
    switch (op & 0x7f) {
    case 0: { // TCP bytes from me to peer; some may be still on the way
      const size_t k = in.take(bytes, in.byte());
      const size_t arrived = k - (in.byte() % (k + 1));
      me.on_tcp_sent(bytes, k);
      peer.on_tcp_received(bytes, arrived);
      break;
    }
    case 1: { // bulk, to reach the one-way form
      static uint8_t bulk[kOneWayBytes];
      me.on_tcp_sent(bulk, sizeof bulk);
      peer.on_tcp_received(bulk, sizeof bulk);
      break;
    }
    case 2: { // my next record to the peer, maybe mutated
      Message m;
      if (!me.pop_output(&m)) break;
      const uint8_t flip = in.byte();
      if (flip != 0 && m.len > 0) m.payload[flip % m.len] ^= in.byte();
      if (flip == 0xff) m.seq = in.u64();
      peer.on_message(m.type, m.stream, m.seq, m.payload, m.len);
      break;
    }
    case 3: { // my next record is lost
      Message m;
      me.pop_output(&m);
      break;
    }
    case 4: { // a record of the input's own to me
      const uint8_t type = in.byte() % 20;
      const uint32_t stream = in.byte() & 1 ? 5 : in.byte();
      const uint64_t seq = in.u64();
      uint8_t len = in.byte();
      len = static_cast<uint8_t>(in.take(bytes, len % (kMaxControlPayload + 1)));
      me.on_message(type, stream, seq, bytes, len);
      break;
    }
    case 5:
      me.try_switch_tx();
      break;
    case 6:
      now += in.byte() * 10;
      me.tick(now);
      break;
    case 7: { // an ATTACH to the server
      uint8_t len = static_cast<uint8_t>(in.take(bytes, in.byte() % (kAttachBytes + 2)));
      Message r;
      s.on_attach(in.byte(), 0, bytes, len, &r);
      break;
    }
    default:
      frames(in);
      break;
    }
    uint8_t key[kNonceBytes];
    me.session_key(key);
    (void)me.rx_tcp_remaining();
    (void)me.coverage_short();
  }
  return 0;
}
