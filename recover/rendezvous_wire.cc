#include "recover/rendezvous_wire.h"

#include <arpa/inet.h>
#include <cstring>

namespace xp::recover {

Status parse_cm_request(const void* p, size_t len, CmRequestWire* out) {
  if (p == nullptr || len != sizeof(CmRequestWire)) return Status::invalid;
  CmRequestWire w;
  memcpy(&w, p, sizeof w);
  if ((w.kind != kCmRequest && w.kind != kCmReattach) || w.version != kRendezvousVersion)
    return Status::invalid;
  *out = w;
  return Status::ok;
}

Status request_tuple(const CmRequestWire& w, const sockaddr* peer, const sockaddr* local,
                     TcpTuple* out) {
  const IpAddr from = ip_addr(peer);
  TcpTuple t;
  t.client_port = static_cast<uint16_t>(w.key[8] << 8 | w.key[9]);
  t.server_port = static_cast<uint16_t>(w.key[10] << 8 | w.key[11]);
  if (from.family == 4) {
    t.family = 4;
    memcpy(t.client_addr, w.key, 4);
    memcpy(t.server_addr, w.key + 4, 4);
    if (!(client_addr(t) == from)) return Status::invalid;
  } else if (from.family == 6) {
    const IpAddr to = ip_addr(local);
    if (to.family != 6) return Status::invalid;
    t.family = 6;
    memcpy(t.client_addr, from.b, 16);
    memcpy(t.server_addr, to.b, 16);
    uint8_t k[12];
    tuple_key(t, k);
    if (memcmp(k, w.key, sizeof k) != 0) return Status::invalid;
  } else {
    return Status::invalid;
  }
  *out = t;
  return Status::ok;
}

bool parse_cm_accept(const void* p, size_t len, Nonce* nonce_s, uint8_t chan[kChanNonceBytes]) {
  CmAcceptWire a;
  if (p == nullptr || len < sizeof a) return false;
  memcpy(&a, p, sizeof a);
  if (a.kind != kCmAccept || a.version != kRendezvousVersion) return false;
  memcpy(nonce_s->b, a.nonce, kNonceBytes);
  memcpy(chan, a.chan, kChanNonceBytes);
  return true;
}

CmReject parse_cm_reject(const void* p, size_t len, bool consumer) {
  CmReject r;
  CmRejectWire w;
  if (!consumer || p == nullptr || len < sizeof w) return r;
  memcpy(&w, p, sizeof w);
  r.code = w.code;
  r.port = ntohs(w.port);
  return r;
}

} // namespace xp::recover
