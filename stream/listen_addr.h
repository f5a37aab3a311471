// The IPv4 address a listening socket's rdma_cm rendezvous listens on
// (docs/protocol.md §1).  A dual-stack IPv6 socket (the JVM's, gRPC's, any
// server bound to `::`) accepts IPv4 clients through IPv4-mapped addresses,
// and those connections are IPv4 to xpress (recover/upgrade_wire.h names
// their 4-tuple as IPv4): its rendezvous listens on the IPv4 form of its
// address.  Native IPv6 connections are not upgraded yet (reason
// handshake_failed), so an IPv6-only socket gets no rendezvous.
#pragma once
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

namespace xp::stream {

// False when ss (the socket's own address) takes no IPv4 clients.
inline bool listen_addr_v4(const sockaddr_storage& ss, bool v6only, sockaddr_in* out) {
  *out = sockaddr_in{};
  out->sin_family = AF_INET;
  if (ss.ss_family == AF_INET) {
    memcpy(out, &ss, sizeof *out);
    return true;
  }
  if (ss.ss_family != AF_INET6 || v6only) return false;
  sockaddr_in6 a;
  memcpy(&a, &ss, sizeof a);
  out->sin_port = a.sin6_port;
  if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) return true; // `::`: every IPv4 address too
  if (!IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) return false;  // a native IPv6 address only
  memcpy(&out->sin_addr, a.sin6_addr.s6_addr + 12, 4);
  return true;
}

} // namespace xp::stream
