// A verbs::Link on a real RC queue pair, connected with rdma_cm.  Set-up is
// synchronous with a timeout (it runs off the data path); the data path is
// ibv_post_send/ibv_poll_cq only.  The two ends exchange their receive ring
// (address, rkey, size) in the rdma_cm private data, next to up to
// kAppPrivateMax bytes of the caller's own.
#pragma once
#include <cstddef>
#include <sys/socket.h>

#include "common/status.h"
#include "verbs/link.h"

namespace xp::verbs {

struct RcLinkParams {
  size_t ring_bytes = 256 * 1024; // our receive ring (multiple of 64)
  uint32_t sq_depth = 256;
  uint32_t max_inline = 64;
  int timeout_ms = 3000; // each set-up step
  // The layer above's per-stream receive window, told to the peer (rounded
  // down to a power of two; Link::peer_stream_window): the two ends may be
  // configured differently.  0: not told.
  size_t stream_window = 0;
};

constexpr size_t kAppPrivateMax = 32;

// What a client learns once connected: the peer's app bytes in its accept,
// and the connection's rdma_cm addresses (ours, the peer's).
struct RcConnected {
  uint8_t app[kAppPrivateMax] = {};
  size_t app_len = 0;
  sockaddr_storage local{}, peer{};
};

// Client: connect from src (may be null) to dst; *info (if given) is filled.
Status rc_connect(const sockaddr* src, const sockaddr* dst, const RcLinkParams& p, const void* app,
                  size_t app_len, Link** out, RcConnected* info = nullptr);

class RcListener {
public:
  static Status listen(const sockaddr* addr, int backlog, RcListener** out);
  // Waits up to timeout_ms for one connection request; app_out receives the
  // client's private bytes (*app_len in: capacity, out: length).
  Status accept(const RcLinkParams& p, int timeout_ms, Link** out, void* app_out, size_t* app_len);
  int fd() const;
  ~RcListener();

private:
  RcListener() = default;
  struct Impl;
  Impl* impl_ = nullptr;
};

} // namespace xp::verbs
