// One TCP connection that xpress tries to carry over RDMA (docs/protocol.md):
// its upgrade session, its stream on a channel once bound, and the state the
// socket calls and the readiness layer read.
//
// Phases: upgrading (bytes still flow on TCP; the handshake runs beside) ->
// rdma (at least one direction switched) | tcp (the upgrade failed before
// any switch: from then on the kernel serves the socket directly).
//
// Locks, in this order: Conn::mu (session, the TCP side before a switch),
// then Channel::mu (the mux and its streams).  Data calls after both
// directions switched take only Channel::mu.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>

#include "common/ptr_table.h"
#include "common/reasons.h"
#include "recover/upgrade.h"
#include "stream/conn_fork.h"
#include "stream/conn_ready.h"
#include "stream/conn_rendezvous.h"
#include "stream/mux.h"
#include "stream/ready_source.h"
#include "stream/resume.h"

namespace xp::stream {

struct Channel;
struct ListenShare;

enum class Phase : uint8_t { upgrading, rdma, tcp };

// A connection's link in one table (ConnTable below).
using ConnHook = TableHook;

class Conn final : public ReadySource {
public:
  Conn(int fd, const recover::SessionParams& p) : fd(fd), sess(p), role(p.role), tuple(p.tuple) {}
  ~Conn() {
    if (rs) resume::release(rs);
  }

  // The kernel socket's fd.  It changes only when the program closes this
  // number while a dup of it stays open (the dup becomes the name we use).
  int sock() const { return fd.load(std::memory_order_acquire); }

  uint32_t ready_events() const override;
  int kernel_watch(short* events) const override;
  Channel* sleep_channel() const override;
  uint32_t ready_gen(uint32_t events) const override {
    // gen: edges for every registration; gen_in / gen_out: for those that
    // ask for reading / writing.  The sum changes when any of its terms do.
    uint32_t g = ready.gen.load(std::memory_order_acquire);
    if (events & (0x001 | 0x002 | 0x2000))
      g += ready.gen_in.load(std::memory_order_acquire);                    // IN PRI RDHUP
    if (events & 0x004) g += ready.gen_out.load(std::memory_order_acquire); // OUT
    return g;
  }

  void ref() { refs.fetch_add(1, std::memory_order_relaxed); }
  void unref(); // deletes at zero
  // The references held now (unit tests).
  uint32_t ref_count() const { return refs.load(std::memory_order_relaxed); }

  std::atomic<int> fd;
  std::mutex mu;
  recover::UpgradeSession sess;
  const recover::Role role;
  const recover::TcpTuple tuple;

  // Set under mu (and Channel::mu), read lock-free by data calls.
  Channel* ch = nullptr;
  Stream* st = nullptr;
  uint32_t sid = 0;
  std::atomic<Phase> phase{Phase::upgrading};
  std::atomic<bool> tx_rdma{false}; // our direction switched: writes go to the stream
  std::atomic<bool> rx_rdma{false}; // all TCP bytes below the peer's S were read
  std::atomic<bool> closed{false};  // the application closed the fd
  std::atomic<bool> dead{false};    // the stream failed (reset, channel lost)
  std::atomic<bool> rd_shut{false}; // shutdown(SHUT_RD): reads return end of stream
  // The channel failed and the stream continues on TCP (stream/resume.h):
  // data calls go to resume::, rs holds the state (under mu).
  std::atomic<bool> resumed{false};
  Resume* rs = nullptr;
  // Back to RDMA after a resume (stream/reattach.h), under mu.
  struct Reup {
    uint8_t state = 0;           // reattach::St
    bool never = false;          // moved at fork, or the process forked: stays on TCP
    bool returned = false;       // came back once: its TCP directions stay framed for good
    bool use_cm = false;         // next attempt: rdma_cm (an existing channel refused it)
    bool redirected = false;     // this attempt followed a redirect already
    bool peer_switch = false;    // the peer's SWITCH {S'} came over the new channel
    uint32_t delay_ms = 0;       // back-off before the next attempt
    uint64_t at_ms = 0;          // next attempt (engine clock; 0: not scheduled)
    uint64_t counter = 0;        // client: the attempt's counter; server: highest accepted
    uint64_t deadline_ms = 0;    // the attempt gives up then
    uint64_t back_ms = 0;        // when it last came back onto RDMA
    uint64_t tcp_since_us = 0;   // when it last went onto TCP (the return's log line)
    uint64_t peer_switch_at = 0; // that SWITCH's S'
  } reup;
  // A kernel feature needs the connection on TCP (stream/pin.h): no
  // direction switches any more (advance), and it never goes back.
  std::atomic<bool> pinned{false};
  // r->moved of a resumed stream, for lock-free readiness (resume.cc).
  std::atomic<bool> moved_stream{false};
  bool tx_shut = false;        // shutdown(SHUT_WR) or close while our direction was on TCP
  bool epipe_reported = false; // a write saw the reset once (then EPIPE)
  // A reset's error is reported once (like the kernel's sk_err): by the
  // next data call, and until then by POLLERR.
  std::atomic<bool> err_pending{false};
  Reason reason = Reason::none; // why phase became tcp

