// Native IPv6 4-tuples in the rendezvous and the engine's tables
// (docs/protocol.md §1): the rdma_cm request's 12-byte key, the tables'
// full key, the negative cache and the failed-binding counts.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>

#include "recover/rendezvous_wire.h"
#include "recover/upgrade_wire.h"
#include "stream/bind_failures.h"
#include "stream/negative_cache.h"

using namespace xp;

namespace {

sockaddr_in6 v6(const char* text, uint16_t port) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  REQUIRE(inet_pton(AF_INET6, text, &a.sin6_addr) == 1);
  return a;
}

recover::TcpTuple tuple6(const char* client, const char* server) {
  sockaddr_in6 c = v6(client, 41000), s = v6(server, 8080);
  recover::TcpTuple t;
  REQUIRE(recover::tuple_from_sockaddrs(reinterpret_cast<sockaddr*>(&c),
                                        reinterpret_cast<sockaddr*>(&s), &t) == Status::ok);
  return t;
}

const sockaddr* sa(const sockaddr_in6& a) {
  return reinterpret_cast<const sockaddr*>(&a);
}

} // namespace

TEST_CASE("IPv6 request: the tuple comes from the rdma_cm addresses, checked by the key") {
  const recover::TcpTuple t = tuple6("fd77::1", "fd77::2");
  REQUIRE(t.family == 6);
  recover::CmRequestWire w{};
  recover::tuple_key(t, w.key);
  // The key carries the addresses' last 4 bytes and the ports.
  const uint8_t want[12] = {0,         0,          0, 1, 0, 0, 0, 2, 41000 >> 8, 41000 & 0xff,
                            8080 >> 8, 8080 & 0xff};
  CHECK(memcmp(w.key, want, 12) == 0);
  const sockaddr_in6 peer = v6("fd77::1", 5555), local = v6("fd77::2", 8080);
  recover::TcpTuple got;
  REQUIRE(recover::request_tuple(w, sa(peer), sa(local), &got) == Status::ok);
  CHECK(got == t);
  // Another requester, another address reached, or no IPv6 one: refused.
  CHECK(recover::request_tuple(w, sa(v6("fd77::9", 1)), sa(local), &got) == Status::invalid);
  // A requester whose address ends alike names its own connection, never
  // fd77::1's.
  REQUIRE(recover::request_tuple(w, sa(v6("fd78::1", 1)), sa(local), &got) == Status::ok);
  CHECK_FALSE(got == t);
  CHECK(recover::client_addr(got) == recover::ip_addr(sa(v6("fd78::1", 1))));
  CHECK(recover::request_tuple(w, sa(peer), sa(v6("fd77::3", 1)), &got) == Status::invalid);
  sockaddr_in l4{};
  l4.sin_family = AF_INET;
  CHECK(recover::request_tuple(w, sa(peer), reinterpret_cast<sockaddr*>(&l4), &got) ==
        Status::invalid);
  CHECK(recover::request_tuple(w, sa(peer), nullptr, &got) == Status::invalid);
  // Another port in the key names another connection.
  recover::CmRequestWire w2 = w;
  w2.key[9] ^= 1;
  REQUIRE(recover::request_tuple(w2, sa(peer), sa(local), &got) == Status::ok);
  CHECK(got.client_port == (41000 ^ 1));
}

TEST_CASE("IPv6 tuple ids: the whole address, and the family, tell tuples apart") {
  const recover::TcpTuple a = tuple6("fd77::1", "fd77::2"), b = tuple6("fd78::1", "fd77::2");
  uint8_t ka[12], kb[12], ia[recover::kTupleIdBytes], ib[recover::kTupleIdBytes];
  recover::tuple_key(a, ka);
  recover::tuple_key(b, kb);
  CHECK(memcmp(ka, kb, 12) == 0); // the request key alone cannot (the addresses do)
  recover::tuple_id(a, ia);
  recover::tuple_id(b, ib);
  CHECK(memcmp(ia, ib, sizeof ia) != 0);
  // 10.0.0.1 -> 10.0.0.2 and a0::1 -> a0::2 style look-alikes: the family differs.
  recover::TcpTuple v4;
  v4.family = 4;
  memcpy(v4.client_addr, a.client_addr, 4);
  memcpy(v4.server_addr, a.server_addr, 4);
  v4.client_port = a.client_port;
  v4.server_port = a.server_port;
  recover::TcpTuple look = a;
  memset(look.client_addr + 4, 0, 12);
  memset(look.server_addr + 4, 0, 12);
  uint8_t i4[recover::kTupleIdBytes], il[recover::kTupleIdBytes];
  recover::tuple_id(v4, i4);
  recover::tuple_id(look, il);
  CHECK(memcmp(i4, il, sizeof i4) != 0);
  // Mapped addresses are IPv4: a dual-stack server names the same tuple.
  sockaddr_in6 mc = v6("::ffff:10.0.0.1", 41000), ms = v6("::ffff:10.0.0.2", 8080);
  recover::TcpTuple m;
  REQUIRE(recover::tuple_from_sockaddrs(sa(mc), sa(ms), &m) == Status::ok);
  CHECK(m.family == 4);
  sockaddr_storage back;
  recover::to_sockaddr(recover::server_addr(m), 8080, &back);
  CHECK(back.ss_family == AF_INET);
  recover::to_sockaddr(recover::server_addr(a), 8080, &back);
  REQUIRE(back.ss_family == AF_INET6);
  CHECK(memcmp(&reinterpret_cast<sockaddr_in6*>(&back)->sin6_addr, a.server_addr, 16) == 0);
}

