// The rendezvous' rdma_cm private data (recover/rendezvous_wire.h): only
// our request and accept parse; a reject's code and port only from the
// peer's consumer data.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cstring>

#include "recover/rendezvous_wire.h"

using namespace xp;
using namespace xp::recover;

TEST_CASE("rendezvous wire: requests, accepts and rejects") {
  CmRequestWire w{};
  w.kind = kCmRequest;
  w.version = kRendezvousVersion;
  w.sid = 7;
  CmRequestWire out{};
  CHECK(parse_cm_request(&w, sizeof w, &out) == Status::ok);
  CHECK(out.sid == 7);
  CHECK(parse_cm_request(&w, sizeof w - 1, &out) == Status::invalid);
  w.version = kRendezvousVersion - 1; // the tag binding's peers: refused
  CHECK(parse_cm_request(&w, sizeof w, &out) == Status::invalid);
  w.version = kRendezvousVersion;
  w.kind = kCmAccept;
  CHECK(parse_cm_request(&w, sizeof w, &out) == Status::invalid);

  CmAcceptWire a{};
  a.kind = kCmAccept;
  a.version = kRendezvousVersion;
  a.nonce[0] = 42;
  a.chan[11] = 7;
  Nonce n{};
  uint8_t chan[kChanNonceBytes] = {};
  CHECK(parse_cm_accept(&a, sizeof a, &n, chan));
  CHECK(n.b[0] == 42);
  CHECK(chan[11] == 7);
  // Version 3's accept (20 bytes, no channel nonce) is refused.
  CHECK_FALSE(parse_cm_accept(&a, sizeof a - kChanNonceBytes, &n, chan));
  CHECK_FALSE(parse_cm_accept(&a, sizeof a - 1, &n, chan));
  a.version = 3;
  CHECK_FALSE(parse_cm_accept(&a, sizeof a, &n, chan));
  a.version = kRendezvousVersion;
  a.kind = kCmRequest;
  CHECK_FALSE(parse_cm_accept(&a, sizeof a, &n, chan));

  CmRejectWire r{rej_redirect, 0, htons(8081)};
  CHECK(parse_cm_reject(&r, sizeof r, true).code == rej_redirect);
  CHECK(parse_cm_reject(&r, sizeof r, true).port == 8081);
  CHECK(parse_cm_reject(&r, sizeof r, false).code == 0); // rdma_cm's own reject
  CHECK(parse_cm_reject(&r, 2, true).code == 0);
}
