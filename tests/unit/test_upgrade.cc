// The upgrade state machine over a fake transport: a client and a server
// session wired to each other in memory (docs/protocol.md §1-3).  Happy
// paths, each direction on its own, forged and wrong proofs, malformed and
// late records, timeouts, and a fuzz loop that must never crash.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "recover/upgrade.h"
#include "session_params.h"

using namespace xp;
using namespace xp::recover;
using namespace xp::recover::test;

namespace {

TcpTuple tuple4(uint16_t port = 40000) {
  return tuple(AF_INET, "10.0.0.1", port, "10.0.0.2", 80);
}
TcpTuple tuple6() {
  return tuple(AF_INET6, "fd00::1", 40001, "fd00::2", 443);
}

// Exchanges of at least kCoverBytes (64) each way: what a proof covers.
const std::string kReq =
    "GET / HTTP/1.1\r\nHost: example.org\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n";
const std::string kResp =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: t\r\nDate: today\r\n\r\nhello";

uint64_t code(NakCode c) {
  return static_cast<uint64_t>(c);
}

// Two ends of one TCP connection and the channel between them.
struct Pair {
  UpgradeSession c, s;
  std::vector<Message> c_sent, s_sent; // every record each end produced
  explicit Pair(const TcpTuple& t = tuple4(), const TcpTuple& server_t = tuple4())
      : c(params(Role::client, t, 1)), s(params(Role::server, server_t, 2)) {}

  // Client -> server bytes, of which the first `arrived` reached the server.
  void c2s(const std::string& b, size_t arrived = SIZE_MAX) {
    c.on_tcp_sent(b.data(), b.size());
    s.on_tcp_received(b.data(), arrived < b.size() ? arrived : b.size());
  }
  void s2c(const std::string& b) {
    s.on_tcp_sent(b.data(), b.size());
    c.on_tcp_received(b.data(), b.size());
  }
  // Drain both outboxes into the other end until nothing moves.
  void pump() {
    Message m;
    for (bool moved = true; moved;) {
      moved = false;
      for (; c.pop_output(&m); moved = true)
        c_sent.push_back(m), deliver(s, m);
      for (; s.pop_output(&m); moved = true)
        s_sent.push_back(m), deliver(c, m);
    }
  }
  void attach(uint32_t id = 5) {
    Message a, r;
    REQUIRE(c.start_attach(id, &a) == Status::ok);
    REQUIRE(c.state() == State::attaching);
    REQUIRE(s.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::ok);
    REQUIRE(r.type == msg::attach_ack);
    REQUIRE(deliver(c, r) == Status::ok); // the reply goes before the server's outbox
    pump();
    REQUIRE((c.state() == State::bound && s.state() == State::bound));
  }
};

} // namespace

TEST_CASE("upgrade: happy path, bytes on TCP first, both directions switch at the bytes sent") {
  Pair p;
  p.attach();
  // Nothing crossed yet: no proofs, no switch, and an idle connection never times out.
  for (uint64_t t = 0; t < 10000; t += 500)
    p.s.tick(t), p.c.tick(t);
  p.pump();
  CHECK((p.c_sent.empty() && p.s_sent.empty()));
  CHECK(p.c.try_switch_tx() == Status::would_block);
  CHECK(p.s.try_switch_tx() == Status::would_block);

  p.c2s(kReq);
  p.pump(); // a request alone covers one direction: nobody proves yet
  CHECK((p.c_sent.empty() && p.s_sent.empty()));
  p.s2c(kResp);
  p.pump(); // both ends proved
  CHECK((p.c.peer_proven() && p.s.peer_proven()));
  // The client opens the key exchange; the server answers with its share
  // and key confirmation; the client confirms (docs/protocol.md §2).
  CHECK((p.c_sent.size() == 2 && p.c_sent[0].type == msg::share && p.c_sent[1].type == msg::proof));
  CHECK((p.s_sent.size() == 2 && p.s_sent[0].type == msg::share && p.s_sent[1].type == msg::proof));
  REQUIRE(p.c.try_switch_tx() == Status::ok);
  CHECK((p.c.tx_mode() == Mode::rdma && p.c.tx_offset() == kReq.size()));
  p.pump();
  CHECK((p.s.rx_mode() == Mode::rdma && p.s.rx_offset() == kReq.size() &&
         p.s.rx_tcp_remaining() == 0));

  p.s2c("more");
  REQUIRE(p.s.try_switch_tx() == Status::ok);
  p.pump();
  CHECK(p.c.rx_mode() == Mode::rdma);
  CHECK(p.c.rx_offset() == p.s.tcp_sent());
  CHECK(p.s.tx_offset() == p.s.tcp_sent());
  CHECK((p.c.state() == State::bound && p.s.state() == State::bound));
  CHECK(p.c.fallback_reason() == Reason::none);
  CHECK(p.c.try_switch_tx() == Status::invalid); // once per direction
}

