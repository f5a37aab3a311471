// After a fork, in the parent: which shared sockets are ours alone again
// (stream/fork_share.h), and what that changes for their streams
// (docs/protocol.md §7 "After a fork: who else holds the socket").
#include <algorithm>
#include <mutex>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fork_parts.h"
#include "common/lock_check.h"
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/fork_bytes.h"
#include "stream/fork_share.h"
#include "stream/reattach.h"

namespace xp::stream {
namespace {

// The watch is polled by the engine thread; fork() and close() change it
// from the program's threads.  A leaf lock: nothing else is taken under
// it, and it is never held during a scan of /proc.
std::mutex g_mu;
// Made at first use (under g_mu), never destroyed: a program's threads may
// still fork or close at exit.  A fork child only resets one that exists
// (its fork handler allocates nothing).
fork_share::Watch* g_watch = nullptr;
fork_share::Watch& watch() {
  if (g_watch == nullptr) g_watch = new fork_share::Watch();
  return *g_watch;
}
// boot_ticks() before the fork under way (fork_prepare).
uint64_t g_fork_ticks = 0;

// Samples of a socket's counts taken at once before giving up for now
// (fork_bytes::sample(): a call of ours in flight spoils one).
constexpr int kForkSamples = 16;
// How long a moved stream whose counts stayed busy is sampled again on
// the engine's ticks before its use since the fork is called unknown.
constexpr uint64_t kJudgeForMs = 10000;

// Moved streams no other process holds any more whose counts were busy
// when that was learnt, each with a reference and a deadline.  Engine
// thread only.
struct Unjudged {
  Conn* c;
  uint64_t until;
  bool back; // reattach::unshared() said it may go back onto RDMA
};
std::vector<Unjudged>* g_unjudged = nullptr; // made at first use, as g_watch
std::vector<Unjudged>& unjudged() {
  if (g_unjudged == nullptr) g_unjudged = new std::vector<Unjudged>();
  return *g_unjudged;
}

// Whether another process used a moved stream while it shared the socket
// (fork_bytes::observe), once nobody else holds it.  A stream our own
// calls keep busy is asked again on later ticks, until kJudgeForMs.
void judge_moved(uint64_t now) {
  std::vector<Unjudged>& v = unjudged();
  auto drop = [&v](size_t i) { // the entry and its reference
    Conn* c = v[i].c;
    v[i] = v.back();
    v.pop_back();
    c->unref();
  };
  for (size_t i = 0; i < v.size();) {
    Conn* c = v[i].c;
    bool judged = false, busy = false, was_valid, shared;
    fork_bytes::Use use = fork_bytes::Use::inconsistent;
    int fd;
    {
      std::lock_guard<std::mutex> l(engine::g().mu);
      shared = c->at_fork.ino != 0;
    }
    if (shared) {
      // A later fork shared the socket again: the mark stays for that
      // child's exit, which queues the stream again.
      {
        std::lock_guard<std::mutex> l(c->mu);
        c->at_fork.judging = false;
      }
      drop(i);
      continue;
    }
    {
      std::lock_guard<std::mutex> l(c->mu);
      fd = c->sock();
      was_valid = c->at_fork.mark.valid;
      if (!c->closed.load() && was_valid) {
        const Resume* r = c->rs;
        const uint64_t held_left = r ? r->pre.size() + r->buf.size() : 0;
        judged = fork_bytes::observe(fd, c->at_fork.mark, held_left, kForkSamples, &use, &busy);
        if (busy && now < v[i].until) {
          ++i;
          continue;
        }
        c->at_fork.mark.valid = false;
        c->at_fork.used_elsewhere = judged && use != fork_bytes::Use::alone;
      }
      c->at_fork.judging = false;
    }
    // A moved stream another process used stays on TCP for good; one only
    // this process used could go back (docs/protocol.md §7 "The return of
    // a moved stream": its switch is not built).
    if (v[i].back)
      XP_SLOG(XP_SLOG_INFO,
              "fd %d: no other process holds the socket since the fork any more: its stream may "
              "go back onto RDMA",
              fd);
    else
      XP_SLOG(XP_SLOG_INFO,
              "fd %d: no other process holds the socket since the fork any more: it stays on "
              "plain TCP (moved at a fork; %s",
              fd,
              !was_valid        ? "its use since the fork unknown)"
              : !judged && busy ? "its use since the fork unknown: our calls stayed in flight)"
              : !judged         ? "its use since the fork unknown)"
              : use == fork_bytes::Use::alone ? "no other process read or wrote it)"
              : use == fork_bytes::Use::other ? "another process read or wrote it)"
                                              : "counts inconsistent)");
    drop(i);
  }
}

} // namespace

bool engine::fork_judgements_pending() {
  return g_unjudged != nullptr && !g_unjudged->empty();
}

void engine::forked(pid_t child) {
  if (!fork_parts::used(fork_parts::kEngine)) return; // g() would make the state
  State& s = g();
  if (!s.started || s.cm == nullptr || child <= 0) return;
  std::lock_guard<std::mutex> l(g_mu);
  if (!watch().empty()) watch().add_holder(child);
}

void engine::fork_prepare() {
  g_fork_ticks = fork_share::boot_ticks();
}

void engine::mark_fork_bytes(Conn* c) {
  XP_ASSERT_HELD(c->mu);
  fork_bytes::Mark& m = c->at_fork.mark;
  // The earliest mark of a socket still shared stays: a child of an
  // earlier fork may have used the stream since.  One another process
  // used stays on TCP for good: no new mark.
  if ((m.valid && (c->at_fork.ino != 0 || c->at_fork.judging)) || c->at_fork.used_elsewhere) return;
  m = fork_bytes::Mark{};
  const Resume* r = c->rs;
  // Only a moved stream that owes the kernel nothing and reads nothing
  // more of it ahead (the peer's RESUME was read): from here every byte
  // our program moves through the kernel is one our calls count.
  if (c->closed.load() || !c->moved_stream.load() || r == nullptr || !r->moved || r->broken ||
      r->eof || r->fin || c->at_fork.unsafe || r->out.size() > 0 || r->tx != Resume::Tx::raw ||
      r->raw_left > 0 || (r->rx_framed && !r->rx_raw))
    return;
  m.held_rx = r->pre.size() + r->buf.size();
  // No mark while a call of ours stays in flight (a thread blocked in a
  // read): its use since the fork is then unknown, and it stays on TCP.
  for (int i = 0; i < kForkSamples && !m.valid; ++i)
    m.valid = fork_bytes::sample(c->sock(), &m.k, &m.app_tx, &m.app_rx) == fork_bytes::Sample::ok;
}

void engine::fork_shares() {
  State& s = g();
  if (!s.started || s.cm == nullptr) return;
  std::vector<uint64_t> inos;
  {
    std::lock_guard<std::mutex> l(s.mu);
    for (Conn* c : s.conns) {
      // Only streams that left RDMA at this fork or before can gain
      // anything; a connection that never was on RDMA stays as it is.
      if (c->closed.load() || !(c->resumed.load() || c->moved_stream.load())) continue;
      const uint64_t ino = fork_share::socket_inode(c->sock());
      if (ino == 0) continue;
      c->at_fork.ino = ino;
      inos.push_back(ino);
    }
  }
  std::lock_guard<std::mutex> l(g_mu);
  // A holder's exit wakes the engine thread (its epoll set): seen at once.
  watch().set_epoll(s.epfd, kTagForkWatch);
  watch().add_fork(inos, g_fork_ticks, now_ms());
}

void engine::tick_forks(uint64_t now) {
  // The scan runs without g_mu: close() of a watched socket (under
  // State::mu and Conn::mu) and fork() take it, and must not wait for a
  // pass over /proc.
  judge_moved(now);
  fork_share::Ask ask;
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (watch().empty() || !watch().due(now, &ask)) return;
  }
  const fork_share::Held held =
      fork_share::holders(ask.inos, static_cast<pid_t>(syscall(SYS_getpid)), ask.since_ticks);
  std::vector<uint64_t> freed;
  {
    std::lock_guard<std::mutex> l(g_mu);
    freed = watch().answer(ask, held, now);
  }
  if (freed.empty()) return;
  std::sort(freed.begin(), freed.end());
  std::vector<Conn*> cs;
  {
    State& s = g();
    std::lock_guard<std::mutex> l(s.mu);
    for (Conn* c : s.conns) {
      if (c->at_fork.ino == 0 || !std::binary_search(freed.begin(), freed.end(), c->at_fork.ino))
        continue;
      c->at_fork.ino = 0;
      c->ref();
      cs.push_back(c);
    }
  }
  for (Conn* c : cs) {
    bool back = false, moved = false, queued = false;
    {
      std::lock_guard<std::mutex> l(c->mu);
      moved = c->moved_stream.load();
      if (!c->closed.load()) back = reattach::unshared(c);
      queued = c->at_fork.judging;
      if (moved) c->at_fork.judging = true;
    }
    if (moved) {
      if (queued)
        c->unref(); // its entry is still there
      else
        unjudged().push_back({c, now + kJudgeForMs, back}); // keeps the reference
      continue;
    }
    XP_SLOG(XP_SLOG_INFO, "fd %d: no other process holds the socket since the fork any more: %s",
            c->sock(), back ? "its stream may go back onto RDMA" : "it stays on TCP");
    c->unref();
  }
}

void engine::fork_closed(uint64_t ino) {
  XP_ASSERT_HELD(g().mu);
  std::lock_guard<std::mutex> l(g_mu);
  watch().forget(ino);
}

void engine::forks_after_fork_child() {
  new (&g_mu) std::mutex();
  // The epoll set is the parent's (shared across fork): closing our
  // copies of the pidfds leaves the parent's registrations as they are.
  if (g_watch != nullptr) {
    g_watch->set_epoll(-1, 0);
    g_watch->reset();
  }
  // The parent judges those; their references stay unused in the child.
  if (g_unjudged != nullptr) g_unjudged->clear();
}

} // namespace xp::stream
