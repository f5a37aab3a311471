// The address a listening socket's rdma_cm rendezvous listens on
// (docs/protocol.md §1).  An IPv4 socket: its address.  A dual-stack IPv6
// socket bound to `::` (the JVM's, gRPC's) takes IPv4 clients through
// IPv4-mapped addresses, whose connections are IPv4 to xpress
// (recover/upgrade_wire.h names their 4-tuple as IPv4), and native IPv6
// clients: its rendezvous listens on `::` for both (IPv6 only for an
// IPV6_V6ONLY socket, whose port another socket may hold for IPv4).  A
// socket bound to an IPv4-mapped address listens on its IPv4 form, one
// bound to a native IPv6 address on that address.
#pragma once
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

namespace xp::stream {

// False when ss (the socket's own address) is no IPv4 or IPv6 address.
// *af_only: an IPv6 listener that must not take IPv4 requests.
inline bool listen_addr(const sockaddr_storage& ss, bool v6only, sockaddr_storage* out,
                        bool* af_only) {
  *out = sockaddr_storage{};
  *af_only = false;
  if (ss.ss_family == AF_INET) {
    memcpy(out, &ss, sizeof(sockaddr_in));
    return true;
  }
  if (ss.ss_family != AF_INET6) return false;
  sockaddr_in6 a;
  memcpy(&a, &ss, sizeof a);
  if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
    if (v6only) return false; // the kernel refuses such a bind anyway
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_port = a.sin6_port;
    memcpy(&v4.sin_addr, a.sin6_addr.s6_addr + 12, 4);
    memcpy(out, &v4, sizeof v4);
    return true;
  }
  sockaddr_in6 r{};
  r.sin6_family = AF_INET6;
  r.sin6_port = a.sin6_port;
  r.sin6_addr = a.sin6_addr;
  r.sin6_scope_id = a.sin6_scope_id;
  memcpy(out, &r, sizeof r);
  *af_only = v6only || !IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr);
  return true;
}

// The port (host order) of an address listen_addr gave.
inline uint16_t listen_port(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
}

} // namespace xp::stream
