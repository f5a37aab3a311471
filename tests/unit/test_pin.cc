// Kernel features that must see a connection's bytes (stream/pin.h,
// preload/kernel_features.h), over the fake transport: turning one on moves
// the stream to TCP first (the peer follows), nothing of xpress's is left
// to go on the socket after it, bytes arrive once and in order, and the
// connection never goes back onto RDMA; an upgrade under way just ends.  A
// feature that takes over the receive side is refused while the program
// has bytes xpress holds.  And the detection: which socket options are
// features, which xfrm policies cover a connection.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <linux/netlink.h>
#include <linux/xfrm.h>
#include <netinet/tcp.h>
#include <thread>

#include "preload/kernel_features.h"
#include "resume_pair.h"
#include "stream/move.h"
#include "stream/pin.h"

using namespace xp;
using namespace xp::test;
using stream::ResumeCause;

namespace {

ResumeLog g_pins;
void capture(const stream::ResumeEvent& e) {
  g_pins.add(e);
}
int count(ResumeCause c) {
  int n = 0;
  for (const stream::ResumeEvent& e : g_pins.events())
    n += e.cause == c && e.ok;
  return n;
}

// pin::to_tcp on a's connection while b's engine runs in a thread.
bool pin_a(RPair& p, Reason why, bool rx) {
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    while (!stop.load()) {
      stream::engine::progress(p.b.ch);
      usleep(100);
    }
  });
  bool ok = stream::pin::to_tcp(p.a.c, why, rx);
  stop = true;
  peer.join();
  return ok;
}

void upgraded_in_flight(RPair& p, unsigned seed) {
  stream::engine::g().p.keepalive_ms = 0;
  rdrive(p, 60000, seed, -1, [] {});
  settle_switches(p);
  REQUIRE(p.a.c->tx_rdma.load());
  REQUIRE(p.b.c->tx_rdma.load());
  rput(p.a, 50000);
  rput(p.b, 50000);
}

} // namespace

TEST_CASE("pin: kernel TLS on a stream on RDMA: it moves to TCP, raw from here, never back") {
  stream::set_resume_hook(capture);
  g_pins.clear();
  RPair p;
  upgraded_in_flight(p, 91);
  // b's bytes all read: the receive side can be handed over too.
  while (rtake(p.a, 1 << 20, 1) > 0 || p.a.got < 60000) {
    engine_step(p);
    if (p.a.got >= 110000) break;
  }
  REQUIRE(pin_a(p, Reason::kernel_tls, false));
  CHECK(p.a.c->pinned.load());
  CHECK(p.a.c->reup.never);
  REQUIRE(p.a.c->resumed.load());
  REQUIRE(p.a.c->rs != nullptr);
  CHECK(p.a.c->rs->moved);
  CHECK(p.a.c->rs->tx == stream::Resume::Tx::raw);
  CHECK(p.a.c->rs->out.size() == 0); // our RESUME is in the kernel: the feature sees only app bytes
  CHECK_FALSE(p.a.ch->failed.load());
  CHECK(count(ResumeCause::kernel_feature) == 1);
  CHECK(count(ResumeCause::peer_moved) == 1);
  rdrive(p, 400000, 92, -1, [] {});
  check_delivered(p, 400000);
  CHECK(p.b.c->reup.never); // the peer follows: its end never goes back either
  CHECK(p.a.c->phase.load() == stream::Phase::tcp);
  stream::set_resume_hook(nullptr);
}

TEST_CASE("pin: a receive-side feature is refused while xpress holds unread bytes; none lost") {
  RPair p;
  upgraded_in_flight(p, 93);
  stream::engine::progress(p.a.ch); // b's 50000 bytes arrive at a, unread
  CHECK_FALSE(pin_a(p, Reason::kernel_tls, true));
  CHECK(p.a.c->reup.never);
  rdrive(p, 400000, 94, -1, [] {});
  check_delivered(p, 400000);
  // Once read, the kernel serves the socket: the feature may go through.
  CHECK(pin_a(p, Reason::kernel_tls, true));
  CHECK(p.a.c->phase.load() == stream::Phase::tcp);
}

TEST_CASE("pin: an upgrade under way ends; the connection stays on TCP with the reason") {
  RPair p;
  stream::engine::g().p.keepalive_ms = 0;
  {
    std::lock_guard<std::mutex> l(p.a.c->mu);   // move.h: c->mu held
    if (stream::move::candidate(p.a.c)) return; // switched already at bind: covered above
  }
  CHECK(pin_a(p, Reason::io_uring, false));
  CHECK(p.a.c->reason == Reason::io_uring);
  CHECK(p.a.c->phase.load() == stream::Phase::tcp);
  rdrive(p, 300000, 95, -1, [] {});
  check_delivered(p, 300000);
  CHECK_FALSE(p.a.c->tx_rdma.load());
}

