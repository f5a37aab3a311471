// A server stream bound and waiting for its client's first key exchange
// share has no timer (the client's program decides when it comes:
// docs/protocol.md §2), so a client that never sends it would hold the
// stream for as long as it likes.  XPRESS_SERVER_UNPROVEN_PER_PEER bounds
// how many such streams one client address holds (§8): beyond it a new
// connection from that address stays on TCP (resources_exhausted) and
// delivers every byte there; a stream whose client proved itself, or that
// closed, makes room again; another address is not crowded out.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cstring>
#include <memory>
#include <mutex>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "fake_link.h"
#include "io_calls.h"
#include "recover/upgrade.h"
#include "recover/upgrade_wire.h"
#include "resume_pair.h"
#include "stream/engine_internal.h"

using namespace xp;
using namespace xp::test;

namespace {

struct UnprovenCap {
  uint32_t saved = stream::engine::g().p.server_unproven_per_peer;
  explicit UnprovenCap(uint32_t n) { stream::engine::g().p.server_unproven_per_peer = n; }
  ~UnprovenCap() { stream::engine::g().p.server_unproven_per_peer = saved; }
};

// rparams' connection from client 10.0.0.<host>, port `port`.
recover::SessionParams params(recover::Role r, uint16_t port, uint8_t host) {
  recover::SessionParams p = rparams(r, r == recover::Role::client ? 5 : 6);
  p.tuple.client_port = port;
  p.tuple.client_addr[3] = host;
  return p;
}

// One accepted server connection (the engine finds it by its 4-tuple) and
// the client's upgrade session of the same connection, which the test
// drives by hand over a raw client end of the channel.
struct Accepted : AcceptedConn {
  recover::UpgradeSession client;
  Accepted(uint16_t port, uint8_t host)
      : AcceptedConn(params(recover::Role::server, port, host)),
        client(params(recover::Role::client, port, host)) {}
};

// A server channel from client address 10.0.0.<host>, its client end raw.
struct FromHost {
  FakeLink la{64 * 1024, 1024}, lb{64 * 1024, 1024};
  stream::Channel* ch = nullptr;
  std::unique_ptr<flow::RecordChannel> client;
  explicit FromHost(uint8_t host) {
    FakeLink::connect(la, lb);
    client.reset(new flow::RecordChannel(&la));
    const uint8_t a[4] = {10, 0, 0, host};
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    ch = stream::engine::make_channel(stream::engine::g(), &lb, false);
    ch->peer_addr = recover::ipv4_addr(a);
  }
  ~FromHost() {
    std::lock_guard<std::mutex> g(stream::engine::g().mu);
    stream::engine::g().chans.free_now(ch);
  }
  void send(const recover::Message& m) {
    REQUIRE(client->send_control(static_cast<flow::RecordType>(m.type), m.stream, m.seq, m.payload,
                                 m.len) == Status::ok);
    for (int i = 0; i < 4; ++i)
      stream::engine::progress(ch);
  }
  // The server's answers, fed to the client sessions by stream id.
  std::vector<flow::RecordHeader> answers(const std::vector<Accepted*>& by_id) {
    std::vector<flow::RecordHeader> out;
    flow::Record r[16];
    int got = 0;
    REQUIRE(client->poll(r, 16, &got) == Status::ok);
    for (int i = 0; i < got; ++i) {
      const flow::RecordHeader& h = r[i].hdr;
      out.push_back(h);
      if (h.stream < by_id.size() && by_id[h.stream])
        by_id[h.stream]->client.on_message(h.type, h.stream, h.seq, r[i].payload, h.len);
      client->release(r[i].slot);
    }
    return out;
  }
  // The client of `a` attaches its connection as stream `id`.
  std::vector<flow::RecordHeader> attach(Accepted& a, uint32_t id, std::vector<Accepted*>& by_id) {
    if (by_id.size() <= id) by_id.resize(id + 1, nullptr);
    by_id[id] = &a;
    recover::Message m;
    REQUIRE(a.client.start_attach(id, &m) == Status::ok);
    send(m);
    return answers(by_id);
  }
};

bool has(const std::vector<flow::RecordHeader>& v, flow::RecordType t, uint64_t seq = ~0ull) {
  for (const auto& h : v)
    if (h.type == static_cast<uint8_t>(t) && (seq == ~0ull || h.seq == seq)) return true;
  return false;
}

const uint64_t kLimit = static_cast<uint64_t>(recover::NakCode::limit);

bool waiting_bound(Accepted& a) {
  std::lock_guard<std::mutex> l(a.c->mu);
  return a.c->ch != nullptr && a.c->sess.state() == recover::State::bound && a.c->sess.untimed() &&
         a.c->phase.load() == stream::Phase::upgrading;
}

bool on_tcp(Accepted& a, Reason why) {
  std::lock_guard<std::mutex> l(a.c->mu);
  return a.c->ch == nullptr && a.c->phase.load() == stream::Phase::tcp && a.c->reason == why;
}

} // namespace

