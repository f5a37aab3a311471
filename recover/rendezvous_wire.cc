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

bool parse_cm_accept(const void* p, size_t len, Nonce* nonce_s) {
  CmAcceptWire a;
  if (p == nullptr || len < sizeof a) return false;
  memcpy(&a, p, sizeof a);
  if (a.kind != kCmAccept || a.version != kRendezvousVersion) return false;
  memcpy(nonce_s->b, a.nonce, kNonceBytes);
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
