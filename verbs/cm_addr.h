// An rdma_cm id's address copied out (verbs/cm.cc, verbs/rc_link.cc).
#pragma once
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

namespace xp::verbs {

// IPv4 or IPv6; anything else (or none) leaves *out zeroed.
inline void copy_cm_addr(const sockaddr* a, sockaddr_storage* out) {
  memset(out, 0, sizeof *out);
  if (a != nullptr && (a->sa_family == AF_INET || a->sa_family == AF_INET6))
    memcpy(out, a, a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
}

} // namespace xp::verbs