TEST_CASE("unproven cap: streams waiting for their client's first proof are capped per address") {
  UnprovenCap cap(3);
  FromHost h1(1);
  std::vector<std::unique_ptr<Accepted>> conns;
  for (uint16_t i = 0; i < 6; ++i)
    conns.emplace_back(new Accepted(static_cast<uint16_t>(42000 + i), 1));
  std::vector<Accepted*> ids;
  for (uint32_t i = 0; i < 3; ++i) {
    auto got = h1.attach(*conns[i], i + 1, ids);
    CHECK(has(got, flow::RecordType::attach_ack));
    CHECK(waiting_bound(*conns[i]));
  }
  CHECK(h1.ch->mux->marked_count() == 3);

  // The fourth: NAK limit, and its connection stays on TCP for good.
  auto got = h1.attach(*conns[3], 4, ids);
  CHECK(has(got, flow::RecordType::attach_nak, kLimit));
  CHECK_FALSE(has(got, flow::RecordType::attach_ack));
  CHECK(on_tcp(*conns[3], Reason::resources_exhausted));
  CHECK(conns[3]->client.state() == recover::State::failed);
  CHECK(conns[3]->client.fallback_reason() == Reason::resources_exhausted);
  CHECK(h1.ch->mux->marked_count() == 3);

  SUBCASE("the connection left on TCP delivers every byte, both ways") {
    Accepted& a = *conns[3];
    std::vector<uint8_t> in(100000), out(100000);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<uint8_t>(i * 7 + 3);
    size_t sent = 0, recvd = 0;
    while (recvd < in.size()) {
      if (sent < in.size()) {
        ssize_t n = ::send(a.fds[0], in.data() + sent, in.size() - sent, MSG_DONTWAIT);
        if (n > 0) sent += static_cast<size_t>(n);
      }
      iovec v{out.data() + recvd, out.size() - recvd};
      bool kernel = false;
      ssize_t r = call_recv(a.c, &v, 1, MSG_DONTWAIT, &kernel);
      CHECK(kernel); // the kernel serves it: nothing of xpress in the way
      if (kernel) r = ::recv(a.c->fd, out.data() + recvd, out.size() - recvd, MSG_DONTWAIT);
      if (r > 0) recvd += static_cast<size_t>(r);
      REQUIRE((r > 0 || errno == EAGAIN));
    }
    CHECK(out == in);
    iovec v{in.data(), 1000};
    bool kernel = false;
    ssize_t w = call_send(a.c, &v, 1, MSG_DONTWAIT, &kernel);
    CHECK(kernel);
    if (kernel) w = ::send(a.c->fd, in.data(), 1000, MSG_DONTWAIT);
    REQUIRE(w == 1000);
    uint8_t back[1000];
    REQUIRE(::recv(a.fds[0], back, sizeof back, MSG_WAITALL) == 1000);
    CHECK(memcmp(back, in.data(), 1000) == 0);
  }

  SUBCASE("another client address is not crowded out") {
    FromHost h3(3);
    Accepted other(43000, 3);
    std::vector<Accepted*> ids3;
    auto g3 = h3.attach(other, 1, ids3);
    CHECK(has(g3, flow::RecordType::attach_ack));
    CHECK(waiting_bound(other));
  }

  SUBCASE("a stream whose client shares, or that closes, makes room") {
    // Both ends of connection 0 saw 64 bytes each way: the client's
    // SHARE leaves, and the server answers it (its wait is timed now).
    uint8_t b[64];
    for (size_t i = 0; i < sizeof b; ++i)
      b[i] = static_cast<uint8_t>(i);
    Accepted& a0 = *conns[0];
    {
      std::lock_guard<std::mutex> l(a0.c->mu);
      a0.c->sess.on_tcp_sent(b, sizeof b);
      a0.c->sess.on_tcp_received(b, sizeof b);
    }
    a0.client.on_tcp_sent(b, sizeof b);
    a0.client.on_tcp_received(b, sizeof b);
    recover::Message share;
    REQUIRE(a0.client.pop_output(&share));
    REQUIRE(share.type == recover::msg::share);
    h1.send(share);
    auto ans = h1.answers(ids);
    CHECK(has(ans, flow::RecordType::share));
    CHECK(has(ans, flow::RecordType::proof));
    CHECK_FALSE(waiting_bound(a0));
    CHECK(h1.ch->mux->marked_count() == 2);
    auto g4 = h1.attach(*conns[4], 5, ids);
    CHECK(has(g4, flow::RecordType::attach_ack));
    CHECK(waiting_bound(*conns[4]));
    CHECK(h1.ch->mux->marked_count() == 3);

    // Connection 1 closes while it waits: its room goes to the next one.
    stream::engine::on_close(conns[1]->c);
    CHECK(h1.ch->mux->marked_count() == 2);
    auto g5 = h1.attach(*conns[5], 6, ids);
    CHECK(has(g5, flow::RecordType::attach_ack));
    CHECK(h1.ch->mux->marked_count() == 3);
  }
}
