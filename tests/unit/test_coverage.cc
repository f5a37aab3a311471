// What a binding covers is fixed by the protocol (docs/protocol.md §2):
// kCoverBytes of each direction, or of a one-way direction that carried
// kOneWayBytes and all of the other; a prover cannot choose to prove less.
// The binding is a key exchange: a forger gets one online guess per
// attempt.  And no byte but a recovery frame may follow a switched
// direction's S on TCP (§7).
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

// Every record each end queued, to the other, until nothing moves.
int exchange(UpgradeSession& a, UpgradeSession& b) {
  int n = 0;
  Message m;
  for (bool moved = true; moved;) {
    moved = false;
    for (; a.pop_output(&m); moved = true, ++n)
      deliver(b, m);
    for (; b.pop_output(&m); moved = true, ++n)
      deliver(a, m);
  }
  return n;
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
  int pump() { return exchange(c, s); }
};

// A SHARE with the counts of the forger's choice (its point is a valid
// share: the counts are what is checked first).
Message forged_share(const SessionParams& fp, uint64_t c2s, uint64_t s2c) {
  UpgradeSession f(fp);
  REQUIRE(f.adopt(5, Nonce{}) == Status::ok);
  const std::string many(kOneWayBytes, 'x');
  f.on_tcp_sent(many.data(), many.size());
  f.on_tcp_received(many.data(), many.size());
  Message m;
  REQUIRE(f.pop_output(&m));
  REQUIRE(m.type == msg::share);
  const uint64_t count[2] = {c2s, s2c};
  uint64_t ignored[2];
  uint8_t point[kPointBytes];
  decode_share(m.payload, ignored, point);
  encode_share(count, point, m.payload);
  return m;
}

const std::string kRequest =
    "GET /index.html HTTP/1.1\r\nHost: example\r\nUser-Agent: curl/7.88\r\n"
    "Accept: */*\r\n\r\n";
const std::string kReply = "HTTP/1.1 200 OK\r\nServer: x\r\nDate: secret date\r\nContent-Length: "
                           "4\r\n\r\nbody";

} // namespace

// The victim: a server whose connection carried a whole request and reply,
// bound by a forged ATTACH that names its 4-tuple.
struct Victim {
  SessionParams fp = sparams(Role::client, 7), sp = sparams(Role::server, 2);
  UpgradeSession v{sp};
  Victim(const std::string& req, const std::string& reply) {
    v.on_tcp_received(req.data(), req.size());
    v.on_tcp_sent(reply.data(), reply.size());
    UpgradeSession forger(fp);
    Message a, r;
    REQUIRE(forger.start_attach(5, &a) == Status::ok);
    REQUIRE(v.on_attach(a.stream, a.seq, a.payload, a.len, &r) == Status::ok);
  }
};

TEST_CASE("coverage: a key exchange over one predictable byte is refused") {
  // The forger knows only that HTTP requests start with 'G': no count of
  // its choice below what crossed gets an answer.
  Victim base(kRequest, kReply);
  for (const auto& counts : {std::pair<uint64_t, uint64_t>{1, 0}, {0, 1}, {1, 1}, {63, 64}}) {
    CAPTURE(counts.first);
    CAPTURE(counts.second);
    UpgradeSession v = base.v;
    CHECK(deliver(v, forged_share(base.fp, counts.first, counts.second)) == Status::invalid);
    Message out;
    bool answered = false;
    while (v.pop_output(&out))
      answered = answered || out.type == msg::share || out.type == msg::proof;
    CHECK_FALSE(answered);
    CHECK(v.state() == State::failed);
    CHECK(v.try_switch_tx() == Status::unsupported);
  }
}

TEST_CASE("coverage: a one-way form over the server's predictable replies is refused") {
  // The hostile review's case: the server sent 16 KiB of replies that start
  // with a fixed header; the request that held the secret came first.  A
  // one-way form must cover every byte the other direction carried (here
  // the whole request, short of 64 bytes): (0, 64) is refused.
  const std::string secret_req = "AUTH hunter2-secret\r\n";
  std::string reply = "HTTP/1.1 200 OK\r\n" + std::string(kOneWayBytes, 'r');
  Victim base(secret_req, reply);
  UpgradeSession v = base.v;
  CHECK(deliver(v, forged_share(base.fp, 0, kCoverBytes)) == Status::invalid);
  CHECK(v.state() == State::failed);
  // The one-way form that covers the whole request is the protocol's form.
  UpgradeSession w = base.v;
  CHECK(deliver(w, forged_share(base.fp, secret_req.size(), kCoverBytes)) == Status::ok);
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
  CHECK(p.pump() == 4); // SHARE, SHARE and PROOF, PROOF
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
  CHECK(p.pump() == 4); // SHARE, SHARE and PROOF, PROOF
  REQUIRE(p.c.try_switch_tx() == Status::ok);
  p.pump();
  CHECK((p.s.rx_mode() == Mode::rdma && p.s.rx_offset() == 16384));
}