TEST_CASE("kernel features: the socket options that are one") {
  bool rx = false;
  CHECK(kfeat::of_setsockopt(IPPROTO_TCP, TCP_ULP, "tls", 4, &rx) == Reason::kernel_tls);
  CHECK(rx);
  CHECK(kfeat::of_setsockopt(IPPROTO_TCP, TCP_ULP, "smc", 4, &rx) == Reason::kernel_feature);
  CHECK(kfeat::of_setsockopt(282, 1, "", 0, &rx) == Reason::kernel_tls); // SOL_TLS TLS_TX
  CHECK_FALSE(rx);
  CHECK(kfeat::of_setsockopt(282, 2, "", 0, &rx) == Reason::kernel_tls); // TLS_RX
  CHECK(rx);
  int one = 1, zero = 0;
  // SO_ZEROCOPY alone is not: MSG_ZEROCOPY sends are (semantics
  // msg_zerocopy_completions).
  CHECK(kfeat::of_setsockopt(SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one, &rx) == Reason::none);
  CHECK(kfeat::of_setsockopt(SOL_SOCKET, SO_ZEROCOPY, &zero, sizeof zero, &rx) == Reason::none);
  CHECK(kfeat::of_setsockopt(IPPROTO_TCP, TCP_REPAIR, &one, sizeof one, &rx) ==
        Reason::kernel_feature);
  CHECK(kfeat::of_setsockopt(SOL_SOCKET, SO_ATTACH_BPF, &one, sizeof one, &rx) ==
        Reason::kernel_feature);
  CHECK(kfeat::of_setsockopt(IPPROTO_IP, IP_XFRM_POLICY, &one, sizeof one, &rx) == Reason::ipsec);
  CHECK(kfeat::of_setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof one, &rx) == Reason::none);
  CHECK(kfeat::of_setsockopt(SOL_SOCKET, SO_RCVBUF, &one, sizeof one, &rx) == Reason::none);
}

namespace {

// One XFRM_MSG_NEWPOLICY message as the kernel dumps it.
size_t policy(uint8_t* out, uint8_t dir, const char* src, int plen_s, const char* dst, int plen_d,
              uint8_t proto, uint16_t dport, bool tmpl, uint8_t action = XFRM_POLICY_ALLOW) {
  xfrm_userpolicy_info pi{};
  pi.dir = dir;
  pi.action = action;
  const int fam = strchr(src, ':') ? AF_INET6 : AF_INET;
  pi.sel.family = static_cast<uint16_t>(fam);
  inet_pton(fam, src, &pi.sel.saddr);
  inet_pton(fam, dst, &pi.sel.daddr);
  pi.sel.prefixlen_s = static_cast<uint8_t>(plen_s);
  pi.sel.prefixlen_d = static_cast<uint8_t>(plen_d);
  pi.sel.proto = proto;
  if (dport) {
    pi.sel.dport = htons(dport);
    pi.sel.dport_mask = 0xffff;
  }
  size_t len = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof pi);
  memcpy(out + NLMSG_HDRLEN, &pi, sizeof pi);
  if (tmpl) {
    nlattr a{static_cast<uint16_t>(NLA_HDRLEN + sizeof(xfrm_user_tmpl)), XFRMA_TMPL};
    memcpy(out + len, &a, sizeof a);
    memset(out + len + NLA_HDRLEN, 0, sizeof(xfrm_user_tmpl));
    len += NLA_ALIGN(a.nla_len);
  }
  nlmsghdr h{};
  h.nlmsg_len = static_cast<uint32_t>(len);
  h.nlmsg_type = XFRM_MSG_NEWPOLICY;
  memcpy(out, &h, sizeof h);
  return NLMSG_ALIGN(len);
}

size_t done(uint8_t* out) {
  nlmsghdr h{};
  h.nlmsg_len = NLMSG_LENGTH(4);
  h.nlmsg_type = NLMSG_DONE;
  memcpy(out, &h, sizeof h);
  memset(out + NLMSG_HDRLEN, 0, 4);
  return NLMSG_ALIGN(h.nlmsg_len);
}

sockaddr_storage end(const char* addr, uint16_t port) {
  sockaddr_storage ss{};
  if (strchr(addr, ':')) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    inet_pton(AF_INET6, addr, &a->sin6_addr);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, addr, &a->sin_addr);
  }
  return ss;
}

