// What a binding proof covers is fixed by the protocol (docs/protocol.md
// §2): kCoverBytes of each direction, or of a one-way direction that
// carried kOneWayBytes; a prover cannot choose to prove less.  And no byte
// but a recovery frame may follow a switched direction's S on TCP (§7).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>

#include "recover/upgrade.h"
#include "resume_pair.h"

using namespace xp;
using namespace xp::recover;
using namespace xp::test;

namespace {

SessionParams sparams(Role r, uint8_t seed) {
  SessionParams p = rparams(r, seed);
  p.timeout_ms = 1000;
  return p;
}

Status deliver(UpgradeSession& to, const Message& m) {
  return to.on_message(m.type, m.stream, m.seq, m.payload, m.len);
}

// A client and a server session bound to each other (as after the ATTACH).
struct Two {
  UpgradeSession c{sparams(Role::client, 1)}, s{sparams(Role::server, 2)};
  Two() {
    Message a, r;
    REQUIRE(c.start_attach(5, &a) == Status::ok);
    REQUIRE(s.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::ok);
    REQUIRE(deliver(c, r) == Status::ok);
  }
  void c2s(const std::string& b) {
    c.on_tcp_sent(b.data(), b.size());
    s.on_tcp_received(b.data(), b.size());
  }
  void s2c(const std::string& b) {
    s.on_tcp_sent(b.data(), b.size());
    c.on_tcp_received(b.data(), b.size());
  }
  int pump() {
    int n = 0;
    Message m;
    for (bool moved = true; moved;) {
      moved = false;
      for (; c.pop_output(&m); moved = true, ++n)
        deliver(s, m);
      for (; s.pop_output(&m); moved = true, ++n)
        deliver(c, m);
    }
    return n;
  }
};

// A PROOF as a forger that knows both nonces (they crossed the channel)
// builds it: counts of its choice, the bytes it guesses.
Message forged_proof(const Nonce& nc, const Nonce& ns, uint64_t c2s, uint64_t s2c,
                     const std::string& guess_c2s, const std::string& guess_s2c) {
  ProofInput in;
  in.kind = kProofKindProof;
  in.dir = Dir::c2s;
  in.offset = 0;
  in.count[0] = c2s;
  in.count[1] = s2c;
  in.prefix[0] = reinterpret_cast<const uint8_t*>(guess_c2s.data());
  in.prefix[1] = reinterpret_cast<const uint8_t*>(guess_s2c.data());
  uint8_t tag[kTagBytes];
  proof_tag(nc, ns, in, tag);
  Message m;
  m.type = msg::proof;
  m.stream = 5;
  m.len = static_cast<uint8_t>(kProofBytes);
  encode_proof(tag, in.count, m.payload);
  return m;
}

const std::string kRequest =
    "GET /index.html HTTP/1.1\r\nHost: example\r\nUser-Agent: curl/7.88\r\n"
    "Accept: */*\r\n\r\n";
const std::string kReply = "HTTP/1.1 200 OK\r\nServer: x\r\nDate: secret date\r\nContent-Length: "
                           "4\r\n\r\nbody";

} // namespace

TEST_CASE("coverage: a proof over one predictable byte is refused (the forger's PROOF)") {
  // The server's connection carried a whole request and reply; the forger
  // (bound by a forged ATTACH naming this 4-tuple) knows only that HTTP
  // requests start with 'G'.
  const SessionParams fp = sparams(Role::client, 7), sp = sparams(Role::server, 2);
  UpgradeSession victim(sp);
  victim.on_tcp_received(kRequest.data(), kRequest.size());
  victim.on_tcp_sent(kReply.data(), kReply.size());
  UpgradeSession forger(fp);
  Message a, r;
  REQUIRE(forger.start_attach(5, &a) == Status::ok);
  REQUIRE(victim.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::ok);
  for (const auto& counts : {std::pair<uint64_t, uint64_t>{1, 0}, {0, 1}, {1, 1}, {63, 64}}) {
    CAPTURE(counts.first);
    CAPTURE(counts.second);
    UpgradeSession v = victim;
    const Message m =
        forged_proof(fp.nonce, sp.nonce, counts.first, counts.second, kRequest, kReply);
    CHECK(deliver(v, m) == Status::invalid);
    CHECK_FALSE(v.peer_proven());
    CHECK(v.state() == State::failed);
    CHECK(v.try_switch_tx() == Status::unsupported);
  }
}

TEST_CASE("coverage: fewer than 64 bytes each way: no proof, no switch, no timeout") {
  Two p;
  p.c2s(kRequest.substr(0, 63));
  p.s2c(std::string(500, 'b')); // a banner, however long, is not the client's bytes
  CHECK(p.pump() == 0);         // nobody proves
  CHECK(p.c.try_switch_tx() == Status::would_block);
  CHECK(p.s.try_switch_tx() == Status::would_block);
  CHECK(p.c.coverage_short());
  CHECK(p.s.coverage_short());
  for (uint64_t t = 0; t < 100000; t += 500)
    p.c.tick(t), p.s.tick(t);
  CHECK((p.c.state() == State::bound && p.s.state() == State::bound)); // it just waits
  p.c2s("x");                                                          // the 64th byte
  CHECK(p.pump() == 2);
  CHECK((p.c.peer_proven() && p.s.peer_proven()));
  CHECK_FALSE(p.c.coverage_short());
  REQUIRE(p.c.try_switch_tx() == Status::ok);
  REQUIRE(p.s.try_switch_tx() == Status::ok);
  p.pump();
  CHECK((p.c.rx_mode() == Mode::rdma && p.s.rx_mode() == Mode::rdma));
}