TEST_CASE("upgrade: the receiver reads exactly S bytes from TCP when the channel is faster") {
  Pair p;
  p.attach();
  std::string req(200, 'x');
  for (size_t i = 0; i < req.size(); ++i)
    req[i] = static_cast<char>(i * 13);
  p.c2s(req, 64); // only 64 of 200 bytes reached the server so far: enough to prove
  p.s2c(kResp);
  p.pump();
  REQUIRE(p.c.try_switch_tx() == Status::ok);
  p.pump();
  CHECK((p.s.rx_mode() == Mode::rdma && p.s.rx_tcp_remaining() == 136));
  p.s.on_tcp_received(req.data() + 64, 100);
  CHECK((p.s.rx_mode() == Mode::rdma && p.s.rx_tcp_remaining() == 36));
  p.s.on_tcp_received(req.data() + 164, 36);
  CHECK((p.s.rx_tcp_remaining() == 0 && p.s.state() == State::bound));
}

TEST_CASE("upgrade: the directions switch independently, either first, S may be 0") {
  SUBCASE("only the client talks; the server switches its silent direction at 0") {
    Pair p;
    p.attach(9);
    const std::string up(kOneWayBytes, 'u'); // one way: 16 KiB cover
    p.c2s(up);
    p.pump();
    REQUIRE(p.s.try_switch_tx() == Status::ok);
    p.pump();
    CHECK(p.s.tx_offset() == 0);
    CHECK((p.c.rx_mode() == Mode::rdma && p.c.rx_tcp_remaining() == 0));
    CHECK(p.c.tx_mode() == Mode::tcp); // the client's own direction is untouched
    p.c2s("more bytes still on TCP");
    REQUIRE(p.c.try_switch_tx() == Status::ok);
    p.pump();
    CHECK((p.s.rx_offset() == up.size() + 23 && p.c.tx_offset() == up.size() + 23));
  }
  SUBCASE("the server switches first, the client never does") {
    Pair p;
    p.attach();
    p.s2c(kResp);
    p.c2s(kReq);
    p.pump();
    REQUIRE(p.s.try_switch_tx() == Status::ok);
    p.pump();
    CHECK((p.c.rx_mode() == Mode::rdma && p.c.rx_offset() == kResp.size()));
    CHECK((p.s.rx_mode() == Mode::tcp && p.c.state() == State::bound));
  }
  SUBCASE("a direction switches only after the peer's proof verified") {
    // The client's SHARE covers its request; the server answers only once
    // it read those bytes, so nobody is proven before that.
    Pair p;
    p.attach();
    p.s2c(kResp);
    p.c2s(kReq, 0);
    p.pump();
    CHECK(!p.c.peer_proven());
    CHECK(p.c.try_switch_tx() == Status::would_block);
    CHECK(p.s.try_switch_tx() == Status::would_block); // the client's share is pending here
    p.s.on_tcp_received(kReq.data(), kReq.size());
    CHECK(!p.s.peer_proven());
    p.pump();
    CHECK((p.c.peer_proven() && p.s.peer_proven()));
    CHECK(p.c.try_switch_tx() == Status::ok);
  }
}

