// Turning resumed streams back into plain TCP at fork (see resume_fork.h,
// docs/protocol.md §7 "At the fork").  Cold path: once per fork.
#include "stream/resume_fork.h"

#include <poll.h>
#include <unistd.h>
#include <vector>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "recover/resume_wire.h"
#include "stream/engine_internal.h"
#include "stream/resume_internal.h"
#include "stream/wake.h"

namespace xp::stream::resume {
namespace {

// How long the fork waits for the peers' RAW frames: one round trip, as
// for the move's answers (stream/move.cc).
constexpr uint64_t kAnswerMs = 1000;

// c->mu held: a stream this end can turn: our direction framed and ours
// to write, the peer's direction either raw or framed with its RESUME read
// and nothing of an earlier return to RDMA pending.
bool can_turn(const Conn* c, const Resume* r) {
  XP_ASSERT_HELD(c->mu);
  if (r == nullptr || c->closed.load() || c->ch != nullptr || c->phase.load() == Phase::tcp)
    return false;
  if (r->moved || r->broken || r->eof || r->fin || r->tx_eof || r->app_shut || r->shut_pending ||
      r->raw_owed)
    return false;
  if (r->tx != Resume::Tx::framed || r->out.space() < recover::kRawFrameBytes) return false;
  if (r->rx_back || r->again || r->ahead_len > 0 || r->rx_raw) return false;
  // In the middle of one of the peer's frames is fine: we read on to its RAW.
  return !r->rx_framed || (r->peer_resumed && r->raw_left == 0);
}

// c->mu held: our RAW after our last frame; our bytes are raw from here.
void write_raw(Resume* r) {
  uint8_t f[recover::kRawFrameBytes];
  recover::encode_raw(r->key, r->dir, r->tx_next, r->rx_next, f);
  r->out.put(f, sizeof f);
  r->tx = Resume::Tx::raw;
}

// Both directions raw (or ours shut): a moved stream from here on, handed
// back to the kernel once its buffers are read (resume.cc hand_back).
void become_moved(Conn* c, Resume* r) {
  r->moved = true;
  c->moved_stream.store(true, std::memory_order_release);
  c->reup.never = true;
}

} // namespace

void write_owed_raw(Conn* c, Resume* r) {
  if (!r->raw_owed || r->out.space() < recover::kRawFrameBytes) return;
  r->raw_owed = false;
  if (r->tx == Resume::Tx::framed) write_raw(r);
  become_moved(c, r);
}

bool on_peer_raw(Conn* c, Resume* r) {
  const recover::Dir peer = r->dir == recover::Dir::c2s ? recover::Dir::s2c : recover::Dir::c2s;
  uint64_t received = 0;
  if (recover::parse_raw(r->key, peer, r->frame, r->rpay, &received) != Status::ok) return false;
  // Its frames end here: every byte before it arrived (DATA frames never
  // leave a gap), and it names no byte of ours we did not send.
  if (!r->peer_resumed || r->rx_back || r->frame.seq != r->rx_next) return false;
  if (r->tx == Resume::Tx::framed && received > r->tx_next) return false;
  if (r->tx != Resume::Tx::framed && r->tx != Resume::Tx::raw && r->tx != Resume::Tx::shut &&
      r->tx != Resume::Tx::dead)
    return false; // waiting for a RESUME, or going back to RDMA: no state to turn from
  r->rx_raw = true;
  r->rx_skip = 0;
  c->reup.never = true;
  XP_SLOG(XP_SLOG_INFO, "fd %d: stream %u: the peer turned its direction to plain TCP at %llu%s",
          c->sock(), c->sid, static_cast<unsigned long long>(r->frame.seq),
          r->tx == Resume::Tx::framed ? " (it forks): ours follows" : "");
  if (r->tx == Resume::Tx::framed) {
    r->raw_owed = true; // after the frames queued before it
    write_owed_raw(c, r);
    return true;
  }
  become_moved(c, r);
  return true;
}

void raw_for_fork() {
  std::vector<Conn*> cs;
  {
    std::lock_guard<std::mutex> l(engine::g().mu);
    for (Conn* c : engine::g().conns) {
      if (!c->resumed.load() || c->closed.load() || c->phase.load() == Phase::tcp) continue;
      c->ref();
      cs.push_back(c);
    }
  }
  if (cs.empty()) return;
  const uint64_t t0 = engine::mono_us();
  // 1. Our RAW after our queued frames (each connection stays locked until
  // the fork's end of this: no data call slips a frame in after it).
  std::vector<Conn*> turning;
  for (Conn* c : cs) {
    c->mu.lock();
    Resume* r = c->rs;
    if (r == nullptr) continue;
    r->turning = true;
    flush_out(c, r);
    if (!r->moved) fill_rx(c, r); // the peer's RESUME (or RAW: we answer) may be in the kernel
    flush_out(c, r);
    if (!can_turn(c, r)) continue;
    write_raw(r);
    if (!r->rx_framed) become_moved(c, r); // the peer's direction was raw already
    flush_out(c, r);
    turning.push_back(c);
  }
  // 2. The peers' RAW frames (frames before them are read into the
  // buffers), our bytes into the kernel; bounded.
  const uint64_t end = engine::now_ms() + kAnswerMs;
  size_t answered = 0;
  while (true) {
    answered = 0;
    bool all = true;
    for (Conn* c : turning) {
      Resume* r = c->rs;
      if (r == nullptr) continue;
      flush_out(c, r);
      if (!r->moved && !r->broken && !r->eof) fill_rx(c, r);
      const bool done = r->moved || r->broken || r->eof;
      if (r->moved) ++answered;
      all = all && done && (r->out.size() == 0 || r->tx_eof);
    }
    if (all || engine::now_ms() >= end) break;
    usleep(200);
  }
  // 3. A stream still framed would be written and read by both processes,
  // each numbering frames from its own copy of the state (the peer drops
  // the later writer's bytes as duplicates), and one moved with bytes still
  // owed to the kernel would send them twice: the child's copy of either is
  // reset (engine::on_fork_child), so that a child using it fails loudly.
  for (Conn* c : cs) {
    Resume* r = c->rs;
    if (r != nullptr) r->turning = false;
    if (r != nullptr && !r->moved) {
      flush_out(c, r);
      c->at_fork.unsafe = true;
    } else if (r != nullptr && r->moved && r->out.size() > 0) {
      flush_out(c, r);
      c->at_fork.unsafe = r->out.size() > 0;
    }
    if (r != nullptr) settle(c, r, true);
  }
  for (Conn* c : cs) {
    c->mu.unlock();
    c->unref();
  }
  wake::notify();
  if (!turning.empty())
    XP_SLOG(XP_SLOG_INFO,
            "fork: %zu resumed stream(s) turned to plain TCP, %zu without the peer's answer, in "
            "%llu us",
            answered, turning.size() - answered,
            static_cast<unsigned long long>(engine::mono_us() - t0));
}

} // namespace xp::stream::resume
