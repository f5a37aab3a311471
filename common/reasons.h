// How a connection is carried, and why it is not on RDMA.  The names are
// stable: statistics, logs, xpress-stat and tests use them.
#pragma once
#include <cstdint>

namespace xp {

enum class Mode : uint8_t { tcp = 0, rdma = 1, count };

enum class Reason : uint8_t {
  none = 0,              // on RDMA (or not decided yet)
  disabled,              // XPRESS_ENABLE=0, or an invalid configuration value
  rule_denied,           // XPRESS_RULES (or the default rules) said deny
  no_device,             // this host has no usable RDMA device
  not_stream_socket,     // UDP, raw, or not AF_INET/AF_INET6
  peer_not_accelerated,  // the peer does not run xpress (or has no RDMA)
  handshake_failed,      // the upgrade handshake failed or is unavailable
  handshake_timeout,     // the peer did not answer the upgrade in time
  resources_exhausted,   // no QP/memory/credits for another stream
  rdma_error_fallback,   // RDMA failed mid-stream; the stream continued on TCP
  closed_during_upgrade, // the application closed it before the upgrade finished
  fork_after_rdma,       // a fork child of a process that already used RDMA
  shared_by_fork,        // forked while its upgrade was under way: parent and child share it
  kernel_tls,            // the program turned kernel TLS on (TCP_ULP "tls", SOL_TLS)
  io_uring,       // the process has an io_uring, which reads and writes sockets in the kernel
  ipsec,          // an xfrm (IPsec) policy covers the connection, or the socket has its own
  kernel_feature, // another kernel feature that must see the bytes (BPF filter, zero-copy, repair)
  too_few_bytes,  // closed before it carried the bytes a binding proof covers (protocol.md §2)
  count
};

inline const char* mode_name(Mode m) {
  return m == Mode::rdma ? "rdma" : "tcp";
}

inline const char* reason_name(Reason r) {
  switch (r) {
  case Reason::none:
    return "none";
  case Reason::disabled:
    return "disabled";
  case Reason::rule_denied:
    return "rule_denied";
  case Reason::no_device:
    return "no_device";
  case Reason::not_stream_socket:
    return "not_stream_socket";
  case Reason::peer_not_accelerated:
    return "peer_not_accelerated";
  case Reason::handshake_failed:
    return "handshake_failed";
  case Reason::handshake_timeout:
    return "handshake_timeout";
  case Reason::resources_exhausted:
    return "resources_exhausted";
  case Reason::rdma_error_fallback:
    return "rdma_error_fallback";
  case Reason::closed_during_upgrade:
    return "closed_during_upgrade";
  case Reason::fork_after_rdma:
    return "fork_after_rdma";
  case Reason::shared_by_fork:
    return "shared_by_fork";
  case Reason::kernel_tls:
    return "kernel_tls";
  case Reason::io_uring:
    return "io_uring";
  case Reason::ipsec:
    return "ipsec";
  case Reason::kernel_feature:
    return "kernel_feature";
  case Reason::too_few_bytes:
    return "too_few_bytes";
  case Reason::count:
    break;
  }
  return "unknown";
}

} // namespace xp
