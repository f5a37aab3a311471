// The binding between a TCP connection and its RDMA stream against a peer
// that does not hold the connection (docs/protocol.md §2, §8): an rdma_cm
// requester or a channel whose address is not the tuple's client address
// binds nothing, on every path (request, ATTACH, REATTACH).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_link.h"
#include "recover/rendezvous_wire.h"
#include "recover/upgrade_wire.h"
#include "resume_pair.h"
#include "stream/engine_internal.h"

using namespace xp;
using namespace xp::test;

namespace {

uint8_t kClient[4] = {10, 0, 0, 1}; // rparams()' client address
uint8_t kOther[4] = {10, 0, 0, 9};  // a forger elsewhere on the fabric

// A server connection the engine knows by its 4-tuple (not bound to any
// channel), and a fresh server channel whose client end the test drives
// raw: it writes whatever records it likes.
struct Served : AcceptedConn {
  FakeLink la{64 * 1024, 1024}, lb{64 * 1024, 1024};
  stream::Channel* cb = nullptr;
  explicit Served(const uint8_t requester[4]) : Served(recover::ipv4_addr(requester), false) {}
  Served(const recover::IpAddr& requester, bool v6)
      : AcceptedConn(v6 ? rparams6(recover::Role::server, 6) : rparams(recover::Role::server, 6)) {
    FakeLink::connect(la, lb);
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    cb = stream::engine::make_channel(stream::engine::g(), &lb, false);
    cb->peer_addr = requester;
  }
  ~Served() {
    forget(); // before the channel it may be bound to goes
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    stream::engine::g().chans.free_now(cb);
  }
  // Send one control record from the raw client end; the types of the
  // records the server answered with.
  std::vector<flow::RecordHeader> exchange(flow::RecordChannel& client, flow::RecordType type,
                                           uint32_t id, uint64_t seq, const uint8_t* p,
                                           size_t len) {
    REQUIRE(client.send_control(type, id, seq, p, len) == Status::ok);
    for (int i = 0; i < 5; ++i)
      stream::engine::progress(cb);
    std::vector<flow::RecordHeader> out;
    flow::Record r[8];
    int got = 0;
    REQUIRE(client.poll(r, 8, &got) == Status::ok);
    for (int i = 0; i < got; ++i) {
      out.push_back(r[i].hdr);
      client.release(r[i].slot);
    }
    return out;
  }
};

bool has(const std::vector<flow::RecordHeader>& v, flow::RecordType t, uint64_t seq = ~0ull) {
  for (const auto& h : v)
    if (h.type == static_cast<uint8_t>(t) && (seq == ~0ull || h.seq == seq)) return true;
  return false;
}

} // namespace

TEST_CASE("binding: the rdma_cm requester must be the client address it names") {
  const recover::TcpTuple t = rparams(recover::Role::client, 1).tuple;
  recover::CmRequestWire w{};
  recover::tuple_key(t, w.key);
  recover::TcpTuple got;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  memcpy(&a.sin_addr, kClient, 4);
  auto named = [&](const void* peer) {
    return recover::request_tuple(w, static_cast<const sockaddr*>(peer), nullptr, &got) ==
           Status::ok;
  };
  CHECK(named(&a));
  CHECK(got == t);
  memcpy(&a.sin_addr, kOther, 4);
  CHECK_FALSE(named(&a));
  // The server's own address (a forger naming the tuple from the server host).
  memcpy(&a.sin_addr, t.server_addr, 4);
  CHECK_FALSE(named(&a));
  sockaddr_in6 m{};
  m.sin6_family = AF_INET6;
  REQUIRE(inet_pton(AF_INET6, "::ffff:10.0.0.1", &m.sin6_addr) == 1);
  CHECK(named(&m));
  CHECK(got == t);
  REQUIRE(inet_pton(AF_INET6, "::ffff:10.0.0.9", &m.sin6_addr) == 1);
  CHECK_FALSE(named(&m));
  // A native IPv6 requester cannot name an IPv4 tuple (nor anything
  // without the address it reached).
  REQUIRE(inet_pton(AF_INET6, "fd00::1", &m.sin6_addr) == 1);
  CHECK_FALSE(named(&m));
  CHECK_FALSE(named(nullptr));
}

TEST_CASE("binding: an ATTACH over a channel from another address binds nothing") {
  const recover::SessionParams pc = rparams(recover::Role::client, 5);
  uint8_t att[recover::kAttachBytes];
  recover::encode_attach(pc.tuple, pc.nonce, att);
  SUBCASE("another address: NAK, the connection stays free for its client") {
    Served s(kOther);
    flow::RecordChannel client(&s.la);
    auto got = s.exchange(client, flow::RecordType::attach, 1, 0, att, sizeof att);
    CHECK(has(got, flow::RecordType::attach_nak,
              static_cast<uint64_t>(recover::NakCode::unknown_stream)));
    CHECK_FALSE(has(got, flow::RecordType::attach_ack));
    CHECK(s.c->ch == nullptr);
    CHECK(s.c->sess.state() == recover::State::idle);
  }
  SUBCASE("a channel whose requester is unknown (zero) serves nobody") {
    const uint8_t zero[4] = {};
    Served s(zero);
    flow::RecordChannel client(&s.la);
    auto got = s.exchange(client, flow::RecordType::attach, 1, 0, att, sizeof att);
    CHECK_FALSE(has(got, flow::RecordType::attach_ack));
    CHECK(s.c->ch == nullptr);
  }
  SUBCASE("the client's own address binds") {
    Served s(kClient);
    flow::RecordChannel client(&s.la);
    auto got = s.exchange(client, flow::RecordType::attach, 1, 0, att, sizeof att);
    CHECK(has(got, flow::RecordType::attach_ack));
    CHECK(s.c->ch == s.cb);
    CHECK(s.c->sess.state() == recover::State::bound);
  }
}

TEST_CASE("binding: an IPv6 connection binds over a channel from its IPv6 client only") {
  const recover::SessionParams pc = rparams6(recover::Role::client, 5);
  REQUIRE(pc.tuple.family == 6);
  uint8_t att[recover::kAttachBytes];
  recover::encode_attach(pc.tuple, pc.nonce, att);
  const recover::IpAddr client = recover::client_addr(pc.tuple);
  SUBCASE("the client's own IPv6 address binds") {
    Served s(client, true);
    flow::RecordChannel client_end(&s.la);
    auto got = s.exchange(client_end, flow::RecordType::attach, 1, 0, att, sizeof att);
    CHECK(has(got, flow::RecordType::attach_ack));
    CHECK(s.c->ch == s.cb);
    CHECK(s.c->sess.state() == recover::State::bound);
  }
  SUBCASE("another IPv6 address, or an IPv4 one with the same first bytes, binds nothing") {
    recover::IpAddr other = client;
    other.b[15] ^= 1;
    recover::IpAddr v4 = recover::ipv4_addr(client.b);
    for (const recover::IpAddr& from : {other, v4}) {
      Served s(from, true);
      flow::RecordChannel client_end(&s.la);
      auto got = s.exchange(client_end, flow::RecordType::attach, 1, 0, att, sizeof att);
      CHECK(has(got, flow::RecordType::attach_nak,
                static_cast<uint64_t>(recover::NakCode::unknown_stream)));
      CHECK(s.c->ch == nullptr);
    }
  }
}