TEST_CASE("coverage: a one-way connection proves once 16 KiB went one way") {
  Two p;
  std::string chunk(4096, 'u');
  for (int i = 0; i < 3; ++i)
    p.c2s(chunk);
  p.c2s(chunk.substr(0, 4095));
  CHECK(p.pump() == 0); // one byte short of 16 KiB, nothing back
  p.c2s("!");
  CHECK(p.pump() == 2);
  REQUIRE(p.c.try_switch_tx() == Status::ok);
  p.pump();
  CHECK((p.s.rx_mode() == Mode::rdma && p.s.rx_offset() == 16384));
}

TEST_CASE("coverage: a one-way proof over a direction that did not carry 16 KiB") {
  // The server sent 100 bytes: a one-way proof over them is a lie.
  const SessionParams cp = sparams(Role::client, 1), sp = sparams(Role::server, 2);
  Two p;
  p.c2s(std::string(20, 'r'));
  p.s2c(std::string(100, 's'));
  Message m = forged_proof(cp.nonce, sp.nonce, 0, kCoverBytes, "", std::string(100, 's'));
  CHECK(deliver(p.s, m) == Status::invalid);
  CHECK_FALSE(p.s.peer_proven());
  // Over the direction the verifier receives: it waits for 16 KiB that an
  // honest prover would have sent first, and is never proven meanwhile.
  Two q;
  q.c2s(std::string(100, 'r'));
  m = forged_proof(cp.nonce, sp.nonce, kCoverBytes, 0, std::string(100, 'r'), "");
  CHECK(deliver(q.s, m) == Status::ok);
  CHECK_FALSE(q.s.peer_proven());
  CHECK(q.s.try_switch_tx() == Status::would_block);
}

TEST_CASE("coverage: bytes on TCP after the peer's switch that are no frame reset the stream") {
  // A forged SWITCH left the real client's later bytes on TCP beyond S:
  // they are not dropped silently, the stream is reset.
  RPair p;
  rdrive(p, 20000, 9, -1, [] {});
  settle_switches(p);
  REQUIRE(p.b.c->rx_rdma.load());
  for (int i = 0; i < 20; ++i)
    rtake(p.b, 65536, 0);
  const char plain[] = "plain application bytes";
  REQUIRE(::send(p.fds[0], plain, sizeof plain, MSG_NOSIGNAL) == (ssize_t)sizeof plain);
  for (int i = 0; i < 50 && !p.b.reset && !p.b.eof; ++i) {
    rtake(p.b, 65536, 0);
    engine_step(p);
  }
  CHECK(p.b.reset);
  CHECK(p.b.bad == 0);
}

TEST_CASE("coverage: a squatter on the server's rdma_cm port gets no byte and no hang") {
  // The squatter accepted the client's rdma_cm request (adopt) but does
  // not hold the TCP connection: it cannot prove, its SWITCH does not
  // verify, and the client's wait ends at the handshake timeout.
  const SessionParams cp = sparams(Role::client, 1), sq = sparams(Role::server, 9);
  UpgradeSession c(cp);
  REQUIRE(c.adopt(0, sq.nonce) == Status::ok);
  c.on_tcp_sent(kRequest.data(), kRequest.size());
  c.on_tcp_received(kReply.data(), kReply.size());
  Message m;
  REQUIRE(c.pop_output(&m)); // the client's PROOF: all the squatter gets
  CHECK(m.type == msg::proof);
  // A SWITCH built on guesses (the squatter saw neither direction).
  Message sw = forged_proof(cp.nonce, sq.nonce, kCoverBytes, kCoverBytes, std::string(64, 'G'),
                            std::string(64, 'H'));
  sw.type = msg::switch_;
  sw.stream = 0;
  sw.seq = kReply.size();
  UpgradeSession c2 = c;
  CHECK(deliver(c2, sw) == Status::invalid);
  CHECK(c2.rx_mode() == Mode::tcp);
  CHECK(c2.try_switch_tx() == Status::unsupported);
  // Silence: the client gives up at the timeout and stays on TCP.
  CHECK(c.try_switch_tx() == Status::would_block);
  c.tick(0);
  c.tick(999);
  CHECK(c.state() == State::bound);
  c.tick(1000);
  CHECK((c.state() == State::failed && c.fallback_reason() == Reason::handshake_timeout));
  CHECK((c.tx_mode() == Mode::tcp && c.rx_mode() == Mode::tcp && !c.needs_resume()));
}