TEST_CASE("upgrade: NAKs for the attach") {
  SUBCASE("4-tuple not held by the server session: unknown_stream, the client is refused") {
    Pair p(tuple4(40000), tuple4(40002));
    p.c2s(kReq);
    p.s2c(kResp);
    Message a, r, m;
    REQUIRE(p.c.start_attach(3, &a) == Status::ok);
    CHECK(p.s.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::invalid);
    CHECK((r.type == msg::attach_nak && r.seq == code(NakCode::unknown_stream)));
    CHECK(p.s.state() == State::failed);
    CHECK(deliver(p.c, r) == Status::ok);
    CHECK(p.c.state() == State::refused);
    CHECK(p.c.fallback_reason() == Reason::peer_not_accelerated);
    CHECK(p.c.tx_mode() == Mode::tcp);
    // The client may go through UPGRADE_REQ and bind by adoption, keeping
    // what it saw on TCP (a caller that gives up calls fail() instead).
    UpgradeSession s2(params(Role::server, tuple4(40000), 7));
    s2.on_tcp_received(kReq.data(), kReq.size());
    s2.on_tcp_sent(kResp.data(), kResp.size());
    REQUIRE(p.c.adopt(11, params(Role::server, tuple4(), 7).nonce) == Status::ok);
    REQUIRE(s2.adopt(11, params(Role::client, tuple4(), 1).nonce) == Status::ok);
    for (bool moved = true; moved;) {
      moved = false;
      for (; p.c.pop_output(&m); moved = true)
        CHECK(deliver(s2, m) == Status::ok);
      for (; s2.pop_output(&m); moved = true)
        CHECK(deliver(p.c, m) == Status::ok);
    }
    CHECK((p.c.peer_proven() && s2.peer_proven()));
  }
  SUBCASE("busy from the stream layer, then the same client attaches elsewhere") {
    Pair p;
    Message a;
    REQUIRE(p.c.start_attach(3, &a) == Status::ok);
    CHECK(deliver(p.c, make_nak(3, NakCode::busy)) == Status::ok);
    CHECK(p.c.state() == State::refused);
    CHECK(p.c.fallback_reason() == Reason::resources_exhausted);
    p.attach(4);
    CHECK(p.c.stream_id() == 4);
  }
  SUBCASE("a second attach to a bound server is refused and changes nothing") {
    Pair p;
    p.attach();
    UpgradeSession other(params(Role::client, tuple4(), 9));
    Message a, r;
    REQUIRE(other.start_attach(6, &a) == Status::ok);
    CHECK(p.s.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::invalid);
    CHECK(r.seq == code(NakCode::busy));
    CHECK((p.s.state() == State::bound && p.s.stream_id() == 5));
  }
  SUBCASE("version: final") {
    Pair p;
    Message a, r;
    REQUIRE(p.c.start_attach(3, &a) == Status::ok);
    a.payload[0] = kProtocolVersion + 1;
    CHECK(p.s.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::invalid);
    CHECK(r.seq == code(NakCode::version));
    deliver(p.c, r);
    CHECK((p.c.state() == State::failed && p.c.fallback_reason() == Reason::handshake_failed));
    CHECK(p.c.start_attach(4, &a) == Status::unsupported);
  }
}

