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

std::string text(const sockaddr_storage& ss) {
  char b[INET6_ADDRSTRLEN];
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, b, sizeof b);
    return "[" + std::string(b) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, b, sizeof b);
  return std::string(b) + ":" + std::to_string(ntohs(a->sin_port));
}

} // namespace

TEST_CASE("listen address: IPv4 as it is; v4-mapped on its IPv4 form") {
  sockaddr_storage out;
  bool af_only = true;
  sockaddr_storage ss{};
  auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
  a4->sin_family = AF_INET;
  a4->sin_port = htons(80);
  inet_pton(AF_INET, "10.77.0.2", &a4->sin_addr);
  REQUIRE(listen_addr(ss, false, &out, &af_only));
  CHECK(text(out) == "10.77.0.2:80");
  CHECK_FALSE(af_only);
  REQUIRE(listen_addr(v6("::ffff:10.77.0.2", 9000), false, &out, &af_only));
  CHECK(out.ss_family == AF_INET);
  CHECK(text(out) == "10.77.0.2:9000");
  CHECK(listen_port(out) == 9000);
}

TEST_CASE("listen address: :: takes both families, IPv6-only sockets and IPv6 addresses IPv6") {
  sockaddr_storage out;
  bool af_only = true;
  REQUIRE(listen_addr(v6("::", 8080), false, &out, &af_only));
  CHECK(text(out) == "[::]:8080");
  CHECK_FALSE(af_only); // IPv4 clients of a dual-stack socket come here too
  REQUIRE(listen_addr(v6("::", 8080), true, &out, &af_only));
  CHECK(text(out) == "[::]:8080");
  CHECK(af_only); // another socket may hold 0.0.0.0:8080
  REQUIRE(listen_addr(v6("fd00::2", 8081), false, &out, &af_only));
  CHECK(text(out) == "[fd00::2]:8081");
  CHECK(listen_port(out) == 8081);
  CHECK(af_only);
  CHECK_FALSE(listen_addr(v6("::ffff:10.77.0.2", 9000), true, &out, &af_only));
  sockaddr_storage unix_ss{};
  unix_ss.ss_family = AF_UNIX;
  CHECK_FALSE(listen_addr(unix_ss, false, &out, &af_only));
}