  ConnReady ready; // readiness and its edges (stream/conn_ready.h)
  ConnOpts opts;   // the file's blocking options, cached (stream/conn_ready.h)

  // EPOLLIN appeared (note_ready, not for new_data): whether that is an
  // edge still to count (kInEdge).  While our receive direction reads TCP
  // its bytes are the edge: taken here (their edge counted here: kInTook),
  // or taken by another, who counted it (kInCounted); in_counted: the
  // caller took the count just now (kInCounted) (engine.cc).
  enum InEdge : uint8_t { kInEdge, kInCounted, kInTook };
  InEdge fresh_in_edge(bool in_counted);
  void catch_up() override; // engine.cc
  // Readiness may have changed: an EPOLLET edge (gen) when bytes arrived or
  // a condition appeared that was not there before.  in_counted: the
  // caller took the kernel's byte count just now (engine::tcp_event), so
  // EPOLLIN newly set from a receive direction on TCP is no edge of its
  // own: the bytes' edge was counted by whoever took them, and bytes that
  // came after that count raise another relay.  True: it took TCP bytes
  // and counted their edge, which the relay of them then does not count:
  // the caller wakes the sleepers (the relay's wake-up may have come
  // before this edge).
  bool note_ready(bool new_data, bool in_counted = false) {
    // The primary conditions only (their *NORM/*BAND companions differ
    // between the kernel's answer and the stream's for the same state).
    constexpr uint32_t kEdgeBits =
        0x001 | 0x002 | 0x004 | 0x008 | 0x010 | 0x2000; // IN PRI OUT ERR HUP RDHUP
    uint32_t now = ready_events() & kEdgeBits;
    uint32_t old = ready.last_ready.exchange(now, std::memory_order_acq_rel);
    uint32_t fresh = now & ~old;
    if (fresh & (0x008 | 0x010)) { // ERR HUP: reported to every registration
      ready.gen.fetch_add(1, std::memory_order_acq_rel);
      return false;
    }
    InEdge in = kInEdge;
    if ((fresh & 0x001) && !new_data && (in = fresh_in_edge(in_counted)) != kInEdge)
      fresh &= ~0x001u;
    if (new_data || (fresh & (0x001 | 0x002 | 0x2000)))
      ready.gen_in.fetch_add(1, std::memory_order_acq_rel);
    if (fresh & 0x004) ready.gen_out.fetch_add(1, std::memory_order_acq_rel);
    return in == kInTook;
  }
  // TCP reported a hang-up while the stream had no FIN yet: when.
  uint64_t hup_since_ms = 0;
  bool counted_mode = false;  // statistics: connection counted under its final mode
  uint64_t deadline_ms = 0;   // the upgrade gives up after this (engine clock)
  uint8_t waits_extended = 0; // engine_tick.cc kMaxWaitExtensions (mu)
  // Bound, and nothing timed owed by either end (recover/upgrade.h
  // untimed: too few bytes crossed for a proof, or a server waiting for the
  // client's opening SHARE): only the programs' data calls move it on, so
  // the engine need not tick.
  std::atomic<bool> untimed{false};
  bool switch_acked = false; // the peer's verified SWITCH was acknowledged (engine_control.cc)

  ConnRendezvous rv; // how its channel is found (stream/conn_rendezvous.h)
  ConnFork at_fork;  // what a fork left (stream/conn_fork.h)

  // Links in the engine's table of connections and in its channel's
  // (ConnTable below): a close unlinks in O(1), nothing is allocated.
  ConnHook in_all, in_channel;

  static constexpr uint32_t kIn = 1, kOut = 2, kFin = 4, kReset = 8, kWriteShut = 16;

private:
  std::atomic<uint32_t> refs{1};
};

// The engine's table of connections and each channel's (common/ptr_table.h).
template <ConnHook Conn::*H> using ConnTable = PtrTable<Conn, H>;
using AllConns = ConnTable<&Conn::in_all>;
using ChannelConns = ConnTable<&Conn::in_channel>;

} // namespace xp::stream
