// Per-process statistics.  They live in one fixed-layout block that, when
// XPRESS_STATS_LIVE is on, is a shared-memory file /dev/shm/xpress-<pid>.stats
// so tools/xpress-stat can show them live; XPRESS_STATS prints them at exit.
// Counters are relaxed atomics: no lock, no syscall on the data path.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "alloc/mem_stats.h"
#include "common/reasons.h"
#include "common/switches.h"

namespace xp {

constexpr char kStatsMagic[8] = {'X', 'P', 'S', 'T', 'A', 'T', 'S', '1'};
// 3: the live file carries the registered-memory page (alloc::MemStats) at
// kMemStatsOffset, after the block's pages.  4: recovery counters.  5: back
// to RDMA after a resume.  6: bytes on TCP before the switch.
constexpr uint32_t kStatsVersion = 7; // 7: xpress-stat's requests
constexpr uint32_t kRequestReset = 1;
constexpr uint32_t kRequestLevel = 2;
constexpr uint32_t kRequestLevelShift = 8;
// stream::ResumeCause::count (stream/resume.h; checked in track.cc).
constexpr int kResumeCauses = 10;

using Counter = std::atomic<uint64_t>;

struct Counters {
  Counter sockets_tracked; // AF_INET/AF_INET6 sockets seen
  Counter listeners;
  Counter connections[static_cast<int>(Mode::count)]; // established, per mode
  Counter fallbacks[static_cast<int>(Reason::count)]; // tcp connections by reason
  // Application bytes by the path that carried them: tcp for connections
  // that stay on TCP, rdma for upgraded ones, except the bytes an upgraded
  // connection carried on TCP before each direction switched, counted in
  // *_before_switch.  (A stream resumed on TCP after its channel failed
  // stays under rdma; the recovery counters below count those streams.)
  Counter bytes_tx[static_cast<int>(Mode::count)];
  Counter bytes_rx[static_cast<int>(Mode::count)];
  Counter tx_before_switch, rx_before_switch;
  Counter msgs_tx[static_cast<int>(Mode::count)];
  Counter msgs_rx[static_cast<int>(Mode::count)];
  Counter conn_slots_full; // connections without a live row
  // Recovery (stream/resume.h): streams that went on over TCP after their
  // channel failed, by cause; those that could not (reset); bytes sent
  // again; time from the failure to the stream flowing (sum and max).
  Counter resumed[kResumeCauses];
  Counter resume_failed;
  Counter resent_bytes;
  Counter recover_us, recover_us_max;
  // Back to RDMA after a resume (stream/reattach.h): streams that returned
  // (either end), attempts and failed attempts (the client end drives),
  // time the returned streams spent on TCP (sum).
  Counter reup_returned, reup_attempts, reup_failed, reup_tcp_us;
};

// One row per open connection (for xpress-stat, like smcss).  The data
// path counts into its connection's row only: one cache line per
// connection, written by the thread using it, instead of process-wide
// counters that every thread's calls would bounce between cores.  A row's
// counts are folded into the totals (Counters) when the connection closes;
// totals() adds the open rows.
struct alignas(64) ConnSlot {
  std::atomic<uint32_t> in_use;
  int32_t fd;
  uint8_t mode, reason, role, family; // family 4 or 6
  uint16_t local_port, peer_port;
  Counter bytes_tx, bytes_rx, msgs_tx, msgs_rx;
  // Where each direction switched to RDMA (its first bytes crossed on TCP);
  // 0 until then.  Written once by the switch, read when the row is folded.
  Counter tx_switch_at, rx_switch_at;
  uint64_t opened_unix_ms;
  uint8_t local[16], peer[16];
  // Data calls begun and done (track::CallInFlight): equal when no call of
  // this process is between the kernel's move of its bytes and their
  // count above (stream/fork_bytes.h sample()).  A new row's generation
  // makes done equal begun: a call of the row's previous connection, or
  // one a thread never finished (cancelled, or left with longjmp), counts
  // nothing done in the new one.
  Counter calls_begun, calls_done, calls_gen;
};

struct StatsBlock {
  char magic[8];
  uint32_t version;
  int32_t pid;
  char comm[32];
  uint64_t started_unix_ms;
  uint32_t slot_count;
  // Requests from xpress-stat (-z, -l) that the process takes at its next
  // engine tick or new connection: kRequestReset, and kRequestLevel with a
  // log level in the bits of kRequestLevelShift.  0: none.
  std::atomic<uint32_t> request;
  Counters c;
  ConnSlot slots[sw::kStatsConnSlots];
};

namespace stats {
constexpr size_t kMemStatsOffset = (sizeof(StatsBlock) + 4095) & ~size_t{4095};
StatsBlock& block();
extern std::atomic<StatsBlock*> g_block;
inline Counters& c() {
  StatsBlock* b = g_block.load(std::memory_order_acquire);
  return __builtin_expect(b != nullptr, 1) ? b->c : block().c;
}

// Publish the block as /dev/shm/xpress-<euid>/<pid>.stats (first tracked
// socket, with XPRESS_STATS_LIVE=1).  The directory is the user's own, mode
// 0700 (a directory someone else made there, or open to others, is not
// used); the file is created with O_EXCL, mode 0600.
void publish_live();
// The engine's tick: the registered-memory counters copied into the live
// file, and xpress-stat's requests taken.
void on_tick();
// xpress-stat's requests, if any: counters of events start over (gauges
// and open connections stay), the log level changes.
void take_requests();
// In a fork child: the child's own file and zeroed counters; rows of inherited
// sockets stay (they are the child's too).
void after_fork_child();
// At exit: dump if XPRESS_STATS asks, and remove the live file.
void at_exit();

ConnSlot* claim_slot(int fd);
// Folds the row's counts into the totals and frees it.
void release_slot(ConnSlot* s);
// The connection changes mode for good (a kernel feature moved it to TCP):
// the row's bytes so far are counted under its old mode, later ones under `now`.
void rebase_slot(ConnSlot* s, Mode now);

// Totals including the open connections' rows.
struct Totals {
  uint64_t bytes_tx[2], bytes_rx[2], msgs_tx[2], msgs_rx[2];
  uint64_t tx_before_switch, rx_before_switch;
};
void totals(const StatsBlock& b, Totals* t);
// A process whose connections all stayed on TCP: true, and the top reasons
// ("name=count ...") in why.  For the hint line at exit.
bool nothing_accelerated(const StatsBlock& b, char* why, size_t n);
// The exit hint's level: warn (true) only when it names something to fix on
// a host that has an RDMA device: no connection went over RDMA and at least
// one fell back because an upgrade with an xpress peer failed
// (handshake_failed, handshake_timeout, resources_exhausted,
// rdma_error_fallback).  Otherwise info: a program's stderr is its own, and
// connections to peers without xpress, kept on TCP by rules or by kernel
// features, or on a host without a device, are no fault.
bool exit_hint_warns(const StatsBlock& b, bool device_present);

// Writes the human table (json=false) or one JSON object to out; the
// registered-memory counters too when mem is given.
void dump(FILE* out, const StatsBlock& b, bool json, const alloc::MemStats* mem = nullptr);
// A user's directory of live files, and a process's live file in it.
void live_dir(unsigned uid, char* out, size_t n);
void live_path(unsigned uid, int pid, char* out, size_t n);
} // namespace stats

} // namespace xp