TEST_CASE("IPv6 negative cache and failed bindings: per address (per /64 for failures)") {
  const recover::TcpTuple a = tuple6("fd77::1", "fd77::2");
  const recover::IpAddr s6 = recover::server_addr(a);
  const recover::IpAddr s4 = recover::ipv4_addr(a.server_addr); // same first bytes, IPv4
  recover::IpAddr s6b = s6;
  s6b.b[15] ^= 3;
  stream::NegativeCache nc;
  nc.remember(s6, 8080, 1000, 5000);
  CHECK(nc.cached(s6, 8080, 1001));
  CHECK_FALSE(nc.cached(s4, 8080, 1001));
  CHECK_FALSE(nc.cached(s6b, 8080, 1001));
  CHECK_FALSE(nc.cached(s6, 8081, 1001));

  static stream::BindFailures f;
  recover::IpAddr same64 = s6, other64 = s6;
  same64.b[9] ^= 0x40; // another host part, the same /64
  other64.b[7] ^= 1;   // another /64
  for (uint32_t i = 0; i < stream::BindFailures::kLimit; ++i)
    f.note(i % 2 ? s6 : same64, 1000);
  CHECK(f.blocked(s6, 1000));
  CHECK(f.blocked(same64, 1000));
  CHECK_FALSE(f.blocked(other64, 1000));
  CHECK_FALSE(f.blocked(s4, 1000));
}

// A channel's name (docs/protocol.md §2 "The channel") keeps the family
// rdma_cm reports: an IPv4-mapped IPv6 id may hold the same port number as
// an IPv4 id of the same address, so folding it would give the two one name.
TEST_CASE("channel names: an IPv4-mapped address is not folded, and the families must agree") {
  const uint8_t nonce[recover::kChanNonceBytes] = {1};
  sockaddr_in c4{}, s4{};
  c4.sin_family = s4.sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.1", &c4.sin_addr);
  inet_pton(AF_INET, "10.0.0.2", &s4.sin_addr);
  c4.sin_port = htons(40001);
  s4.sin_port = htons(7001);
  sockaddr_in6 c6 = v6("::ffff:10.0.0.1", 40001), s6 = v6("::ffff:10.0.0.2", 7001);
  recover::ChannelBinding b4, b6, mixed;
  REQUIRE(recover::channel_binding_from(reinterpret_cast<sockaddr*>(&c4),
                                        reinterpret_cast<sockaddr*>(&s4), nonce,
                                        &b4) == Status::ok);
  REQUIRE(recover::channel_binding_from(reinterpret_cast<sockaddr*>(&c6),
                                        reinterpret_cast<sockaddr*>(&s6), nonce,
                                        &b6) == Status::ok);
  CHECK(b4.cm.family == 4);
  CHECK(b6.cm.family == 6);
  CHECK(b4.cm.client_port == 40001);
  CHECK(b4.cm.server_port == 7001);
  uint8_t e4[recover::kChannelBindingBytes], e6[recover::kChannelBindingBytes];
  recover::encode_channel_binding(b4, e4);
  recover::encode_channel_binding(b6, e6);
  CHECK(memcmp(e4, e6, sizeof e4) != 0);
  CHECK(recover::channel_binding_from(reinterpret_cast<sockaddr*>(&c4),
                                      reinterpret_cast<sockaddr*>(&s6), nonce,
                                      &mixed) == Status::invalid);
}
