// A fork child that holds an accepted connection alone upgrades it itself
// (docs/protocol.md §7 "A fork child that holds an accepted connection",
// stream/fork_handover.h): the session side.  The parent's session hands
// the upgrade over with a NAK moved; the client starts over once (a second
// rendezvous, with the child); the child's session restarts under new
// secrets and binds with the bytes that crossed before and after the fork.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

#include "recover/upgrade.h"
#include "session_params.h"

using namespace xp;
using namespace xp::recover;
using namespace xp::recover::test;

namespace {

TcpTuple tuple4() {
  return tuple(AF_INET, "10.0.0.1", 40000, "10.0.0.2", 5432);
}

SessionParams params(Role r, uint8_t seed) {
  return test::params(r, tuple4(), seed);
}

void pump(UpgradeSession& c, UpgradeSession& s) {
  Message m;
  for (bool moved = true; moved;) {
    moved = false;
    for (; c.pop_output(&m); moved = true)
      deliver(s, m);
    for (; s.pop_output(&m); moved = true)
      deliver(c, m);
  }
}

// Exchanges of at least 64 bytes each way: what a proof covers.
const std::string kStartup(80, 's');
const std::string kAuth(300, 'a');

} // namespace

TEST_CASE("fork hand-over: the parent's NAK moved, the client starts over with the child") {
  UpgradeSession c(params(Role::client, 1));
  UpgradeSession parent(params(Role::server, 2));
  // The postmaster's rendezvous bound the stream (rdma_cm: adopt), then the
  // client sent its startup packet before the fork; the parent read nothing.
  REQUIRE(c.adopt(0, params(Role::server, 2).nonce) == Status::ok);
  REQUIRE(parent.adopt(0, params(Role::client, 1).nonce) == Status::ok);
  c.on_tcp_sent(kStartup.data(), kStartup.size());
  UpgradeSession child = parent; // the fork
  REQUIRE(parent.can_hand_over());
  Message nak;
  REQUIRE(parent.hand_over(&nak));
  CHECK(parent.state() == State::failed);
  CHECK(parent.fallback_reason() == Reason::shared_by_fork);
  CHECK((nak.type == msg::attach_nak && nak.seq == static_cast<uint64_t>(NakCode::moved)));
  REQUIRE(deliver(c, nak) == Status::ok);
  CHECK(c.state() == State::refused);
  CHECK(c.take_moved());
  CHECK_FALSE(c.take_moved()); // once

  // The child restarts under new secrets, reads the startup packet, answers.
  SessionParams fresh = params(Role::server, 7);
  REQUIRE(child.can_hand_over());
  child.restart(fresh.nonce, fresh.seed);
  CHECK(child.state() == State::idle);
  child.on_tcp_received(kStartup.data(), kStartup.size());
  // The second rendezvous, with the child's nonce this time.
  REQUIRE(c.adopt(3, fresh.nonce) == Status::ok);
  REQUIRE(child.adopt(3, params(Role::client, 1).nonce) == Status::ok);
  child.on_tcp_sent(kAuth.data(), kAuth.size());
  c.on_tcp_received(kAuth.data(), kAuth.size());
  pump(c, child);
  CHECK((c.peer_proven() && child.peer_proven()));
  CHECK(c.try_switch_tx() == Status::ok);
  CHECK(child.try_switch_tx() == Status::ok);
  CHECK(child.tx_offset() == kAuth.size());
}

TEST_CASE("fork hand-over: only before any share crossed, and only once") {
  SUBCASE("a second NAK moved fails the upgrade") {
    UpgradeSession c(params(Role::client, 1));
    REQUIRE(c.adopt(0, params(Role::server, 2).nonce) == Status::ok);
    REQUIRE(deliver(c, make_nak(0, NakCode::moved)) == Status::ok);
    REQUIRE(c.take_moved());
    REQUIRE(c.adopt(4, params(Role::server, 3).nonce) == Status::ok);
    REQUIRE(deliver(c, make_nak(4, NakCode::moved)) == Status::ok);
    CHECK(c.state() == State::failed);
    CHECK_FALSE(c.take_moved());
  }
  SUBCASE("a client whose SHARE left does not start over") {
    UpgradeSession c(params(Role::client, 1));
    UpgradeSession s(params(Role::server, 2));
    REQUIRE(c.adopt(0, params(Role::server, 2).nonce) == Status::ok);
    REQUIRE(s.adopt(0, params(Role::client, 1).nonce) == Status::ok);
    c.on_tcp_sent(kStartup.data(), kStartup.size());
    s.on_tcp_received(kStartup.data(), kStartup.size());
    s.on_tcp_sent(kAuth.data(), kAuth.size());
    c.on_tcp_received(kAuth.data(), kAuth.size()); // the client's share leaves
    Message m;
    REQUIRE(c.pop_output(&m));
    REQUIRE(m.type == msg::share);
    REQUIRE(deliver(s, m) == Status::ok); // the server holds it: no hand-over
    CHECK_FALSE(s.can_hand_over());
    REQUIRE(deliver(c, make_nak(0, NakCode::moved)) == Status::ok);
    CHECK(c.state() == State::failed);
    CHECK(c.fallback_reason() == Reason::shared_by_fork);
    CHECK_FALSE(c.take_moved());
  }
  SUBCASE("a server that answered a share, or a client session, hands nothing over") {
    UpgradeSession c(params(Role::client, 1));
    CHECK_FALSE(c.can_hand_over());
    UpgradeSession s(params(Role::server, 2));
    CHECK(s.can_hand_over()); // idle: nobody knows the stream yet
    Message nak;
    CHECK_FALSE(s.hand_over(&nak)); // nothing to tell anyone
    CHECK(s.state() == State::failed);
    CHECK_FALSE(s.can_hand_over());
  }
  SUBCASE("a NAK moved for an idle client is a protocol error") {
    UpgradeSession c(params(Role::client, 1));
    CHECK(deliver(c, make_nak(0, NakCode::moved)) == Status::invalid);
    CHECK(c.state() == State::failed);
  }
}

TEST_CASE("fork hand-over: the NAK's reason for a client that knows no code 7") {
  CHECK(nak_reason(static_cast<uint64_t>(NakCode::moved)) == Reason::shared_by_fork);
}
