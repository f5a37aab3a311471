// The engine's fork handlers (preload/'s pthread_atfork calls them): before
// the fork, streams on RDMA move to TCP and resumed ones turn raw; in the
// parent, sockets a fork shared are watched (stream/engine_fork.cc) and an
// accepted connection still upgrading goes to the child; in the child, the
// parent's engine state is dropped (docs/protocol.md §7).
#include <mutex>
#include <new>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "common/fork_parts.h"
#include "stream/engine.h"
#include "stream/engine_internal.h"
#include "stream/fork_handover.h"
#include "stream/move.h"
#include "stream/ready_source.h"
#include "stream/resume_fork.h"
#include "stream/wake.h"
#include "verbs/device.h"

namespace xp::stream {

// Each does nothing in a process whose engine state was never made
// (common/fork_parts.h): g() would make it.
void engine::before_fork() {
  if (!fork_parts::used(fork_parts::kEngine)) return;
  State& s = g();
  if (!s.started || s.cm == nullptr) return;
  fork_prepare();
  s.forking.store(true, std::memory_order_release);
  // No stream that exists at the fork goes back onto RDMA while the socket
  // is shared (the child may be the one using it: stream/engine_fork.cc
  // watches until it is not); one going back right now gives its new
  // channel up and goes on over TCP.
  std::vector<Channel*> folding;
  {
    std::lock_guard<std::mutex> l(s.mu);
    for (Conn* c : s.conns) {
      std::lock_guard<std::mutex> cl(c->mu);
      c->reup.never = true;
      note_fork_counts(c); // the child compares them (stream/fork_handover.h)
      if (c->resumed.load() && c->ch) {
        mark_failed(c->ch, ResumeCause::local);
        folding.push_back(c->ch);
      }
    }
  }
  for (Channel* ch : folding)
    channel_failed(ch);
  // Streams on RDMA move to TCP first: the child cannot use our queue
  // pairs, and whichever process uses the shared socket afterwards must
  // find the stream there (bounded wait: one round trip to each peer).
  move::for_fork();
  // Resumed streams (framed on TCP) turn back into plain TCP: parent and
  // child would each number frames from their own copy of the state.
  resume::raw_for_fork();
  // Wait out a switch in progress (switches happen under Conn::mu); the
  // moved streams' byte counts are taken last (stream/engine_fork.cc).
  std::lock_guard<std::mutex> l(s.mu);
  for (Conn* c : s.conns) {
    c->mu.lock();
    mark_fork_bytes(c);
    c->mu.unlock();
  }
}

void engine::after_fork_parent() {
  if (!fork_parts::used(fork_parts::kEngine)) return;
  State& s = g();
  if (!s.started) return;
  std::vector<Conn*> cs;
  {
    std::lock_guard<std::mutex> l(s.mu);
    for (Conn* c : s.conns) {
      c->ref();
      cs.push_back(c);
    }
  }
  {
    // An accepted connection whose upgrade can start over goes to the
    // child (stream/fork_handover.h); the others stay on TCP.
    std::lock_guard<std::mutex> l(s.mu);
    for (Conn* c : cs) {
      std::lock_guard<std::mutex> cl(c->mu);
      if (c->phase.load() == Phase::upgrading && !c->resumed.load() && !c->tx_rdma.load() &&
          !c->rx_rdma.load() && !c->closed.load())
        (void)hand_over(c);
    }
  }
  for (Conn* c : cs) {
    {
      std::lock_guard<std::mutex> l(c->mu);
      if (c->phase.load() == Phase::upgrading && !c->resumed.load() && !c->tx_rdma.load() &&
          !c->rx_rdma.load())
        fail(c, Reason::shared_by_fork);
    }
    c->unref();
  }
  s.forking.store(false, std::memory_order_release);
  fork_shares();
}

void engine::on_fork_child() {
  if (!fork_parts::used(fork_parts::kEngine)) return;
  room_waits_after_fork();
  // The parent's thread, channels and rdma_cm state do not exist here.  A
  // child of a process that already used rdma_cm cannot use it again (its
  // librdmacm state names the parent's device contexts), so it keeps every
  // new connection on TCP.  Streams that were on RDMA moved to TCP before
  // the fork (stream/move.cc): the child's copy works as the parent's does.
  // A fork between another thread's first use and its making of the state
  // (state_once): no state to re-make, and none made here (a child of a
  // multithreaded parent allocates nothing it need not).
  State* sp = g_if_created();
  if (sp == nullptr) {
    forks_after_fork_child();
    return;
  }
  State& s = *sp;
  new (&s.mu) std::mutex();
  new (&s.qmu) std::mutex();
  if (s.used_rdma) s.forked_child = true;
  forks_after_fork_child();
  // The engine thread stayed in the parent: nothing here wakes sleepers
  // (stream/wake.h), and a moved stream still in user mode (bytes buffered
  // at the fork) is looked at only by the child's own calls.
  if (s.started) wake::set_no_waker(true);
  // Nothing here allocates (after fork() in a multithreaded parent only
  // async-signal-safe work is sure to be safe): the connections this child
  // may claim are moved to the back of the table, the others unlinked.
  const size_t n = s.conns.size();
  size_t kept = 0;
  // The engine's epoll set and command eventfd are the parent's (an epoll
  // set is shared across fork: removing a socket here would remove the
  // parent's watch of it).
  if (s.epfd >= 0) syscall(SYS_close, s.epfd);
  if (s.cmdfd >= 0) syscall(SYS_close, s.cmdfd);
  s.epfd = s.cmdfd = -1;
  auto it = s.conns.begin();
  for (size_t i = 0; i < n; ++i) {
    Conn* c = *it;
    ++it;
    new (&c->mu) std::mutex();
    // A parent's thread that took TCP bytes but had not counted their edge
    // (ConnReady::take_tcp_bytes, edge_tcp_bytes) does not exist here: the
    // bytes are untaken again, so the next look or relay counts the edge.
    c->ready.tcp_rx_seen.store(c->ready.tcp_rx_edged.load(std::memory_order_relaxed),
                               std::memory_order_relaxed);
    // The channel is the parent's: its lock may have been held by one of
    // the parent's threads at the fork and stays held here forever (close
    // would wait on it), and its queue pair is not ours to use.  Its link
    // in that channel's table is made anew, unlinked (the table is the
    // parent's; a kept connection joins a channel of the child's later).
    c->ch = nullptr;
    new (&c->in_channel) ConnHook();
    if (c->resumed.load()) {
      s.inherited_user_mode = true; // served by our calls, unknown to any engine here
      // A resumed stream whose bytes for the kernel were still queued at
      // the fork: the parent sends them; a second copy would duplicate
      // them, so the child's is reset (never shared with the parent).
      if (c->at_fork.unsafe) {
        c->dead.store(true);
        c->err_pending.store(true);
        if (c->rs) {
          c->rs->broken = true;
          c->rs->tx = Resume::Tx::dead;
          c->rs->out.consume(c->rs->out.size());
        }
      }
      continue;
    }
    // The peer's SWITCH may have arrived after the streams moved (between
    // before_fork and the fork): the parent resumes that stream by the
    // failure path (after_fork_parent), frames follow on TCP, so the child
    // must not read it as plain TCP.
    const bool peer_switched =
        c->sess.rx_mode() == Mode::rdma || (c->st != nullptr && c->st->rx_started());
    if (c->phase.load() == Phase::upgrading && !c->tx_rdma.load() && !c->rx_rdma.load() &&
        c->sess.tx_mode() != Mode::rdma && !peer_switched) {
      // Nothing moved over RDMA yet: the kernel socket has every byte.  An
      // accepted one may be this child's to upgrade (stream/fork_handover.h).
      if (keep_for_claim(c)) {
        // The parent's table reference, now ours.
        s.conns.remove(c);
        s.conns.add(c);
        ++kept;
        continue;
      }
      c->phase.store(Phase::tcp);
      c->reason = Reason::shared_by_fork;
      if (!c->closed.load()) notify_mode(c->sock(), nullptr);
    } else if (c->phase.load() != Phase::tcp) {
      // A stream that could not move before the fork (a direction switched
      // just then) lives in the parent's queue pair: a reset here (the
      // parent goes on with it; nothing is sent from here).
      c->dead.store(true);
      c->err_pending.store(true);
    }
  }
  s.forking.store(false);
  while (s.conns.size() > kept)
    s.conns.erase(s.conns.begin()); // their references: forgotten
  claims_after_fork_child();
  s.chans.forget_all();
  clear_pending(g());
  s.listeners.clear();
  s.start_queue.clear();
  s.serve_queue.clear();
  s.publish_backlog = false; // what the parent could not publish is the parent's
  s.private_l = nullptr;
  // Never start again in this process if the parent had, except for the
  // connections it may claim (a fresh engine: its own rdma_cm channel,
  // device context, protection domains and queue pairs).
  s.started = s.used_rdma && kept == 0;
  if (kept != 0) verbs::fresh_cm_for_fork_child();
  s.cm = nullptr;
}

} // namespace xp::stream