TEST_CASE("coverage: a one-way form over a direction that did not carry 16 KiB") {
  // The server sent 100 bytes: a one-way form over them is a lie.
  const SessionParams fp = sparams(Role::client, 7);
  Two p;
  p.c2s(std::string(20, 'r'));
  p.s2c(std::string(100, 's'));
  CHECK(deliver(p.s, forged_share(fp, 20, kCoverBytes)) == Status::invalid);
  CHECK_FALSE(p.s.peer_proven());
  // Over the direction the server receives: it waits for the 16 KiB an
  // honest client would have sent first, and answers nothing meanwhile.
  Two q;
  q.c2s(std::string(100, 'r'));
  CHECK(deliver(q.s, forged_share(fp, kCoverBytes, 0)) == Status::ok);
  Message out;
  CHECK_FALSE(q.s.pop_output(&out));
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

// A squatter on the server's rdma_cm port (it accepted the client's
// request, adopt) that does not hold the TCP connection: it answers the
// client's share with a guess of the bytes.
struct Squatter {
  SessionParams cp = sparams(Role::client, 1), sq = sparams(Role::server, 9);
  UpgradeSession c{cp}, s{sq};
  Message client_share;
  Squatter() {
    REQUIRE(c.adopt(0, sq.nonce) == Status::ok);
    REQUIRE(s.adopt(0, cp.nonce) == Status::ok);
    c.on_tcp_sent(kRequest.data(), kRequest.size());
    c.on_tcp_received(kReply.data(), kReply.size());
    REQUIRE(c.pop_output(&client_share)); // all the squatter gets unasked
    CHECK(client_share.type == msg::share);
    Message more;
    CHECK_FALSE(c.pop_output(&more)); // no tag before the peer's share
  }
  // The squatter's view of the connection: its guess.
  void guess(const std::string& req, const std::string& reply) {
    s.on_tcp_received(req.data(), req.size());
    s.on_tcp_sent(reply.data(), reply.size());
  }
};

TEST_CASE("coverage: a squatter gets one online guess, no offline oracle, no byte, no hang") {
  SUBCASE("a wrong guess: both fail, nothing switches") {
    Squatter q;
    q.guess("GET /index.html HTTP/1.1\r\nHost: example\r\nUser-Agent: curl/7.87" +
                std::string(20, '*'),
            kReply);
    REQUIRE(deliver(q.s, q.client_share) == Status::ok);
    exchange(q.c, q.s);
    CHECK((q.c.state() == State::failed && q.c.fallback_reason() == Reason::handshake_failed));
    CHECK_FALSE(q.c.peer_proven());
    CHECK_FALSE(q.s.peer_proven()); // the client's PROOF does not verify under its guess
    CHECK((q.c.tx_mode() == Mode::tcp && q.c.rx_mode() == Mode::tcp && !q.c.needs_resume()));
  }
  SUBCASE("the one right guess is a binding (what one attempt can win)") {
    Squatter q;
    q.guess(kRequest, kReply);
    REQUIRE(deliver(q.s, q.client_share) == Status::ok);
    exchange(q.c, q.s);
    CHECK((q.c.peer_proven() && q.s.peer_proven()));
  }
  SUBCASE("silence: the client gives up at the timeout and stays on TCP") {
    Squatter q;
    CHECK(q.c.try_switch_tx() == Status::would_block);
    q.c.tick(0);
    q.c.tick(999);
    CHECK(q.c.state() == State::bound);
    q.c.tick(1000);
    CHECK((q.c.state() == State::failed && q.c.fallback_reason() == Reason::handshake_timeout));
    CHECK((q.c.tx_mode() == Mode::tcp && q.c.rx_mode() == Mode::tcp && !q.c.needs_resume()));
  }
  SUBCASE("a SWITCH without the key exchange is refused") {
    Squatter q;
    Message sw;
    sw.type = msg::switch_;
    sw.stream = 0;
    sw.seq = kReply.size();
    sw.len = static_cast<uint8_t>(kProofBytes);
    CHECK(deliver(q.c, sw) == Status::invalid);
    CHECK(q.c.rx_mode() == Mode::tcp);
  }
}

TEST_CASE("coverage: a forger's one-way form over the requests of a connection that answered") {
  // The hostile review's case: a request/response connection whose
  // requests add up to 16 KiB.  A forger bound first sends (64, 0): the
  // binding would cover only the first request.  The server asks for the
  // "both" form instead, and binds on nothing less.
  Victim base("GET /a HTTP/1.1\r\nHost: example\r\n\r\n", std::string(2048, 'r'));
  UpgradeSession v = base.v;
  CHECK(deliver(v, forged_share(base.fp, kCoverBytes, 0)) == Status::ok);
  const std::string more(kOneWayBytes, 'q');
  v.on_tcp_received(more.data(), more.size());
  Message m;
  REQUIRE(v.pop_output(&m));
  uint64_t counts[2];
  uint8_t point[kPointBytes];
  decode_share(m.payload, counts, point);
  CHECK((m.type == msg::share && counts[0] == 0 && counts[1] == 0)); // "both, please"
  CHECK_FALSE(v.pop_output(&m));                                     // no PROOF
  CHECK(v.state() == State::bound);
  // The forger insists: refused.
  CHECK(deliver(v, forged_share(base.fp, kCoverBytes, 0)) == Status::invalid);
  CHECK(v.state() == State::failed);
  CHECK(v.binding_refused());
}

TEST_CASE("coverage: a share that waits for its bytes ends at the handshake timeout") {
  // A forger's one-way form over the client's direction on a connection
  // whose client direction stays short: the server waited for 16 KiB with
  // no deadline.
  Victim base("GET /a HTTP/1.1\r\n\r\n", std::string(100, 'r'));
  UpgradeSession v = base.v;
  CHECK(deliver(v, forged_share(base.fp, kCoverBytes, 0)) == Status::ok);
  v.tick(0);
  v.tick(999);
  CHECK(v.state() == State::bound);
  v.tick(1000);
  CHECK((v.state() == State::failed && v.fallback_reason() == Reason::handshake_timeout));
}

TEST_CASE("coverage: an honest pipelining client is asked for the both form and binds") {
  // The client wrote 16 KiB of requests before reading the server's first
  // 64 bytes of answers.
  Two p;
  p.s.on_tcp_sent(std::string(200, 'a').data(), 200); // on its way to the client
  p.c2s(std::string(kOneWayBytes, 'w'));
  CHECK(p.pump() == 2); // (64, 0), then "both, please"
  CHECK_FALSE(p.c.peer_proven());
  p.c.on_tcp_received(std::string(200, 'a').data(), 200);
  CHECK(p.pump() == 4);
  CHECK((p.c.peer_proven() && p.s.peer_proven()));
}

namespace {

// A channel as its rdma_cm set-up named it (recover::ChannelBinding).
ChannelBinding channel(uint16_t client_port, uint16_t server_port, uint8_t nonce) {
  ChannelBinding b;
  b.cm.family = 4;
  const uint8_t c[4] = {10, 0, 0, 1}, s[4] = {10, 0, 0, 2};
  memcpy(b.cm.client_addr, c, 4);
  memcpy(b.cm.server_addr, s, 4);
  b.cm.client_port = client_port;
  b.cm.server_port = server_port;
  memset(b.nonce, nonce, sizeof b.nonce);
  return b;
}

} // namespace

TEST_CASE("coverage: an exchange relayed from one channel onto another does not bind") {
  // The hostile reviews' relays: the client's channel reached another
  // process (a co-resident service on another rdma_cm port, or one that held
  // the server's port for a while), which forwards every record unchanged to
  // the real server over a channel that a colluding process on the client's
  // host set up.  That channel differs from the client's in its rdma_cm
  // port, its client port (two live rdma_cm ids of one address never share
  // one) or its accept's nonce (drawn by the server for that accept alone):
  // the two ends name different channels in the exchange, so no key and
  // nothing switches.
  const SessionParams cp = sparams(Role::client, 1), sp = sparams(Role::server, 2);
  const ChannelBinding real = channel(40001, 8080, 0x11);
  ChannelBinding other_port = real, other_client = real, other_nonce = real, other_family = real;
  other_port.cm.server_port = 9000;
  other_client.cm.client_port = 40002;
  other_nonce.nonce[0] ^= 1;
  other_family.cm.family = 6;
  const ChannelBinding* seen_by_client[] = {&other_port, &other_client, &other_nonce, &other_family,
                                            &real};
  for (const ChannelBinding* seen : seen_by_client) {
    const bool same = seen == &real;
    CAPTURE(same);
    UpgradeSession c(cp), s(sp);
    c.set_channel(*seen);
    s.set_channel(real);
    REQUIRE(c.adopt(0, sp.nonce) == Status::ok);
    REQUIRE(s.adopt(0, cp.nonce) == Status::ok);
    c.on_tcp_sent(kRequest.data(), kRequest.size());
    s.on_tcp_received(kRequest.data(), kRequest.size());
    s.on_tcp_sent(kReply.data(), kReply.size());
    c.on_tcp_received(kReply.data(), kReply.size());
    exchange(c, s);
    CHECK(c.peer_proven() == same);
    CHECK(s.peer_proven() == same);
    CHECK((c.try_switch_tx() == Status::ok) == same);
  }
}