TEST_CASE("upgrade: a forged attach never makes the server send or accept RDMA bytes") {
  // The victim's connection carried bytes the forger never saw.
  UpgradeSession victim(params(Role::server, tuple4(), 2));
  const std::string secret_req = kReq + "secret", secret_resp = kResp + "secret";
  std::string guess_req = secret_req, guess_resp = secret_resp; // same lengths, one byte off
  guess_req[40] ^= 1;
  victim.on_tcp_received(secret_req.data(), secret_req.size());
  victim.on_tcp_sent(secret_resp.data(), secret_resp.size());
  UpgradeSession forger(params(Role::client, tuple4(), 6));
  forger.on_tcp_sent(guess_req.data(), guess_req.size());
  forger.on_tcp_received(guess_resp.data(), guess_resp.size());
  Message a, r, m;
  REQUIRE(forger.start_attach(1, &a) == Status::ok);
  REQUIRE(victim.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::ok);
  deliver(forger, r);
  CHECK(victim.try_switch_tx() == Status::would_block); // bound, but nobody proved anything
  REQUIRE(forger.pop_output(&m));
  REQUIRE(m.type == msg::share);
  CHECK(deliver(victim, m) == Status::ok); // the victim answers: the forger's one guess
  CHECK(victim.try_switch_tx() == Status::would_block);
  for (bool moved = true; moved;) {
    moved = false;
    for (; victim.pop_output(&m); moved = true)
      deliver(forger, m);
    for (; forger.pop_output(&m); moved = true)
      deliver(victim, m);
  }
  CHECK_FALSE(forger.peer_proven());
  CHECK((victim.state() == State::failed && victim.fallback_reason() == Reason::handshake_failed));
  CHECK(victim.try_switch_tx() == Status::unsupported);
  CHECK(victim.rx_mode() == Mode::tcp);
  // The legitimate client arriving later is told; nothing was bound for it.
  UpgradeSession client(params(Role::client, tuple4(), 1));
  REQUIRE(client.start_attach(2, &a) == Status::ok);
  CHECK(victim.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::closed);
  CHECK(r.type == msg::attach_nak);
}

TEST_CASE("upgrade: the two ends saw one different byte among the first 64: both fall back") {
  for (size_t at : {size_t{0}, size_t{31}, size_t{63}}) {
    CAPTURE(at);
    Pair p;
    p.attach();
    std::string sent(100, 'a'), got(100, 'a');
    got[at] = 'b';
    p.c.on_tcp_sent(sent.data(), sent.size());
    p.s.on_tcp_received(got.data(), got.size());
    p.s2c(kResp);
    p.pump();
    CHECK((p.s.state() == State::failed && p.c.state() == State::failed)); // c: by the NAK
    CHECK((p.s.fallback_reason() == Reason::handshake_failed &&
           p.c.fallback_reason() == Reason::handshake_failed));
    CHECK(p.c.try_switch_tx() == Status::unsupported);
    CHECK(!p.c.needs_resume());
  }
}

