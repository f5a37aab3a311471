// The engine's state a peer can make it keep (docs/protocol.md §8): a
// pending ATTACH never outlives its channel, and the pending lists and
// server channels stay within their caps.  Fake transport, the engine's
// tables driven by hand as its thread would (no rdma_cm here).
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cstring>
#include <memory>
#include <mutex>

#include "fake_link.h"
#include "recover/upgrade_wire.h"
#include "stream/engine_internal.h"

using namespace xp;
using namespace xp::stream;

namespace {

// One of our listening sockets (port 7000): an ATTACH for a 4-tuple to it
// waits for the application's accept, as one that arrives early does.
struct Listening {
  std::unique_ptr<ListenShare> sh{new ListenShare{}};
  explicit Listening(uint16_t port) {
    auto* a = reinterpret_cast<sockaddr_in*>(&sh->addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().shares.push_back(sh.get());
  }
  ~Listening() {
    std::lock_guard<std::mutex> g(engine::g().mu);
    auto& v = engine::g().shares;
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == sh.get()) v.erase(v.begin() + static_cast<long>(i));
  }
};

recover::TcpTuple tuple(uint16_t client_port) {
  recover::TcpTuple t;
  t.family = 4;
  const uint8_t c[4] = {10, 77, 0, 1}, s[4] = {10, 77, 0, 2};
  memcpy(t.client_addr, c, 4);
  memcpy(t.server_addr, s, 4);
  t.client_port = client_port;
  t.server_port = 7000;
  return t;
}

// A server channel in the engine's table, its peer a raw record channel
// (we write what we like).
struct ServerChannel {
  test::LinkPair links{64 * 1024};
  flow::RecordChannel client{&links.la};
  Channel* ch = nullptr;
  ServerChannel() {
    std::lock_guard<std::mutex> g(engine::g().mu);
    ch = engine::make_channel(&links.lb, false);
  }
  Status attach(uint32_t id, uint16_t client_port) {
    uint8_t p[recover::kAttachBytes];
    recover::Nonce n{};
    recover::encode_attach(tuple(client_port), n, p);
    Status st = client.send_control(flow::RecordType::attach, id, 0, p, sizeof p);
    engine::progress(ch); // the engine polls the channel and handles its records
    return st;
  }
  // What reap_channels does after the grace period (without rdma_cm).
  void free_unlinked() {
    {
      std::lock_guard<std::mutex> g(engine::g().mu);
      auto& dy = engine::g().dying;
      for (size_t i = 0; i < dy.size(); ++i)
        if (dy[i] == ch) dy.erase(dy.begin() + static_cast<long>(i));
    }
    delete ch->mux;
    delete ch;
    ch = nullptr;
  }
  ~ServerChannel() {
    if (ch == nullptr) return;
    {
      std::lock_guard<std::mutex> g(engine::g().mu);
      for (auto* v : {&engine::g().channels, &engine::g().dying})
        for (size_t i = 0; i < v->size(); ++i)
          if ((*v)[i] == ch) v->erase(v->begin() + static_cast<long>(i));
      engine::drop_attaches(ch);
    }
    delete ch->mux;
    delete ch;
  }
};

size_t pending_attaches(Channel* ch) {
  std::lock_guard<std::mutex> g(engine::g().mu);
  size_t n = 0;
  for (const auto& a : engine::g().attaches)
    n += a.ch == ch;
  return n;
}

struct Timeout {
  uint32_t saved = engine::g().p.handshake_timeout_ms;
  explicit Timeout(uint32_t ms) { engine::g().p.handshake_timeout_ms = ms; }
  ~Timeout() { engine::g().p.handshake_timeout_ms = saved; }
};

} // namespace

// Finding 7 of the security review: a pending ATTACH kept a raw Channel*
// that outlived the channel when the handshake timeout exceeds the 2 s
// after which an unlinked channel is freed (use-after-free on the next
// retry).  The ATTACHes go with the channel when it is unlinked.
TEST_CASE("engine: a pending ATTACH does not outlive its channel") {
  Timeout t(5000); // XPRESS_HANDSHAKE_TIMEOUT_MS above the 2 s free delay
  Listening l(7000);
  ServerChannel s;
  REQUIRE(s.attach(1, 40001) == Status::ok);
  REQUIRE(pending_attaches(s.ch) == 1); // waits for the application's accept
  // The channel fails (its peer wrote past its credit, the link broke...)
  // and is unlinked by the engine's tick.
  engine::mark_failed(s.ch, ResumeCause::protocol_error);
  const uint64_t now = engine::now_ms();
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::reap_channels(now);
  }
  REQUIRE(s.ch->dying_since_ms != 0);
  REQUIRE(pending_attaches(s.ch) == 0);
  // 2 s later it is freed; the engine's next retries find nothing of it.
  s.free_unlinked();
  std::lock_guard<std::mutex> g(engine::g().mu);
  engine::retry_pending(now + 2500);
  CHECK(engine::g().attaches.empty());
}
