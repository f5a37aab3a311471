// One connection's readiness as the engine and the data calls last saw it
// (docs/protocol.md §6): the bits poll/epoll read, and the edge counters
// that EPOLLET registrations compare (Conn::ready_gen).
//
// Lock rule: the atomics are read without a lock by readiness and data
// calls and written by the engine thread and data calls; seen_* only under
// Channel::mu (engine::refresh).
#pragma once
#include <atomic>
#include <cstdint>

namespace xp::stream {

struct ConnReady {
  std::atomic<uint32_t> tcp_bits{0};    // EPOLL* of the kernel socket (engine's ET watch)
  std::atomic<uint32_t> stream_bits{0}; // Conn::kIn/kOut/kFin/kReset/kWriteShut
  std::atomic<uint32_t> resume_bits{0}; // the same for a resumed connection's TCP side (resume.cc)
  std::atomic<uint32_t> gen{0};         // edges for everyone (reset, close, mode, HUP/ERR)
  std::atomic<uint32_t> gen_in{0};      // edges for readers: bytes, end of stream
  std::atomic<uint32_t> gen_out{0};     // edges for writers: room appeared
  // The kernel's bytes received at the last edge (only grows: take_tcp_bytes),
  // and how far the EPOLLIN edges of those taken were counted (follows it
  // within a few instructions: edge_tcp_bytes).
  std::atomic<uint64_t> tcp_rx_seen{0};
  std::atomic<uint64_t> tcp_rx_edged{0};
  std::atomic<uint32_t> last_ready{0}; // Conn::ready_events() when last looked at (edges)
  // Edge detection for stream changes (engine::refresh, Channel::mu).
  uint64_t seen_received = 0, seen_acked = 0;
  uint32_t seen_bits = 0;

  // The kernel's count of bytes received reached n: true when that is more
  // than anyone took before (the caller then owes their EPOLLIN edge,
  // edge_tcp_bytes).  Each byte is taken once, by whoever comes first (the
  // engine's relay, an exclusive look's catch_up, note_ready: fresh_in_edge).
  bool take_tcp_bytes(uint64_t n) {
    uint64_t old = tcp_rx_seen.load(std::memory_order_acquire);
    while (old < n && !tcp_rx_seen.compare_exchange_weak(old, n, std::memory_order_acq_rel))
      ;
    return old < n;
  }
  void edge_tcp_bytes(uint64_t n) {
    gen_in.fetch_add(1, std::memory_order_acq_rel);
    uint64_t e = tcp_rx_edged.load(std::memory_order_relaxed);
    while (e < n && !tcp_rx_edged.compare_exchange_weak(e, n, std::memory_order_acq_rel))
      ;
  }
  // Both in one step: true when this took bytes and counted their edge.
  bool take_and_edge(uint64_t n) {
    if (!take_tcp_bytes(n)) return false;
    edge_tcp_bytes(n);
    return true;
  }
};

// The file's O_NONBLOCK and SO_RCVTIMEO/SO_SNDTIMEO (ms, -1 none) as of
// io::fd_options_changed() generation `gen` (0: never read): asked once,
// not per blocking call (conn_io.cc).  Atomics: data calls of any thread.
struct ConnOpts {
  std::atomic<uint32_t> gen{0};
  std::atomic<bool> nonblock{false};
  std::atomic<int64_t> rcvtimeo_ms{-1}, sndtimeo_ms{-1};
  // How long this connection's blocked calls waited lately (us, moving
  // average): the spin budget follows it (conn_io.cc Waiter).
  std::atomic<uint32_t> wait_avg_us{0};
};

} // namespace xp::stream
