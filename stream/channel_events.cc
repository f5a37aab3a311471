// Who takes a channel's completion events (docs/design.md, "Completion
// events").  A completion event costs a wake-up of some thread plus two
// system calls (ack, re-arm), and a woken engine thread then contends for
// the channel lock with the caller that was already polling.  So the
// completion queue is armed only while nobody busy-polls the channel:
//   - a thread that spins on a channel (a blocked call's spin phase) polls
//     it itself; an event taken while someone spins is not re-armed;
//   - the last spinner leaving does not re-arm either (it is likely back
//     within microseconds: ping-pong); the engine re-arms a channel nobody
//     spun on for kIdleRearmNs, ticking every kUnarmedTickMs meanwhile, or
//     every kBusyUnarmedTickMs while they are all still in use (a control
//     record such as a new stream's ATTACH, or the peer's credit, waits at
//     most about that long when nobody polls);
//   - a thread about to sleep in the kernel (a blocked call, epoll_wait,
//     poll, select) arms every unarmed channel first and polls it once, so
//     no completion that arrived while it was unarmed is left unseen;
//   - a thread that sends counts as a spinner for kSentLatelyNs: it polls
//     the channel on each send while the channel is unarmed (conn_io.cc,
//     send_stream), so a stream's credit and acknowledgements raise no
//     event, no wake-up of the engine on the sender's CPU; it skips the
//     poll when someone polled since the previous send (a request/response
//     loop's receive), so what arrives is seen by the next poll at the
//     latest, one send later.
// Invariant: a channel is unarmed only while some thread spins on it or
// sends on it, or for at most about kIdleRearmNs + kBusyUnarmedTickMs after
// the last one left (the engine looks every kUnarmedTickMs, or every
// kBusyUnarmedTickMs while all it left unarmed are in use),
// and never while a thread sleeps waiting for it, except a blocked call
// that leaves the channel to its spinner (conn_io.cc: it sleeps on its
// eventfd, which the spinner's polling writes).  Such a left sleeper
// shortens the "in use" grace: once nobody spun or sent on its channel for
// kLeftUncoveredNs the engine re-arms and polls it, looking every
// kLeftTickMs while left sleepers wait on an unarmed channel
// (kIdleLeftTickMs while all of them have waited kLeftIdleNs already).
#include <atomic>
#include <ctime>
#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "common/fork_parts.h"
#include "stream/engine_internal.h"
#include "stream/wake.h"

