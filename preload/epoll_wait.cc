// epoll_wait for sets with user-mode members (see epoll_state.h), and the
// sets nested in others, whose readability xpress keeps true.
#include <cerrno>
#include <climits>
#include <mutex>
#include <poll.h>

#include "preload/boundary.h"
#include "preload/epoll_internal.h"
#include "preload/readiness.h"
#include "stream/channel_sleep.h"
#include "stream/ready_source.h"
#include "stream/wake.h"

namespace xp::epoll {
namespace {

constexpr int kMaxNest = 5; // the kernel nests epoll sets 4 deep (EP_MAX_NESTS)
constexpr int kMaxEvents = static_cast<int>(INT_MAX / sizeof(epoll_event));
// Sleep slice when no wake-up could be registered (registry full).
constexpr int64_t kSliceNs = 10'000'000;

// ---- nested epoll sets

// The nested members of e, each with a reference (released on destruction).
struct Kids {
  static constexpr int kCap = 16;
  Nested k[kCap];
  int n = 0;
  explicit Kids(EpollState* e) {
    if (e->n_nested.load(std::memory_order_acquire) == 0) return;
    std::lock_guard<std::mutex> l(e->mu);
    for (const Nested& x : e->nested) {
      if (n == kCap) break;
      x.child->refs.fetch_add(1, std::memory_order_relaxed);
      k[n++] = x;
    }
  }
  ~Kids() {
    for (int i = 0; i < n; ++i)
      release(k[i].child);
  }
  Kids(const Kids&) = delete;
  Kids& operator=(const Kids&) = delete;
};

bool active(EpollState* e, int depth) {
  if (e->n_user.load(std::memory_order_acquire) != 0) return true;
  if (depth >= kMaxNest || e->n_nested.load(std::memory_order_acquire) == 0) return false;
  Kids kids(e);
  for (int i = 0; i < kids.n; ++i)
    if (active(kids.k[i].child, depth + 1)) return true;
  return false;
}

// Make e's kernel readability true to its user-mode members (and those of
// the sets nested in it) before someone looks at it from outside.
void refresh(EpollState* e, int depth) {
  if (depth < kMaxNest && e->n_nested.load(std::memory_order_acquire) != 0) {
    Kids kids(e);
    for (int i = 0; i < kids.n; ++i)
      refresh(kids.k[i].child, depth + 1);
  }
  if (e->n_user.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> l(e->mu);
  if (!e->wake_in_kernel || e->kick) return; // a kick stays until a waiter takes it
  // Clear what notify() or an earlier report left, then look again.
  readiness::eventfd_drain(e->wake);
  e->level = false;
  if (e->regs.reportable()) raise_level(e);
}

// Returns whether any nested member has user-mode members (refreshing them).
bool refresh_kids(EpollState* e) {
  if (e->n_nested.load(std::memory_order_acquire) == 0) return false;
  Kids kids(e);
  bool any = false;
  for (int i = 0; i < kids.n; ++i) {
    if (!active(kids.k[i].child, 1)) continue;
    refresh(kids.k[i].child, 1);
    any = true;
  }
  return any;
}

// A kernel event of a nested member may come from a wake-up xpress wrote:
// keep it only if the member really is readable now.
int validate_kids(EpollState* e, epoll_event* ev, int n) {
  if (n == 0 || e->n_nested.load(std::memory_order_acquire) == 0) return n;
  Kids kids(e);
  int out = 0;
  for (int i = 0; i < n; ++i) {
    bool keep = true;
    for (int j = 0; j < kids.n; ++j) {
      if (kids.k[j].data != ev[i].data.u64 || !active(kids.k[j].child, 1)) continue;
      refresh(kids.k[j].child, 1);
      pollfd p = {kids.k[j].fd, POLLIN, 0};
      keep = XP_REAL(poll, &p, 1, 0) == 1 && (p.revents & POLLIN);
      break;
    }
    if (!keep) continue;
    if (out != i) ev[out] = ev[i];
    ++out;
  }
  return out;
}

// The wake eventfds of e and of the sets nested in it that have user-mode
// members: registered as sleepers while a thread waits in the kernel on e.
// A set is registered under its own key, whatever its number of members:
// a member's change reaches it through the set's ready list (Reg::on_change
// wakes the set's sleepers, wake_set), so that other connections' changes
// do not wake it (a server whose workers each wait on their own set: every
// answer woke all of them).  Its `keyed` count says it has such sleepers,
// and makes a member that enters user mode meanwhile wake them.
struct WakeList {
  static constexpr int kCap = 8;
  static constexpr size_t kKeyedRegs = 64; // ChanWait: members looked through, at most
  int fds[kCap];
  EpollState* sets[kCap];
  const void* keys[kCap];
  bool keyed[kCap]; // false: registered for anything
  int n = 0;
  bool complete = true; // every set that needs one has one, and it fitted
  bool by_key = true;   // false: all for anything (a poll() over epoll sets)
  bool room = false;    // a user-mode member asks for EPOLLOUT
  void collect(EpollState* e, int depth) {
    if (e->n_user.load(std::memory_order_acquire) != 0) {
      std::lock_guard<std::mutex> l(e->mu);
      room = room || e->regs.user_out_count() != 0;
      if (e->wake_in_kernel && n < kCap) {
        sets[n] = e;
        keys[n] = e;
        keyed[n] = by_key;
        if (by_key) {
          e->keyed.fetch_add(1, std::memory_order_relaxed);
          watch_kernel_members(e);
        }
        fds[n++] = e->wake;
      } else {
        complete = false;
      }
    }
    if (depth >= kMaxNest || e->n_nested.load(std::memory_order_acquire) == 0) return;
    Kids kids(e);
    for (int i = 0; i < kids.n; ++i)
      if (active(kids.k[i].child, depth + 1)) collect(kids.k[i].child, depth + 1);
  }
  bool add(int i) const {
    return keyed[i] ? stream::wake::add_watch(fds[i], &keys[i], 1) : stream::wake::add(fds[i]);
  }
  void unkey(int i) const {
    if (!keyed[i]) return;
    std::lock_guard<std::mutex> l(sets[i]->mu);
    sets[i]->keyed.fetch_sub(1, std::memory_order_relaxed);
  }
};

struct Sleepers {
  WakeList w;
  int added = 0;
  bool ok = true; // false: some wake-up may not reach us (sleep in slices)
  stream::RoomWait room;
  explicit Sleepers(EpollState* e) {
    w.collect(e, 0);
    // Before the channels are armed and the final look (stream/channel_sleep.h).
    if (w.room) room.enter();
    ok = w.complete;
    for (; added < w.n; ++added) {
      if (!w.add(added)) {
        ok = false;
        break;
      }
    }
  }
  void remove() {
    for (int i = 0; i < added; ++i)
      stream::wake::remove(w.fds[i]);
    for (int i = 0; i < w.n; ++i)
      w.unkey(i);
    added = w.n = 0;
    room.leave();
  }
  ~Sleepers() { remove(); }
  Sleepers(const Sleepers&) = delete;
  Sleepers& operator=(const Sleepers&) = delete;
};

// The channels of e's user-mode members, whose completion fds a sleeper
// waits on itself (stream/channel_sleep.h): put into e's kernel set for the
// sleep (shared by the set's sleepers, counted in e->chan_regs) and taken
// out after it, so that nobody else sees them: an outer set, or a poll of
// the set's fd.  Only for sets with at most kKeyedRegs members (a larger
// one is left to the engine's relay: its members are not looked through).
class ChanWait {
public:
  ChanWait(EpollState* e, int epfd) : e_(e), epfd_(epfd) {
    if (!stream::ChannelSleep::enabled()) return;
    std::lock_guard<std::mutex> l(e->mu);
    if (e->regs.user_count() == 0 || e->regs.size() > WakeList::kKeyedRegs) return;
    for (size_t i = 0; i < e->regs.size() && chans_.size() < stream::ChannelSleep::kMax; ++i)
      if (const Reg& r = e->regs.at(i); r.src != nullptr) chans_.add(r.src);
  }
  ~ChanWait() { release(); }
  ChanWait(const ChanWait&) = delete;
  ChanWait& operator=(const ChanWait&) = delete;
  // True when a channel was polled (look again); else the channels this
  // thread sleeps on are in the kernel set.
  bool begin() {
    if (chans_.size() == 0) return false;
    if (chans_.begin()) return true;
    std::lock_guard<std::mutex> l(e_->mu);
    for (int i = 0; i < chans_.size();) {
      if (enroll(chans_.fd(i))) {
        enrolled_[n_enrolled_++] = chans_.fd(i);
        ++i;
      } else {
        chans_.drop(i);
      }
    }
    return false;
  }
  // After the kernel wait: the completion fds drop_reserved saw fire.
  void end(const int* fired, int nfired) {
    uint32_t bits = 0;
    for (int i = 0; i < chans_.size(); ++i)
      for (int j = 0; j < nfired; ++j)
        if (fired[j] == chans_.fd(i)) bits |= 1u << i;
    chans_.end(bits);
  }
  void release() {
    if (n_enrolled_ != 0) {
      std::lock_guard<std::mutex> l(e_->mu);
      for (int i = 0; i < n_enrolled_; ++i)
        withdraw(enrolled_[i]);
      n_enrolled_ = 0;
    }
    chans_.clear();
  }

private:
  // Under e->mu.
  bool enroll(int fd) {
    EpollState::ChanReg* free_reg = nullptr;
    for (EpollState::ChanReg& c : e_->chan_regs) {
      if (c.users != 0 && c.fd == fd) {
        ++c.users;
        return true;
      }
      if (c.users == 0 && free_reg == nullptr) free_reg = &c;
    }
    if (free_reg == nullptr) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kChanTag | static_cast<uint32_t>(fd);
    if (XP_REAL(epoll_ctl, epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    *free_reg = {fd, 1};
    return true;
  }
  void withdraw(int fd) {
    for (EpollState::ChanReg& c : e_->chan_regs) {
      if (c.users == 0 || c.fd != fd) continue;
      if (--c.users == 0) XP_REAL(epoll_ctl, epfd_, EPOLL_CTL_DEL, fd, nullptr);
      return;
    }
  }
  EpollState* e_;
  int epfd_;
  stream::ChannelSleep chans_;
  int enrolled_[stream::ChannelSleep::kMax];
  int n_enrolled_ = 0;
};

// ---- epoll_wait

int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// Started on first use: a wait that only passes through to the kernel (no
// user-mode member) never reads the clock.
struct Deadline {
  const WaitCall& c;
  bool started = false;
  bool infinite = false;
  int64_t end = 0; // 0: zero timeout
  explicit Deadline(const WaitCall& call) : c(call) {}
  int64_t left() { // ns, -1: no limit
    if (!started) {
      started = true;
      int64_t span;
      if (c.kind == WaitCall::pwait2) {
        infinite = c.ts == nullptr;
        span = infinite ? 0 : static_cast<int64_t>(c.ts->tv_sec) * 1'000'000'000 + c.ts->tv_nsec;
      } else {
        infinite = c.timeout_ms < 0;
        span = static_cast<int64_t>(c.timeout_ms) * 1'000'000;
      }
      if (!infinite && span != 0) end = now_ns() + span;
    }
    if (infinite) return -1;
    if (end == 0) return 0;
    int64_t l = end - now_ns();
    return l > 0 ? l : 0;
  }
};

// The application's kind of wait with timeout `ns` (-1: none); epoll_wait and
// epoll_pwait round up to whole milliseconds (never wake early).
int kernel_wait(int epfd, epoll_event* ev, int max, const WaitCall& c, int64_t ns) {
  if (c.kind == WaitCall::pwait2) {
    timespec ts = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    return XP_REAL(epoll_pwait2, epfd, ev, max, ns < 0 ? nullptr : &ts, c.mask);
  }
  int ms = -1;
  if (ns >= 0) {
    int64_t m = (ns + 999'999) / 1'000'000;
    ms = m > INT_MAX ? INT_MAX : static_cast<int>(m);
  }
  if (c.kind == WaitCall::pwait) return XP_REAL(epoll_pwait, epfd, ev, max, ms, c.mask);
  return XP_REAL(epoll_wait, epfd, ev, max, ms);
}

// The application's call as it made it.
int kernel_wait_as_called(int epfd, epoll_event* ev, int max, const WaitCall& c) {
  if (c.kind == WaitCall::pwait2) return XP_REAL(epoll_pwait2, epfd, ev, max, c.ts, c.mask);
  if (c.kind == WaitCall::pwait) return XP_REAL(epoll_pwait, epfd, ev, max, c.timeout_ms, c.mask);
  return XP_REAL(epoll_wait, epfd, ev, max, c.timeout_ms);
}

int harvest(EpollState* e, epoll_event* out, int room, bool* residual) {
  std::lock_guard<std::mutex> l(e->mu);
  int n = e->regs.harvest(out, room, residual);
  if (n == room && room > 0) e->kernel_first.store(true, std::memory_order_relaxed);
  return n;
}

// User events out[0..nu) are in hand: add what the kernel has ready now.
int finish(EpollState* e, int epfd, epoll_event* out, int max, const WaitCall& c, int nu,
           bool residual) {
  int k = 0;
  if (nu < max) {
    int err = errno;
    k = kernel_wait(epfd, out + nu, max - nu, c, 0);
    if (k < 0) {
      if (nu == 0) return -1;
      k = 0; // the user events are consumed already: report them
      errno = err;
    }
  }
  bool saw = false;
  k = drop_reserved(out + nu, k, &saw);
  k = validate_kids(e, out + nu, k);
  {
    std::lock_guard<std::mutex> l(e->mu);
    if (saw && e->wake >= 0) {
      readiness::eventfd_drain(e->wake);
      e->level = e->kick = false;
    }
    settle(e, residual, saw);
  }
  return fold_same_data(out, nu, k);
}

// What the kernel has ready now, with the user events after it; 0: none
// (nothing consumed), -1: error.
int kernel_now(EpollState* e, int epfd, epoll_event* out, int max, const WaitCall& c) {
  int k = kernel_wait(epfd, out, max, c, 0);
  if (k < 0) return -1;
  bool saw = false;
  k = drop_reserved(out, k, &saw);
  k = validate_kids(e, out, k);
  if (saw) consume_wake(e);
  if (k <= 0) return 0;
  bool residual = false;
  int nu = harvest(e, out + k, max - k, &residual);
  {
    std::lock_guard<std::mutex> l(e->mu);
    settle(e, residual, false);
  }
  return fold_same_data(out, k, nu);
}

int managed_wait(EpollState* e, int epfd, epoll_event* out, int max, const WaitCall& c) {
  Deadline dl(c);
  readiness::SpinPhase spin;
  for (bool first = true;; first = false) {
    bool own = e->n_user.load(std::memory_order_acquire) != 0;
    bool kids = refresh_kids(e);
    if (!own && !kids) {
      // Only kernel-mode members: the kernel answers; our entries are
      // dropped.  Counted as idle, then checked again (see activate).
      e->idle.fetch_add(1, std::memory_order_seq_cst);
      if (e->n_user.load(std::memory_order_seq_cst) != 0) {
        e->idle.fetch_sub(1, std::memory_order_relaxed);
        continue;
      }
      int n = first ? kernel_wait_as_called(epfd, out, max, c)
                    : kernel_wait(epfd, out, max, c, dl.left());
      e->idle.fetch_sub(1, std::memory_order_relaxed);
      if (n <= 0) return n;
      bool saw = false;
      int m = drop_reserved(out, n, &saw);
      if (saw) consume_wake(e);
      if (m > 0 || dl.left() == 0) return m;
      continue;
    }
    if (own) {
      std::lock_guard<std::mutex> l(e->mu);
      activate(e, epfd);
    }
    bool residual = false;
    if (e->kernel_first.exchange(false, std::memory_order_relaxed)) {
      // The previous batch was all user events: the kernel's go first now.
      int k = kernel_now(e, epfd, out, max, c);
      if (k != 0) return k;
    }
    int nu = harvest(e, out, max, &residual);
    if (nu > 0 || dl.left() == 0) return finish(e, epfd, out, max, c, nu, residual);
    if (own && spin.spin(dl.left())) {
      // Busy-poll the channels before sleeping (readiness.h SpinPhase).
      if (spin.kernel_round()) {
        int k = kernel_now(e, epfd, out, max, c);
        if (k != 0) return k;
      }
      continue;
    }

    // Nothing yet: sleep in the kernel, woken by stream::wake::notify()
    // through the wake eventfds, or by a completion of a member's channel.
    // Registered first, then looked again.
    Sleepers sl(e);
    ChanWait cw(e, epfd);
    nu = harvest(e, out, max, &residual);
    if (nu > 0) {
      sl.remove();
      cw.release();
      return finish(e, epfd, out, max, c, nu, residual);
    }
    if (cw.begin()) continue; // a channel was polled: its news first
    int64_t left = dl.left();
    if (!sl.ok && (left < 0 || left > kSliceNs)) left = kSliceNs;
    int k = kernel_wait(epfd, out, max, c, left);
    int err = errno;
    sl.remove();
    bool saw = false;
    int fired[kChanFds];
    int nfired = 0;
    if (k > 0) k = drop_reserved(out, k, &saw, fired, &nfired);
    // With the wake-ups unregistered: what this thread's poll changes is
    // looked at next, not written to the set's eventfd.
    cw.end(fired, nfired);
    cw.release();
    errno = err;
    if (k < 0) return -1;
    k = validate_kids(e, out, k);
    if (saw) consume_wake(e);
    if (k > 0) {
      nu = harvest(e, out + k, max - k, &residual);
      {
        std::lock_guard<std::mutex> l(e->mu);
        settle(e, residual, false);
      }
      return fold_same_data(out, k, nu);
    }
    // A wake-up or the deadline: look again (with no time left, once more
    // without sleeping).
  }
}

} // namespace

int wait(int epfd, epoll_event* events, int maxevents, const WaitCall& call) {
  FdSlot* s = g_slots.find(epfd);
  if (s == nullptr || s->ep.load(std::memory_order_relaxed) == nullptr) {
    int n;
    if (s == nullptr) {
      n = kernel_wait_as_called(epfd, events, maxevents, call);
    } else {
      // Counted, then checked again: a set that gets user-mode members while
      // we sleep wakes us (see activate).
      s->raw_waiters.fetch_add(1, std::memory_order_seq_cst);
      if (s->ep.load(std::memory_order_seq_cst) != nullptr) {
        s->raw_waiters.fetch_sub(1, std::memory_order_relaxed);
        return wait(epfd, events, maxevents, call);
      }
      n = kernel_wait_as_called(epfd, events, maxevents, call);
      s->raw_waiters.fetch_sub(1, std::memory_order_relaxed);
    }
    if (n <= 0) return n;
    // The set may have got user-mode members while we slept, and with them
    // xpress's entries, which the application must never see.
    s = g_slots.find(epfd);
    if (s == nullptr || s->ep.load(std::memory_order_relaxed) == nullptr) return n;
    bool saw = false;
    int m = drop_reserved(events, n, &saw);
    if (m > 0) return m;
    // Only ours: wait on, the managed way (the timeout starts again).
  }
  StateRef e = acquire(s);
  bool bad_ts = call.kind == WaitCall::pwait2 && call.ts != nullptr &&
                (call.ts->tv_sec < 0 || call.ts->tv_nsec < 0 || call.ts->tv_nsec >= 1'000'000'000);
  if (!e || maxevents <= 0 || maxevents > kMaxEvents || bad_ts || in_vfork_child())
    return kernel_wait_as_called(epfd, events, maxevents, call); // incl. the kernel's EINVAL
  return managed_wait(e.get(), epfd, events, maxevents, call);
}

bool active_fd(int fd) {
  FdSlot* s = g_slots.find(fd);
  if (s == nullptr || s->ep.load(std::memory_order_relaxed) == nullptr) return false;
  StateRef e = acquire(s);
  return e && active(e.get(), 0);
}

void refresh_fd(int fd) {
  if (StateRef e = acquire(g_slots.find(fd))) refresh(e.get(), 0);
}

int wake_fds(int fd, int* out, int cap) {
  StateRef e = acquire(g_slots.find(fd));
  if (!e) return 0;
  WakeList w;
  w.by_key = false;
  w.collect(e.get(), 0);
  int n = 0;
  for (int i = 0; i < w.n && n < cap; ++i)
    out[n++] = w.fds[i];
  return n;
}

} // namespace xp::epoll
