// Which IPv4 address a listening socket's rendezvous takes
// (stream/listen_addr.h): dual-stack IPv6 listeners take their IPv4 clients.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <string>

#include "stream/listen_addr.h"

using namespace xp::stream;

namespace {

sockaddr_storage v6(const char* text, uint16_t port) {
  sockaddr_storage ss{};
  auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
  a->sin6_family = AF_INET6;
  a->sin6_port = htons(port);
  REQUIRE(inet_pton(AF_INET6, text, &a->sin6_addr) == 1);
  return ss;
}

std::string text(const sockaddr_in& a) {
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a.sin_addr, b, sizeof b);
  return std::string(b) + ":" + std::to_string(ntohs(a.sin_port));
}

} // namespace

TEST_CASE("listen address: IPv4 as it is; dual-stack :: and v4-mapped take IPv4 clients") {
  sockaddr_in out;
  sockaddr_storage ss{};
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  a4->sin_family = AF_INET;
  a4->sin_port = htons(80);
  inet_pton(AF_INET, "10.77.0.2", &a4->sin_addr);
  REQUIRE(listen_addr_v4(ss, false, &out));
  CHECK(text(out) == "10.77.0.2:80");

  REQUIRE(listen_addr_v4(v6("::", 8080), false, &out));
  CHECK(out.sin_family == AF_INET);
  CHECK(text(out) == "0.0.0.0:8080");
  REQUIRE(listen_addr_v4(v6("::ffff:10.77.0.2", 9000), false, &out));
  CHECK(text(out) == "10.77.0.2:9000");
}

TEST_CASE("listen address: IPv6-only sockets and native IPv6 addresses get no rendezvous yet") {
  sockaddr_in out;
  CHECK_FALSE(listen_addr_v4(v6("::", 8080), true, &out));
  CHECK_FALSE(listen_addr_v4(v6("::1", 8080), false, &out));
  CHECK_FALSE(listen_addr_v4(v6("fd00::2", 8080), false, &out));
  sockaddr_storage unix_ss{};
  unix_ss.ss_family = AF_UNIX;
  CHECK_FALSE(listen_addr_v4(unix_ss, false, &out));
}