TEST_CASE("upgrade: any flipped bit of a SWITCH is caught by its receiver") {
  for (size_t bit = 0; bit < kProofBytes * 8; bit += 5) {
    CAPTURE(bit);
    Pair q;
    q.attach();
    q.c2s(kReq);
    q.s2c(kResp);
    q.pump();
    REQUIRE(q.c.try_switch_tx() == Status::ok);
    Message sw;
    REQUIRE(q.c.pop_output(&sw));
    REQUIRE(sw.type == msg::switch_);
    sw.payload[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    CHECK(deliver(q.s, sw) == Status::invalid);
    CHECK(q.s.rx_mode() == Mode::tcp);
    q.pump();
    CHECK(q.c.state() == State::failed);
    CHECK(q.c.needs_resume()); // its direction already left TCP at S
  }
}

TEST_CASE("upgrade: malformed ATTACH payloads are refused") {
  UpgradeSession c(params(Role::client, tuple4(), 1));
  Message good;
  REQUIRE(c.start_attach(1, &good) == Status::ok);
  auto refused = [](const uint8_t* pl, size_t len, uint64_t seq = 0) {
    UpgradeSession s(params(Role::server, tuple4(), 2));
    Message r;
    const bool ok = s.on_attach(1, seq, pl, len, &r) == Status::invalid &&
                    r.type == msg::attach_nak && s.state() == State::failed;
    return ok;
  };
  uint8_t b[kMaxControlPayload + 1] = {};
  memcpy(b, good.payload, kAttachBytes);
  CHECK(refused(b, kAttachBytes - 1));
  CHECK(refused(b, kAttachBytes + 1));
  CHECK(refused(b, sizeof b));
  CHECK(refused(nullptr, 0));
  CHECK(refused(b, kAttachBytes, 1));          // seq must be 0
  for (size_t i : {1, 2, 3, 12, 20, 28, 39}) { // family, reserved, IPv4 padding
    CAPTURE(i);
    b[i] ^= 0x40;
    CHECK(refused(b, kAttachBytes));
    b[i] ^= 0x40;
  }
  // IPv4-mapped IPv6 addresses must travel as IPv4.
  const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  b[1] = 6;
  memcpy(b + 8, mapped, 16);
  CHECK(refused(b, kAttachBytes));
}

TEST_CASE("upgrade: malformed, duplicate, late and misdirected control records") {
  // One bound pair (both proven), copied for each case.
  Pair base;
  base.attach();
  base.c2s(kReq);
  base.s2c(kResp);
  base.pump();
  REQUIRE(base.c.peer_proven());
  const Message proof = base.c_sent.back();
  REQUIRE(proof.type == msg::proof);
  Pair sw = base; // the client switched; its SWITCH is not delivered yet
  REQUIRE(sw.c.try_switch_tx() == Status::ok);
  Message swm;
  REQUIRE(sw.c.pop_output(&swm));
  uint8_t junk[kMaxControlPayload + 8] = {};
  auto rejects = [](UpgradeSession& at, uint8_t type, uint32_t stream, size_t len,
                    const uint8_t* pl) {
    CAPTURE(int(type));
    CAPTURE(len);
    CHECK(at.on_message(type, stream, 0, pl, len) == Status::invalid);
    CHECK(at.state() == State::failed);
    CHECK(at.on_message(msg::keepalive, stream, 0, nullptr, 0) == Status::closed);
  };
  // Wrong lengths, unknown types, ATTACH on the channel, an ACK when bound.
  const size_t bad[][2] = {{msg::attach_ack, 15},
                           {msg::attach_ack, 16},
                           {msg::attach_ack, 17},
                           {msg::proof, 31},
                           {msg::proof, 33},
                           {msg::switch_, 0},
                           {msg::attach_nak, 1},
                           {msg::keepalive, 4},
                           {msg::switch_, 129},
                           {0, 0},
                           {1, 0},
                           {12, 0},
                           {255, 0},
                           {msg::attach, kAttachBytes}};
  for (const auto& k : bad) {
    Pair p = base;
    rejects(p.s, static_cast<uint8_t>(k[0]), 5, k[1], junk);
  }
  Pair p1 = base, p2 = base, p3 = base;
  rejects(p1.c, msg::keepalive, 6, 0, nullptr); // another stream id
  rejects(p2.c, msg::keepalive, 5, 3, nullptr); // a length without a payload
  CHECK(p3.c.on_message(msg::keepalive, 5, 0, nullptr, 0) == Status::ok);

  SUBCASE("duplicate PROOF") {
    rejects(base.s, msg::proof, 5, kProofBytes, proof.payload);
  }
  SUBCASE("duplicate SWITCH; the receiver must resume its switched direction") {
    REQUIRE(deliver(sw.s, swm) == Status::ok);
    CHECK(deliver(sw.s, swm) == Status::invalid);
    CHECK(sw.s.needs_resume());
  }
  SUBCASE("SWITCH with S below the bytes already received") {
    sw.s.on_tcp_received("!", 1);
    CHECK(deliver(sw.s, swm) == Status::invalid);
  }
  SUBCASE("TCP bytes past S, and a TCP write after our own switch") {
    Pair q = sw;
    REQUIRE(deliver(sw.s, swm) == Status::ok);
    REQUIRE(sw.s.rx_mode() == Mode::rdma);
    sw.s.on_tcp_received("!", 1);
    CHECK(sw.s.state() == State::failed);
    q.c.on_tcp_sent("late", 4); // a caller bug
    CHECK(q.c.state() == State::failed);
  }
  SUBCASE("records in the wrong state") {
    UpgradeSession s(params(Role::server, tuple4(), 2));
    rejects(s, msg::keepalive, 0, 0, nullptr); // idle: nothing is bound
    Pair p;
    Message a, nak;
    REQUIRE(p.c.start_attach(5, &a) == Status::ok);
    rejects(p.c, msg::proof, 5, kProofBytes, junk); // attaching
    REQUIRE(p.c.pop_output(&nak));                  // the peer is told
    CHECK((nak.type == msg::attach_nak && nak.seq == code(NakCode::failed)));
    CHECK(!p.c.pop_output(&nak));
  }
}

TEST_CASE("upgrade: deadlines") {
  SUBCASE("no answer to ATTACH: the server's program may not have accepted yet") {
    Pair p;
    Message a, nak;
    REQUIRE(p.c.start_attach(5, &a) == Status::ok);
    p.c.tick(100); // arms
    p.c.tick(5099);
    CHECK(p.c.state() == State::attaching);
    p.c.tick(5100);
    CHECK((p.c.state() == State::failed && p.c.fallback_reason() == Reason::handshake_timeout));
    REQUIRE(p.c.pop_output(&nak));
    CHECK(nak.seq == code(NakCode::timeout));
  }
  SUBCASE("the client's SHARE is lost: the server does not time out, the client does") {
    Pair p;
    p.attach();
    p.c2s(kReq);
    p.s2c(kResp);
    for (Message drop; p.c.pop_output(&drop);) {
    } // the client's SHARE is lost
    Message none;
    CHECK_FALSE(p.s.pop_output(&none)); // the server has nothing to send before it
    p.s.tick(0), p.c.tick(0);
    p.s.tick(999), p.c.tick(999);
    p.s.tick(100000), p.c.tick(4999);
    CHECK(p.s.state() == State::bound); // as if the client had not read our reply yet
    CHECK(p.s.untimed());
    CHECK(p.c.state() == State::bound);
    p.c.tick(5000); // the server's program may read late, not never
    CHECK((p.c.state() == State::failed && p.c.fallback_reason() == Reason::handshake_timeout));
    p.pump();
    CHECK((p.s.state() == State::failed && p.s.fallback_reason() == Reason::handshake_timeout));
  }
  SUBCASE("a client that reads late still binds") {
    // The server echoed long before the client's program read it (a burst
    // of connects under load): its opening SHARE comes late, and binds.
    Pair p;
    p.attach();
    p.c2s(kReq);
    p.s.on_tcp_sent(kResp.data(), kResp.size());
    for (uint64_t t = 0; t <= 60000; t += 1000)
      p.s.tick(t), p.c.tick(t);
    p.c.on_tcp_received(kResp.data(), kResp.size());
    p.pump();
    CHECK((p.c.peer_proven() && p.s.peer_proven()));
  }
  SUBCASE("the peer sent its SHARE but never proves; the NAK carries the reason over") {
    Pair p;
    p.attach();
    p.c2s(kReq);
    p.s2c(kResp);
    Message m;
    REQUIRE(p.c.pop_output(&m)); // the client's SHARE arrives
    REQUIRE(deliver(p.s, m) == Status::ok);
    for (Message drop; p.s.pop_output(&drop);) {
    } // the server's SHARE and PROOF are lost: it proved, and waits for the client
    p.s.tick(0);
    p.s.tick(999);
    CHECK(p.s.state() == State::bound);
    p.s.tick(1000);
    CHECK(p.s.state() == State::failed);
    p.pump();
    CHECK((p.c.state() == State::failed && p.c.fallback_reason() == Reason::handshake_timeout));
  }
}

TEST_CASE("upgrade: IPv6 connection, and v4-mapped addresses name the IPv4 tuple") {
  Pair p(tuple6(), tuple6());
  p.attach();
  p.s2c(kResp);
  p.c2s(kReq);
  p.pump();
  REQUIRE(p.c.try_switch_tx() == Status::ok);
  REQUIRE(p.s.try_switch_tx() == Status::ok);
  p.pump();
  CHECK((p.c.rx_mode() == Mode::rdma && p.s.rx_mode() == Mode::rdma));
  CHECK(tuple(AF_INET6, "::ffff:10.0.0.1", 40000, "::ffff:10.0.0.2", 80) == tuple4());
  CHECK(!(tuple6() == tuple4()));
}

TEST_CASE("upgrade: random and mutated records and TCP bytes never crash a session") {
  std::mt19937_64 rng(12345);
  const uint8_t types[] = {0, 1, 5, 6, 7, 8, 9, 10, 11, 12, 200};
  const size_t lens[] = {0, 1, 15, 16, 17, 31, 32, 33, 55, 56, 57, 128, 129};
  uint64_t failed = 0, survived = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    Pair p;
    // Start from a random point of a real handshake, so deep states are reached.
    const int depth = static_cast<int>(rng() % 4);
    if (depth >= 1) p.attach(5);
    if (depth >= 2) p.c2s(kReq), p.s2c(kResp), p.pump();
    if (depth >= 3) p.c.try_switch_tx(), p.pump();
    const bool at_client = rng() % 2;
    UpgradeSession& target = at_client ? p.c : p.s;
    const std::vector<Message>& genuine = at_client ? p.s_sent : p.c_sent;
    uint64_t now = 0;
    for (int step = 0; step < 24; ++step) {
      uint8_t payload[kMaxControlPayload + 8];
      for (uint8_t& b : payload)
        b = static_cast<uint8_t>(rng());
      const size_t len = lens[rng() % (sizeof lens / sizeof lens[0])];
      const uint32_t stream = rng() % 4 ? 5 : static_cast<uint32_t>(rng());
      const uint64_t seq = rng() % 3 ? rng() % 64 : rng();
      Message m;
      switch (rng() % 7) {
      case 0:
        target.on_message(types[rng() % sizeof types], stream, seq, rng() % 16 ? payload : nullptr,
                          len);
        break;
      case 1: // a record the peer really sent: replayed, or with one byte changed
        if (genuine.empty()) break;
        m = genuine[rng() % genuine.size()];
        if (rng() % 2) m.payload[rng() % sizeof m.payload] ^= static_cast<uint8_t>(1 + rng() % 255);
        if (rng() % 4 == 0) m.seq += 1;
        deliver(target, m);
        break;
      case 2:
        target.on_attach(stream, seq, payload, len, &m);
        break;
      case 3:
        target.on_tcp_sent(payload, len % 8);
        break;
      case 4:
        target.on_tcp_received(payload, len % 8);
        break;
      case 5:
        target.try_switch_tx();
        break;
      default:
        target.tick(now += rng() % 700);
      }
      p.pump();
      // Random bytes never forge a switch: a direction is on RDMA at the
      // receiver only where the real sender switched, at the same offset.
      if (p.s.rx_mode() == Mode::rdma)
        CHECK((p.c.tx_mode() == Mode::rdma && p.c.tx_offset() == p.s.rx_offset()));
      if (p.c.rx_mode() == Mode::rdma)
        CHECK((p.s.tx_mode() == Mode::rdma && p.s.tx_offset() == p.c.rx_offset()));
      if (target.state() == State::failed) {
        CHECK(target.fallback_reason() != Reason::none);
        CHECK(target.on_message(msg::keepalive, 5, 0, nullptr, 0) == Status::closed);
      }
    }
    failed += p.c.state() == State::failed || p.s.state() == State::failed;
    survived += p.c.state() == State::bound && p.s.state() == State::bound;
  }
  // Nearly every random record is a violation; a few sessions survive.
  CHECK(failed > 3000);
  CHECK(survived > 0);
}