int covers(const uint8_t* d, size_t n, int* err, const char* l = "10.77.0.1",
           const char* p = "10.77.0.2") {
  return kfeat::xfrm_covers(d, n, end(l, 41000), end(p, 5201), err);
}

} // namespace

TEST_CASE("kernel features: which xfrm policies cover a connection") {
  alignas(8) uint8_t d[4096];
  int err = 0;
  size_t n = 0;
  // Transport mode between the two addresses, TCP: covered (out, and in).
  n = policy(d, XFRM_POLICY_OUT, "10.77.0.1", 32, "10.77.0.2", 32, IPPROTO_TCP, 0, true);
  n += done(d + n);
  CHECK(covers(d, n, &err) == 1);
  n = policy(d, XFRM_POLICY_IN, "10.77.0.2", 32, "10.77.0.1", 32, 0, 0, true);
  n += done(d + n);
  CHECK(covers(d, n, &err) == 1);
  // A subnet, any protocol, the right port.
  n = policy(d, XFRM_POLICY_OUT, "10.77.0.0", 24, "10.0.0.0", 8, 0, 5201, true);
  n += done(d + n);
  CHECK(covers(d, n, &err) == 1);
  // Not covered: other addresses, another port, UDP only, forward, no
  // template (an explicit bypass).
  n = policy(d, XFRM_POLICY_OUT, "10.77.0.3", 32, "10.77.0.2", 32, 0, 0, true);
  n += policy(d + n, XFRM_POLICY_OUT, "10.77.0.1", 32, "10.77.0.2", 32, 0, 80, true);
  n += policy(d + n, XFRM_POLICY_OUT, "10.77.0.1", 32, "10.77.0.2", 32, IPPROTO_UDP, 0, true);
  n += policy(d + n, XFRM_POLICY_FWD, "10.77.0.1", 32, "10.77.0.2", 32, 0, 0, true);
  n += policy(d + n, XFRM_POLICY_OUT, "10.77.0.1", 32, "10.77.0.2", 32, 0, 0, false);
  n += done(d + n);
  CHECK(covers(d, n, &err) == 0);
  // A block policy: the kernel drops it; never around it over RDMA.
  n = policy(d, XFRM_POLICY_OUT, "0.0.0.0", 0, "0.0.0.0", 0, 0, 0, false, XFRM_POLICY_BLOCK);
  n += done(d + n);
  CHECK(covers(d, n, &err) == 1);
  // No right to list them: the error.
  nlmsghdr h{};
  h.nlmsg_len = NLMSG_LENGTH(sizeof(nlmsgerr));
  h.nlmsg_type = NLMSG_ERROR;
  nlmsgerr e{};
  e.error = -EPERM;
  memcpy(d, &h, sizeof h);
  memcpy(d + NLMSG_HDRLEN, &e, sizeof e);
  CHECK(covers(d, h.nlmsg_len, &err) == -1);
  CHECK(err == EPERM);
}

TEST_CASE("kernel features: xfrm policies of IPv6 and IPv4-mapped connections") {
  alignas(8) uint8_t d[4096];
  int err = 0;
  size_t n = 0;
  // A native IPv6 connection: its IPv6 policy covers it (exact, and a /64).
  n = policy(d, XFRM_POLICY_OUT, "fd77::1", 128, "fd77::2", 128, IPPROTO_TCP, 0, true);
  n += done(d + n);
  CHECK(covers(d, n, &err, "fd77::1", "fd77::2") == 1);
  n = policy(d, XFRM_POLICY_IN, "fd77::2:0:0:0", 64, "fd77::", 64, 0, 0, true);
  n += done(d + n);
  CHECK(covers(d, n, &err, "fd77::1", "fd77::2") == 1);
  // Another prefix, and an IPv4 policy, do not.
  n = policy(d, XFRM_POLICY_OUT, "fd77::1", 128, "fd78::", 16, 0, 0, true);
  n += policy(d + n, XFRM_POLICY_OUT, "0.0.0.0", 0, "0.0.0.0", 0, 0, 0, true);
  n += done(d + n);
  CHECK(covers(d, n, &err, "fd77::1", "fd77::2") == 0);
  // An IPv4-mapped connection sends IPv4 packets: IPv4 policies cover it.
  n = policy(d, XFRM_POLICY_OUT, "10.77.0.1", 32, "10.77.0.2", 32, 0, 0, true);
  n += done(d + n);
  CHECK(covers(d, n, &err, "::ffff:10.77.0.1", "::ffff:10.77.0.2") == 1);
}