namespace xp::stream::engine {
namespace {

// Some channel may be unarmed (set on every disarm, cleared by a scan that
// found none left).
std::atomic<bool> g_maybe_unarmed{false};

// Some channel's poll is owed (take_event found its lock taken).
std::atomic<bool> g_polls_owed{false};

// The last arm_idle_channels() left channels unarmed, all still in use.
std::atomic<bool> g_unarmed_in_use{false};

// Some channel may hold a record (note_held; cleared by a scan that left
// none held).
std::atomic<bool> g_maybe_held{false};

// Blocked calls that left their channel to a spinner, over all channels,
// by kind (an idle one has waited kLeftIdleNs already), and how long the
// engine waits now (-1: no limit; a new left sleeper that needs a shorter
// look kicks it).
std::atomic<int> g_left_active{0}, g_left_idle{0};
std::atomic<int> g_engine_wait{0};

// The longest the engine may wait with these left sleepers (-1: any).
int left_cap() {
  if (g_left_active.load(std::memory_order_seq_cst) > 0) return kLeftTickMs;
  if (g_left_idle.load(std::memory_order_seq_cst) > 0) return kIdleLeftTickMs;
  return -1;
}

// Kick the engine out of a wait longer than cap ms (-1: no limit); pairs
// with engine_wait_ms(), which publishes the wait before it reads the
// counts above.
void kick_if_waiting_longer(int cap) {
  const int w = g_engine_wait.load(std::memory_order_seq_cst);
  if (w < 0 || w > cap) kick();
}
} // namespace

void left_enter(Channel* ch, bool idle) {
  ch->left_sleepers.fetch_add(1, std::memory_order_seq_cst);
  (idle ? g_left_idle : g_left_active).fetch_add(1, std::memory_order_seq_cst);
  // The engine either counts this sleeper before it sleeps or is kicked
  // out of a wait longer than it may be.
  if (g_maybe_unarmed.load()) kick_if_waiting_longer(idle ? kIdleLeftTickMs : kLeftTickMs);
}

void left_leave(Channel* ch, bool idle) {
  ch->left_sleepers.fetch_sub(1, std::memory_order_relaxed);
  (idle ? g_left_idle : g_left_active).fetch_sub(1, std::memory_order_relaxed);
}

int engine_wait_ms(int ms) {
  g_engine_wait.store(ms, std::memory_order_seq_cst);
  // Pairs with note_held(): it sees this wait (and kicks), or this sees it.
  if (g_maybe_held.load(std::memory_order_seq_cst) && (ms < 0 || ms > kHeldTickMs)) {
    ms = kHeldTickMs;
    g_engine_wait.store(ms, std::memory_order_relaxed);
  }
  if (!g_maybe_unarmed.load(std::memory_order_seq_cst)) return ms;
  const int cap = left_cap();
  if (cap >= 0 && (ms < 0 || ms > cap)) {
    ms = cap;
    g_engine_wait.store(ms, std::memory_order_relaxed);
  }
  return ms;
}

void engine_waited() {
  g_engine_wait.store(0, std::memory_order_relaxed);
}

void owe_poll(Channel* ch) {
  ch->poll_owed.store(1, std::memory_order_release);
  g_polls_owed.store(true, std::memory_order_release);
}

namespace {

void disarm(Channel* ch) {
  ch->armed_solicited.store(false, std::memory_order_seq_cst);
  ch->armed.store(false, std::memory_order_seq_cst);
}

// Threads asleep that may wait for room to send, and how many arms for
// solicited completions only were made (room_wait_enter widens them when
// this moved since it last looked).
std::atomic<int> g_room_waiters{0};
std::atomic<uint64_t> g_solicited_arms{0};
uint64_t g_widened_at = 0; // guarded by g_widen_mu
std::mutex g_widen_mu;
// Only a channel left unarmed makes the engine tick (wait_ms): one re-armed
// at once (nobody spins on it) costs the engine nothing.
// Left sleepers rely on the engine's look once a channel is unarmed: one in
// a longer wait is kicked (pairs with engine_wait_ms()).
void note_unarmed() {
  g_maybe_unarmed.store(true, std::memory_order_seq_cst);
  const int cap = left_cap();
  if (cap >= 0) kick_if_waiting_longer(cap);
}

std::vector<Channel*> channels_snapshot() {
  std::lock_guard<std::mutex> l(g().mu);
  return g().chans.snapshot();
}

} // namespace

bool spun_lately(Channel* ch, uint64_t now) {
  if (ch->spinners.load(std::memory_order_seq_cst) > 0) return true;
  if (now == 0) now = mono_ns();
  return now - ch->last_spin_ns.load(std::memory_order_relaxed) < kIdleRearmNs;
}

bool sent_lately(Channel* ch, uint64_t now) {
  if (now == 0) now = mono_ns();
  return now - ch->last_send_ns.load(std::memory_order_relaxed) < kSentLatelyNs;
}

bool rearm(Channel* ch) {
  if (ch->armed.exchange(true, std::memory_order_seq_cst)) return widen_arm(ch);
  ch->armed_solicited.store(false, std::memory_order_seq_cst);
  ch->link->arm(false);
  return true;
}

bool widen_arm(Channel* ch) {
  if (!ch->armed_solicited.load(std::memory_order_seq_cst) ||
      !ch->armed_solicited.exchange(false, std::memory_order_seq_cst))
    return false;
  ch->link->arm(false);
  return true;
}

bool arm_for_news(Channel* ch) {
  if (!params().solicited_events || !ch->link->peer_solicits()) return rearm(ch);
  if (ch->armed.load(std::memory_order_seq_cst)) return false;
  // Published before the room waiters and the held record are looked at
  // (pairs with room_wait_enter and note_held, all seq_cst): either this
  // sees them, or they see the flag and widen the arm.
  ch->armed_solicited.store(true, std::memory_order_seq_cst);
  g_solicited_arms.fetch_add(1, std::memory_order_seq_cst);
  if (ch->armed.exchange(true, std::memory_order_seq_cst)) return false; // armed meanwhile
  if (g_room_waiters.load(std::memory_order_seq_cst) != 0 ||
      ch->held.load(std::memory_order_seq_cst)) {
    ch->armed_solicited.store(false, std::memory_order_seq_cst);
    ch->link->arm(false);
    return true;
  }
  ch->link->arm(true);
  // Whoever widened (or disarmed) it since the flag was set may have armed
  // for every completion before this arm: once more for every completion.
  if (!ch->armed_solicited.load(std::memory_order_seq_cst)) ch->link->arm(false);
  return true;
}

bool room_wait_enter() {
  if (!params().solicited_events) return false; // no arm is ever solicited-only
  fork_parts::mark(fork_parts::kEngine);        // its lock is re-made with the engine's
  g_room_waiters.fetch_add(1, std::memory_order_seq_cst);
  uint64_t arms = g_solicited_arms.load(std::memory_order_seq_cst);
  // Under the lock while it widens: a waiter that finds nothing new to
  // widen must not go to sleep before the one that looks does.
  std::lock_guard<std::mutex> l(g_widen_mu);
  if (arms == g_widened_at) return true;
  g_widened_at = arms;
  // What came before the widening raised no event: poll, or leave the poll
  // to the lock's holder (as the engine does, owe_poll), never waiting for
  // a channel's lock under this one.
  for (Channel* ch : channels_snapshot())
    if (!ch->failed.load() && widen_arm(ch) && !progress_if_free(ch)) owe_poll(ch);
  return true;
}

void room_wait_leave() {
  g_room_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

void room_waits_after_fork() {
  // The child's only thread is in fork(), waiting for no room; the lock may
  // have been held by a thread that does not exist here.
  new (&g_widen_mu) std::mutex;
  g_room_waiters.store(0, std::memory_order_relaxed);
}

bool may_stay_unarmed(Channel* ch, uint64_t now) {
  if (!spun_lately(ch, now) && !sent_lately(ch, now)) return false;
  // Published before the sleepers are counted: a thread that registers as
  // a sleeper after this load sees the flag in its arm_before_sleep() and
  // arms ch itself (both seq_cst).  Without this order, or with the
  // flag published only after the decision, a poll/epoll sleeper that
  // armed just before the engine took ch's event slept with ch unarmed
  // until the engine's next tick, up to kBusyUnarmedTickMs.
  note_unarmed();
  if (ch->spinners.load(std::memory_order_seq_cst) > 0) return true;
  // Nobody polls ch right now: "spun or sent lately" bets that its thread
  // is back within microseconds.  A thread asleep waiting for anything
  // cannot take that bet: the record that ends its sleep must raise an
  // event.  (Blocked calls wait for their own connection: they sleep on
  // the completion fd, which they arm, or leave ch to a spinner, which
  // the engine's left-sleeper looks cover.)
  return !wake::any_sleepers();
}

void take_event(Channel* ch, bool leave_to_spinner) {
  if (ch->link->ack_event()) {
    disarm(ch);
    // Pairs with spin_leave(): either its caller sees armed == false
    // later (the engine re-arms after the idle time), or this load sees the
    // spinner gone.  A channel spun on lately stays unarmed: its thread is
    // likely back within microseconds (a request/response loop).
    if (!may_stay_unarmed(ch, mono_ns())) arm_for_news(ch);
  }
  // The engine thread leaves the polling to a thread that spins on ch now
  // (it polls again within microseconds, and before it sleeps it arms and
  // polls once more): taking the channel's lock here made that thread wait
  // for it in the futex, several times per event (glibc's lock is unfair
  // to a waiter).  Left unpolled, a completion is seen by the next spin,
  // by a sleeper's arm-and-poll, or by the idle re-arm (arm_idle_channels).
  // Nor does it wait for the lock of a channel a sender holds: it was
  // handed the lock and lost it again to the sender dozens of times per
  // event (4 KiB stream: 600 futex waits a second in the engine, each a
  // context switch on the sender's CPU).  It tries again shortly instead
  // (pay_owed_polls), and the sender, who holds the lock, pays the poll
  // itself when it sees one owed (conn_io.cc, send_stream).
  if (!leave_to_spinner)
    progress(ch);
  else if (ch->spinners.load(std::memory_order_seq_cst) == 0 && !progress_if_free(ch))
    owe_poll(ch);
}

bool polls_owed() {
  return g_polls_owed.load(std::memory_order_acquire);
}

void pay_owed_polls() {
  if (!g_polls_owed.exchange(false, std::memory_order_acq_rel)) return;
  for (Channel* ch : channels_snapshot()) {
    if (ch->poll_owed.load(std::memory_order_acquire) == 0) continue;
    if (ch->failed.load() || ch->spinners.load(std::memory_order_seq_cst) > 0) {
      ch->poll_owed.store(0, std::memory_order_relaxed); // someone polls it
      continue;
    }
    if (progress_if_free(ch)) {
      ch->poll_owed.store(0, std::memory_order_relaxed);
    } else {
      owe_poll(ch);
    }
  }
}

void spin_enter(Channel* ch) {
  ch->spinners.fetch_add(1, std::memory_order_seq_cst);
}

uint64_t spin_leave(Channel* ch) {
  uint64_t now = mono_ns();
  ch->last_spin_ns.store(now, std::memory_order_relaxed);
  // The last spinner of a channel left unarmed for it leaves while some
  // thread sleeps waiting for anything: nobody would poll ch for that
  // sleeper until the engine's tick (may_stay_unarmed).  Arm it, and poll
  // what arrived meanwhile (it raised no event).
  if (ch->spinners.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      !ch->armed.load(std::memory_order_seq_cst) && wake::any_sleepers() && !ch->failed.load() &&
      arm_for_news(ch))
    progress(ch);
  return now;
}

bool others_poll(Channel* ch, uint64_t mine) {
  if (ch->spinners.load(std::memory_order_seq_cst) > 0) return true;
  return spun_lately(ch) && ch->last_spin_ns.load(std::memory_order_relaxed) > mine;
}

namespace {
// Point the engine's registration of ch's completion fd at `events` (0: no
// wake-ups).  Re-enabling makes epoll look at the fd again, so an event the
// sleeper did not take (it woke for something else) still reaches the
// engine.  ENOENT (not watched yet, or no more) is fine.
void engine_watch(Channel* ch, uint32_t events) {
  int epfd = g().epfd, fd = ch->link->wait_fd();
  if (epfd < 0 || fd < 0) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = reinterpret_cast<uintptr_t>(ch);
  syscall(SYS_epoll_ctl, epfd, EPOLL_CTL_MOD, fd, &ev);
}
} // namespace

void sleep_enter(Channel* ch) {
  std::lock_guard<std::mutex> l(ch->sleep_mu);
  if (ch->sleepers++ == 0) engine_watch(ch, 0);
}

bool sleep_enter_alone(Channel* ch) {
  std::lock_guard<std::mutex> l(ch->sleep_mu);
  if (ch->sleepers != 0) return false;
  ch->sleepers = 1;
  engine_watch(ch, 0);
  return true;
}

void sleep_leave(Channel* ch) {
  std::lock_guard<std::mutex> l(ch->sleep_mu);
  if (--ch->sleepers == 0) engine_watch(ch, EPOLLIN);
}

bool maybe_unarmed() {
  return g_maybe_unarmed.load(std::memory_order_acquire);
}

void arm_before_sleep() {
  if (!g_maybe_unarmed.exchange(false, std::memory_order_seq_cst)) return;
  if (!g().started) return;
  for (Channel* ch : channels_snapshot()) {
    if (ch->failed.load()) continue;
    if (arm_for_news(ch)) progress(ch); // what arrived while unarmed raised no event
  }
}

uint64_t spin_budget_ns(uint32_t avg) {
  // The whole ceiling while waits average within it: a wait that outlasts
  // the spin pays a sleep and a wake-up, so a budget cut close to the
  // typical wait turns the slower answers of a request/response loop into
  // its tail (docs/results/tuning.md).  The spin ends when the data comes,
  // so only waits that end in a sleep cost the whole budget, and once they
  // dominate the average exceeds the ceiling: the minimum then (an idle
  // server sleeps at once and uses no CPU).
  constexpr uint32_t kMinSpinUs = 20;
  uint32_t max = params().spin_us;
  uint32_t lo = max < kMinSpinUs ? max : kMinSpinUs;
  return uint64_t{avg <= max ? max : lo} * 1000;
}

uint32_t wait_avg(uint32_t avg, uint64_t waited_ns) {
  uint64_t us = waited_ns / 1000;
  // Weight 1/4, each wait counted as at most twice the ceiling: it takes
  // three long waits in a row to end the spinning, however long each was.
  // Uncapped, one stall (a descheduled vCPU) would lift the average over
  // the ceiling for the next few round trips, each of which would then
  // sleep and pay a wake-up: one stall would become several slow answers.
  const uint64_t cap = 2ull * params().spin_us;
  if (us > cap) us = cap;
  return static_cast<uint32_t>((3ull * avg + us) / 4);
}

bool spin_poll_channels() {
  constexpr int kMax = 16;
  Channel* chs[kMax];
  int n = 0;
  if (!g().started) return false;
  {
    // A snapshot under the table lock; a channel unlinked right after is
    // freed only after a grace period (reap_channels), as for a data call
    // that read its connection's channel.
    std::unique_lock<std::mutex> l(g().mu, std::try_to_lock);
    if (!l.owns_lock()) return true; // the engine's, for a moment: spin on
    // The first kMax live channels, which then go to the back of the list:
    // the next round takes the next ones.
    auto& all = g().chans.live();
    const bool rotate = all.size() > kMax;
    Channel* seen[kMax];
    int k = 0;
    for (auto it = all.begin(); it != all.end() && k < kMax; ++k) {
      Channel* ch = seen[k] = *it;
      if (rotate)
        it = all.erase(it);
      else
        ++it;
      if (!ch->failed.load(std::memory_order_relaxed)) chs[n++] = ch;
    }
    if (rotate)
      for (int i = 0; i < k; ++i)
        all.add(seen[i]);
  }
  uint64_t now = mono_ns();
  for (int i = 0; i < n; ++i) {
    // As a spinner that just left: an event taken meanwhile is not re-armed
    // (take_event), the sleep that follows arms it (arm_before_sleep).
    chs[i]->last_spin_ns.store(now, std::memory_order_relaxed);
    progress(chs[i]);
  }
  return n > 0;
}

namespace {
// Blocked calls left ch to a spinner that is gone: nobody spins on it and
// nobody spun or sent on it for kLeftUncoveredNs.
bool uncovered(Channel* ch, uint64_t now) {
  if (ch->left_sleepers.load(std::memory_order_seq_cst) == 0) return false;
  if (ch->spinners.load(std::memory_order_seq_cst) > 0) return false;
  if (now - ch->last_spin_ns.load(std::memory_order_relaxed) < kLeftUncoveredNs) return false;
  return now - ch->last_send_ns.load(std::memory_order_relaxed) >= kLeftUncoveredNs;
}
} // namespace

void arm_idle_channels() {
  if (!g_maybe_unarmed.exchange(false, std::memory_order_seq_cst)) return;
  uint64_t now = mono_ns();
  bool left = false;
  for (Channel* ch : channels_snapshot()) {
    if (ch->failed.load() || ch->armed.load()) continue;
    if (may_stay_unarmed(ch, now) && !uncovered(ch, now)) {
      left = true;
      continue;
    }
    if (arm_for_news(ch)) progress(ch);
  }
  g_unarmed_in_use.store(left, std::memory_order_release);
  if (left) g_maybe_unarmed.store(true, std::memory_order_seq_cst);
}

bool unarmed_in_use() {
  return g_unarmed_in_use.load(std::memory_order_acquire);
}

void note_held(Channel* ch) {
  if (ch->held.load(std::memory_order_relaxed)) return; // noted already
  ch->held.store(true, std::memory_order_seq_cst);      // pairs with arm_for_news
  if (!g_maybe_held.exchange(true, std::memory_order_seq_cst)) kick_if_waiting_longer(kHeldTickMs);
}

bool maybe_held() {
  return g_maybe_held.load(std::memory_order_acquire);
}

void post_idle_held() {
  if (!g_maybe_held.exchange(false, std::memory_order_seq_cst)) return;
  const uint64_t now = mono_ns();
  bool left = false;
  for (Channel* ch : channels_snapshot()) {
    if (!ch->held.load(std::memory_order_relaxed) || ch->failed.load()) continue;
    if (now - ch->last_write_ns.load(std::memory_order_relaxed) < kHeldIdleNs) {
      left = true; // its writer is at work: its next write or ACK posts it
      continue;
    }
    std::unique_lock<std::mutex> l(ch->mu, std::try_to_lock);
    if (!l.owns_lock()) {
      left = true;
      continue;
    }
    flow::RecordChannel& rc = ch->mux->channel();
    // A failure is found by the next poll of the channel (its link failed).
    (void)rc.flush_cork();
    const bool still = rc.corked();
    ch->held.store(still, std::memory_order_relaxed);
    left = left || still;
  }
  if (left) g_maybe_held.store(true, std::memory_order_seq_cst);
}

} // namespace xp::stream::engine
