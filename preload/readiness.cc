#include "preload/readiness.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/boundary.h"
#include "preload/epoll_regs.h"
#include "preload/epoll_state.h"
#include "preload/fd_slots.h"
#include "preload/test_user_mode.h"
#include "stream/channel_sleep.h"
#include "stream/engine.h"
#include "stream/ready_source.h"
#include "stream/wake.h"

namespace xp::readiness {

using epoll::FdSlot;
using epoll::g_slots;

// ---- internal fds

namespace {

// Where internal fds go: high enough that a program counting on the lowest
// free number never meets them, low enough that the kernel's fd table does
// not grow much (it is sized by the highest number in use).
int high_base() {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1024;
  rlim_t soft = rl.rlim_cur;
  rlim_t base = soft - soft / 16;
  return base > 8192 ? 8192 : static_cast<int>(base);
}

int adopt(long fd) {
  if (fd < 0) return -1;
  int base = high_base();
  if (base > fd) {
    long moved = ::syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, base);
    if (moved >= 0) {
      ::syscall(SYS_close, fd);
      fd = moved;
    }
  }
  // Not through track::forget (a stale socket record at this number would be
  // released here, possibly under the caller's locks): nothing looks up
  // xpress's own numbers in the socket table.
  int n = static_cast<int>(fd);
  if (FdSlot* s = g_slots.get(n)) s->flags.store(epoll::kSlotInternal, std::memory_order_release);
  return n;
}

// The program closes numbers that include one of ours (close_range,
// closefrom, a loop over all numbers): move ours out of [lo, hi] first.
void protect(int fd, FdSlot* s, int lo, int hi) {
  long moved = -1;
  if (hi < INT_MAX) moved = ::syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, hi + 1);
  if (moved < 0) {
    moved = ::syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 0);
    if (moved >= lo && moved <= hi) {
      ::syscall(SYS_close, moved);
      moved = -1;
    }
  }
  s->flags.fetch_and(~epoll::kSlotInternal, std::memory_order_relaxed);
  int to = static_cast<int>(moved);
  if (moved >= 0)
    if (FdSlot* t = g_slots.get(to))
      t->flags.store(epoll::kSlotInternal, std::memory_order_release);
  epoll::renumber_wake(fd, to);
  test_user_mode::renumber(fd, to);
}

} // namespace

int internal_eventfd() {
  return adopt(::syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC));
}

int internal_epoll() {
  return adopt(::syscall(SYS_epoll_create1, EPOLL_CLOEXEC));
}

void close_internal(int fd) {
  if (fd < 0) return;
  if (FdSlot* s = g_slots.find(fd)) s->flags.fetch_and(~epoll::kSlotInternal);
  ::syscall(SYS_close, fd);
}

void eventfd_raise(int efd) {
  uint64_t one = 1;
  long r = ::syscall(SYS_write, efd, &one, sizeof one);
  (void)r; // EAGAIN: the counter is saturated, which is readable too
}

void eventfd_drain(int efd) {
  uint64_t v;
  long r = ::syscall(SYS_read, efd, &v, sizeof v);
  (void)r; // EAGAIN: nothing to consume
}

// ---- hooks

namespace {

void close_one(int fd, int lo, int hi) {
  FdSlot* s = g_slots.find(fd);
  uint32_t flags = s ? s->flags.load(std::memory_order_acquire) : 0;
  if (flags & epoll::kSlotInternal) {
    protect(fd, s, lo, hi);
    return;
  }
  bool slot = s != nullptr && (flags != 0 || s->ep.load(std::memory_order_acquire) != nullptr ||
                               s->nregs.load(std::memory_order_acquire) != 0);
  bool testing = test_user_mode::enabled();
  SocketRef rec;
  if (slot || testing || epoll::has_orphans())
    if (track::peek(fd) != nullptr) rec = track::lookup(fd);
  if (!slot && !rec) return;
  // The record's names still count fd (track forgets it after us).
  bool last = rec && rec->names.load(std::memory_order_acquire) <= 1;
  int saved = errno;
  epoll::on_close(fd, s, rec.get(), last);
  if (rec && testing) test_user_mode::on_close(*rec, fd, last);
  errno = saved;
}

} // namespace

void on_close(int fd) {
  if (fd < 0 || in_vfork_child()) return;
  close_one(fd, fd, fd);
}

void on_close_range(unsigned first, unsigned last) {
  if (first > last || first > static_cast<unsigned>(INT_MAX) || in_vfork_child()) return;
  int lo = static_cast<int>(first);
  int hi = last > static_cast<unsigned>(INT_MAX) ? INT_MAX : static_cast<int>(last);
  g_slots.for_each_in(lo, hi, [&](int fd, FdSlot&) { close_one(fd, lo, hi); });
  // Sockets with no slot still matter in test mode (their sources) and when
  // registrations of theirs live on under numbers closed earlier.
  if (!test_user_mode::enabled() && !epoll::has_orphans()) return;
  track::table().for_each_in(lo, hi, [&](int fd) {
    if (g_slots.find(fd) == nullptr) close_one(fd, lo, hi);
  });
}

void on_dup(int oldfd, int newfd) {
  if (oldfd == newfd || newfd < 0 || in_vfork_child()) return;
  // What newfd named is closed now (dup2/dup3 over an open fd; for dup and
  // F_DUPFD only stale entries).  The socket table still names it.
  FdSlot* n = g_slots.find(newfd);
  if (n && (n->flags.load(std::memory_order_acquire) & epoll::kSlotInternal)) {
    n->flags.store(0, std::memory_order_relaxed);
    epoll::renumber_wake(newfd, -1); // one of ours was replaced: its owner makes another
    test_user_mode::renumber(newfd, -1);
  } else {
    close_one(newfd, newfd, newfd);
  }
  epoll::on_dup(oldfd, newfd);
}

// ---- poll and select

namespace {

int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

constexpr int64_t kSliceNs = 10'000'000; // when no wake-up can be registered

struct Clock {
  bool infinite = true;
  int64_t end = 0;                      // 0: no time at all
  static Clock after(int64_t span_ns) { // span < 0: no limit
    Clock c;
    c.infinite = span_ns < 0;
    if (span_ns > 0) c.end = now_ns() + span_ns;
    return c;
  }
  int64_t left() const {
    if (infinite) return -1;
    if (end == 0) return 0;
    int64_t l = end - now_ns();
    return l > 0 ? l : 0;
  }
};

bool valid(const timespec* ts) {
  return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1'000'000'000;
}
int64_t span_of(const timespec* ts) {
  return ts == nullptr ? -1 : static_cast<int64_t>(ts->tv_sec) * 1'000'000'000 + ts->tv_nsec;
}

// Cheap and uncounted: only decides whether the slow path is needed.
inline bool user_fd(int fd) {
  SocketRecord* r = track::peek(fd);
  return r != nullptr && r->ready.load(std::memory_order_relaxed) != nullptr;
}
inline bool special(int fd, bool epolls) {
  return user_fd(fd) || (epolls && epoll::active_fd(fd));
}
inline bool maybe_special() {
  return !track::table().empty() || epoll::g_active.load(std::memory_order_relaxed) != 0;
}

bool any_special(const pollfd* fds, nfds_t n) {
  if (!maybe_special()) return false;
  bool epolls = epoll::g_active.load(std::memory_order_relaxed) != 0;
  for (nfds_t i = 0; i < n; ++i)
    if (fds[i].fd >= 0 && special(fds[i].fd, epolls)) return true;
  return false;
}

int kernel_poll(pollfd* fds, nfds_t n, int64_t ns, const sigset_t* mask, bool as_ppoll) {
  if (as_ppoll) {
    timespec ts = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    return XP_REAL(ppoll, fds, n, ns < 0 ? nullptr : &ts, mask);
  }
  int ms = -1;
  if (ns >= 0) {
    int64_t m = (ns + 999'999) / 1'000'000; // never wake early
    ms = m > INT_MAX ? INT_MAX : static_cast<int>(m);
  }
  return XP_REAL(poll, fds, n, ms);
}

// The kernel wait with more entries after the program's (a watch, see
// PollSet::watch; completion fds, stream/channel_sleep.h); the count is of
// the program's entries only, the extras get their revents.  Beyond
// kPlusMax entries in all the extras are left out (the caller checks
// fits_plus first where it must know).
constexpr nfds_t kPlusMax = 64;
bool fits_plus(nfds_t n, int nextra) {
  return n + static_cast<nfds_t>(nextra) <= kPlusMax;
}
int kernel_poll_plus(pollfd* fds, nfds_t n, pollfd* extra, int nextra, int64_t ns,
                     const sigset_t* mask, bool as_ppoll) {
  if (nextra == 0 || !fits_plus(n, nextra)) return kernel_poll(fds, n, ns, mask, as_ppoll);
  pollfd all[kPlusMax];
  memcpy(all, fds, n * sizeof *fds);
  for (int i = 0; i < nextra; ++i) {
    all[n + i] = extra[i];
    all[n + i].revents = 0;
  }
  int k = kernel_poll(all, n + nextra, ns, mask, as_ppoll);
  if (k < 0) return k;
  for (nfds_t i = 0; i < n; ++i)
    fds[i].revents = all[i].revents;
  for (int i = 0; i < nextra; ++i) {
    extra[i].revents = all[n + i].revents;
    if (extra[i].revents) --k;
  }
  return k;
}

// The entries xpress answers are hidden from the kernel (fd -1: it ignores
// them and reports 0) and put back before returning.
struct Hidden {
  nfds_t idx;
  int fd;
};

class PollSet {
public:
  PollSet(pollfd* fds, nfds_t n) : fds_(fds), n_(n) {}
  PollSet(const PollSet&) = delete;
  PollSet& operator=(const PollSet&) = delete;
  ~PollSet() {
    restore();
    if (users_ != inline_) free(users_);
  }
  bool scan() {
    bool epolls = epoll::g_active.load(std::memory_order_relaxed) != 0;
    for (nfds_t i = 0; i < n_; ++i) {
      int fd = fds_[i].fd;
      if (fd < 0) continue;
      if (user_fd(fd)) {
        if (!push({i, fd})) return false;
      } else if (epolls && epoll::active_fd(fd) && neps_ < kEps) {
        eps_[neps_++] = fd;
      }
    }
    return nu_ != 0 || neps_ != 0;
  }
  // Answers the user-mode entries from their sources; returns how many have
  // revents.  One that left user mode goes back to the kernel.
  int answer() {
    int ready = 0;
    for (size_t i = 0; i < nu_; ++i) {
      pollfd& p = fds_[users_[i].idx];
      SocketRef rec = track::lookup(users_[i].fd);
      stream::ReadySource* src = rec ? rec->ready.load(std::memory_order_acquire) : nullptr;
      if (src == nullptr) {
        p.fd = users_[i].fd;
        continue;
      }
      p.fd = -1;
      uint32_t want = static_cast<uint16_t>(p.events) | POLLERR | POLLHUP;
      p.revents = static_cast<short>(epoll::widen(src->ready_events()) & want);
      if (p.revents) ++ready;
    }
    return ready;
  }
  bool has_users() const { return nu_ != 0; }
  void refresh_epolls() {
    for (int i = 0; i < neps_; ++i)
      epoll::refresh_fd(eps_[i]);
  }
  // Sleeper registration: the thread's eventfd (in a hidden slot) for the
  // user-mode fds, the wake eventfds of the epoll sets.
  bool register_sleep() {
    ok_ = true;
    // Before any arm and the final look: one that waits for room to send
    // keeps every channel's events on (stream/channel_sleep.h, RoomWait).
    // A polled epoll set is taken to, whatever its members ask.
    bool room = neps_ != 0;
    for (size_t i = 0; i < nu_ && !room; ++i)
      room = (fds_[users_[i].idx].events & (POLLOUT | POLLWRNORM | POLLWRBAND)) != 0;
    if (room) room_.enter();
    // The channels of the polled connections, whose completion fds this
    // thread waits on itself (stream/channel_sleep.h), room permitting.
    if (nu_ != 0 && stream::ChannelSleep::enabled() &&
        fits_plus(n_, 1 + stream::ChannelSleep::kMax)) {
      for (size_t i = 0; i < nu_ && chans_.size() < stream::ChannelSleep::kMax; ++i) {
        SocketRef rec = track::lookup(users_[i].fd);
        chans_.add(rec ? rec->ready.load(std::memory_order_acquire) : nullptr);
      }
    }
    if (nu_ != 0) {
      int tfd = stream::wake::thread_fd();
      if (tfd >= 0 && add_thread_fd(tfd))
        wakes_[nwakes_++] = tfd;
      else
        ok_ = false;
    }
    for (int i = 0; i < neps_; ++i) {
      int fds[8];
      int n = epoll::wake_fds(eps_[i], fds, 8);
      for (int j = 0; j < n; ++j) {
        if (nwakes_ < kWakes && stream::wake::add(fds[j]))
          wakes_[nwakes_++] = fds[j];
        else
          ok_ = false;
      }
    }
    return ok_;
  }
  // Woken only by changes of the connections polled, when they are few
  // and all still in user mode (one that is leaving is announced to every
  // sleeper); by any change otherwise.
  bool add_thread_fd(int tfd) {
    const void* keys[stream::wake::kMaxWatchKeys];
    int n = 0;
    if (nu_ <= static_cast<size_t>(stream::wake::kMaxWatchKeys)) {
      for (size_t i = 0; i < nu_; ++i) {
        SocketRef rec = track::lookup(users_[i].fd);
        stream::ReadySource* src = rec ? rec->ready.load(std::memory_order_acquire) : nullptr;
        if (src == nullptr) break;
        keys[n++] = src;
      }
      if (static_cast<size_t>(n) == nu_) return stream::wake::add_watch(tfd, keys, n);
    }
    return stream::wake::add(tfd);
  }
  void unregister_sleep() {
    remove_wakes();
    chans_.clear();
    room_.leave();
  }
  void remove_wakes() {
    for (int i = 0; i < nwakes_; ++i)
      stream::wake::remove(wakes_[i]);
    nwakes_ = 0;
  }
  // Before the kernel wait: true when a channel was polled (look again).
  bool begin_chans() { return chans_.begin(); }
  // The completion fds to wait on, after the extras already in out[0..n).
  int add_chan_fds(pollfd* out, int n) {
    for (int i = 0; i < chans_.size(); ++i)
      out[n++] = {chans_.fd(i), POLLIN, 0};
    return n;
  }
  // After the kernel wait, with the wake-ups unregistered (what this
  // thread's poll changes is looked at next, not written to its eventfd):
  // out[first..) are the completion fds' entries.
  void end_chans(const pollfd* out, int first) {
    uint32_t fired = 0;
    for (int i = 0; i < chans_.size(); ++i)
      if (out[first + i].revents) fired |= 1u << i;
    chans_.end(fired);
  }
  // Lends a hidden slot to the thread's eventfd for the kernel wait; false
  // when user-mode fds need one and none is left.
  bool lend_slot() {
    slot_ = -1;
    if (nu_ == 0) return true;
    if (dead_) return false;
    if (nwakes_ == 0 || wakes_[0] != stream::wake::thread_fd()) return false;
    for (size_t i = 0; i < nu_; ++i) {
      pollfd& p = fds_[users_[i].idx];
      if (p.fd != -1) continue;
      slot_ = static_cast<long>(users_[i].idx);
      slot_events_ = p.events;
      p.fd = wakes_[0];
      p.events = POLLIN;
      p.revents = 0;
      return true;
    }
    return false;
  }
  // For the kernel wait: a user-mode entry whose source's readiness is the
  // kernel socket's for some direction (an upgrade before its switch) is
  // shown to the kernel with those bits, so that TCP bytes wake this thread
  // directly rather than through the engine, which may be busy creating
  // the channel (tens of ms under TCG, on each end).  The entry lent to the
  // thread's eventfd gets its watch in *extra (fd -1: none).  The bits are
  // a subset of what answer() reports from the source, so a watch that
  // fires is answered at once.  unwatch() hides them again.
  void watch(pollfd* extra) {
    extra->fd = -1;
    for (size_t i = 0; i < nu_ && nwatch_ < kWatch; ++i) {
      pollfd& p = fds_[users_[i].idx];
      const bool lent = static_cast<long>(users_[i].idx) == slot_;
      if (!lent && p.fd != -1) continue; // back with the kernel: polled as is
      SocketRef rec = track::lookup(users_[i].fd);
      stream::ReadySource* src = rec ? rec->ready.load(std::memory_order_acquire) : nullptr;
      short ev = 0;
      if (src == nullptr || src->kernel_watch(&ev) < 0) continue;
      ev = static_cast<short>(ev & (lent ? slot_events_ : p.events));
      if (ev == 0) continue;
      if (lent) {
        *extra = {users_[i].fd, ev, 0};
        continue;
      }
      watched_[nwatch_++] = {users_[i].idx, p.events};
      p.fd = users_[i].fd;
      p.events = ev;
      p.revents = 0;
    }
  }
  // Hides the watched entries again; returns how many of them the kernel
  // counted as ready (not the program's: the caller takes them off).
  int unwatch() {
    int fired = 0;
    for (int i = 0; i < nwatch_; ++i) {
      pollfd& p = fds_[watched_[i].idx];
      if (p.revents) ++fired;
      p.fd = -1;
      p.events = watched_[i].events;
      p.revents = 0;
    }
    nwatch_ = 0;
    return fired;
  }
  // After the kernel wait: whether the lent slot fired (it is hidden again).
  // POLLNVAL: the program closed the thread's eventfd behind our back
  // (closefrom); from then on this call sleeps in slices instead of spinning.
  bool take_slot() {
    if (slot_ < 0) return false;
    pollfd& p = fds_[slot_];
    bool fired = p.revents != 0;
    if (p.revents & POLLNVAL) dead_ = true;
    if (fired && !dead_) stream::wake::drain(p.fd);
    p.fd = -1;
    p.events = slot_events_;
    p.revents = 0;
    slot_ = -1;
    return fired;
  }
  void restore() {
    unwatch();
    take_slot();
    for (size_t i = 0; i < nu_; ++i)
      fds_[users_[i].idx].fd = users_[i].fd;
  }

private:
  bool push(Hidden h) {
    if (nu_ == cap_) {
      size_t cap = cap_ * 4;
      auto* bigger = static_cast<Hidden*>(malloc(cap * sizeof(Hidden)));
      if (bigger == nullptr) return false;
      memcpy(bigger, users_, nu_ * sizeof(Hidden));
      if (users_ != inline_) free(users_);
      users_ = bigger;
      cap_ = cap;
    }
    users_[nu_++] = h;
    return true;
  }

  static constexpr size_t kInline = 32;
  static constexpr int kEps = 16;
  static constexpr int kWakes = 16;
  pollfd* fds_;
  nfds_t n_;
  Hidden inline_[kInline];
  Hidden* users_ = inline_;
  size_t nu_ = 0, cap_ = kInline;
  int eps_[kEps];
  int neps_ = 0;
  int wakes_[kWakes];
  int nwakes_ = 0;
  bool ok_ = true;
  bool dead_ = false; // the thread's eventfd is gone
  long slot_ = -1;
  short slot_events_ = 0;
  struct Watched {
    nfds_t idx;
    short events; // the program's
  };
  static constexpr int kWatch = 16;
  Watched watched_[kWatch];
  int nwatch_ = 0;
  stream::ChannelSleep chans_;
  stream::RoomWait room_;
};

// poll/ppoll with user-mode fds or epoll sets with user-mode members.
// *scanned false: there are none after all (the caller makes the real call).
int slow_poll(pollfd* fds, nfds_t n, int64_t span_ns, const sigset_t* mask, bool as_ppoll,
              bool* scanned) {
  PollSet set(fds, n);
  *scanned = set.scan();
  if (!*scanned) return 0;
  Clock clock = Clock::after(span_ns);
  SpinPhase spin;
  // Everything ready now (the kernel writes revents 0 for the hidden
  // entries: they are answered after it).  Readiness seen a moment ago may
  // be gone by now (another thread, or the engine moving a resumed stream's
  // bytes, took them): then, as the kernel's poll does, wait on; 0 only
  // once the time is up.
  int result = 0;
  auto settled = [&]() {
    int k = kernel_poll(fds, n, 0, mask, as_ppoll);
    result = k < 0 ? -1 : k + set.answer();
    return result != 0 || clock.left() == 0;
  };
  for (;;) {
    set.refresh_epolls();
    int ready = set.answer();
    if ((ready > 0 || clock.left() == 0) && settled()) return result;
    if (set.has_users() && spin.spin(clock.left())) {
      if (spin.kernel_round()) {
        int k = kernel_poll(fds, n, 0, mask, as_ppoll);
        if (k != 0) return k < 0 ? -1 : k + set.answer();
      }
      continue;
    }
    bool ok = set.register_sleep();
    ready = set.answer(); // looked at after registering: no lost wake-up
    if (ready > 0) {
      set.unregister_sleep();
      if (settled()) return result;
      continue;
    }
    if (set.begin_chans()) { // a channel was polled: its news first
      set.unregister_sleep();
      continue;
    }
    if (!set.lend_slot()) ok = false;
    int64_t left = clock.left();
    if (!ok && (left < 0 || left > kSliceNs)) left = kSliceNs;
    pollfd extra[1 + stream::ChannelSleep::kMax];
    set.watch(&extra[0]);
    const int first_chan = extra[0].fd < 0 ? 0 : 1;
    const int nextra = set.add_chan_fds(extra, first_chan);
    int k = kernel_poll_plus(fds, n, extra, nextra, left, mask, as_ppoll);
    int err = errno;
    set.remove_wakes();
    set.end_chans(extra, first_chan);
    set.unregister_sleep();
    const int watched = set.unwatch();
    bool woke = set.take_slot();
    if (k < 0) {
      errno = err;
      return -1;
    }
    if (woke) --k;
    k -= watched;
    if (k > 0) return k + set.answer();
    set.refresh_epolls(); // a wake-up or the time is up: look again
  }
}

// ---- select on top of poll (only when some fd is in user mode)

bool fd_in(const fd_set* s, int fd) {
  return s != nullptr && FD_ISSET(fd, s);
}

bool any_special(int nfds, const fd_set* r, const fd_set* w, const fd_set* e) {
  if (nfds <= 0 || !maybe_special()) return false;
  bool epolls = epoll::g_active.load(std::memory_order_relaxed) != 0;
  const int bits = 8 * sizeof(unsigned long);
  for (int base = 0; base < nfds; base += bits) {
    unsigned long word = 0;
    for (const fd_set* s : {r, w, e})
      if (s) word |= reinterpret_cast<const unsigned long*>(s->fds_bits)[base / bits];
    while (word != 0) {
      int fd = base + __builtin_ctzl(word);
      word &= word - 1;
      if (fd < nfds && special(fd, epolls)) return true;
    }
  }
  return false;
}

// The kernel's masks for select (fs/select.c).
constexpr short kInSet = POLLRDNORM | POLLRDBAND | POLLIN | POLLHUP | POLLERR;
constexpr short kOutSet = POLLWRBAND | POLLWRNORM | POLLOUT | POLLERR;
constexpr short kExSet = POLLPRI;

// Returns -2 when no fd is special after all (the caller makes the real call).
int slow_select(int nfds, fd_set* r, fd_set* w, fd_set* e, int64_t span_ns, const sigset_t* mask) {
  int count = 0;
  for (int fd = 0; fd < nfds; ++fd)
    if (fd_in(r, fd) || fd_in(w, fd) || fd_in(e, fd)) ++count;
  pollfd small[256];
  pollfd* p = count <= 256 ? small : static_cast<pollfd*>(malloc(count * sizeof(pollfd)));
  if (p == nullptr) return -2;
  int i = 0;
  for (int fd = 0; fd < nfds; ++fd) {
    short ev = 0;
    if (fd_in(r, fd)) ev |= POLLIN | POLLRDNORM | POLLRDBAND;
    if (fd_in(w, fd)) ev |= POLLOUT | POLLWRNORM | POLLWRBAND;
    if (fd_in(e, fd)) ev |= POLLPRI;
    if (ev) p[i++] = {fd, ev, 0};
  }
  bool scanned;
  int res = slow_poll(p, static_cast<nfds_t>(count), span_ns, mask, true, &scanned);
  if (!scanned) res = -2;
  for (int j = 0; res >= 0 && j < count; ++j) {
    if (p[j].revents & POLLNVAL) { // select fails on a closed fd, sets untouched
      errno = EBADF;
      res = -1;
    }
  }
  if (res >= 0) {
    // Like the kernel: the sets are rewritten in whole words up to nfds.
    size_t bytes = (static_cast<size_t>(nfds) + 63) / 64 * 8;
    for (fd_set* s : {r, w, e})
      if (s) memset(s, 0, bytes);
    res = 0;
    for (int j = 0; j < count; ++j) {
      short rev = p[j].revents;
      const int fd = p[j].fd;
      if ((rev & kInSet) && (p[j].events & POLLIN)) {
        FD_SET(fd, r);
        ++res;
      }
      if ((rev & kOutSet) && (p[j].events & POLLOUT)) {
        FD_SET(fd, w);
        ++res;
      }
      if ((rev & kExSet) && (p[j].events & POLLPRI)) {
        FD_SET(fd, e);
        ++res;
      }
    }
  }
  if (p != small) free(p);
  return res;
}

} // namespace

// ---- spinning before a sleep

namespace {
// This thread's recent waits for user-mode fds (us, moving average).
__attribute__((tls_model("initial-exec"))) thread_local uint32_t t_wait_avg_us = 0;
} // namespace

SpinPhase::SpinPhase() : began_(now_ns()) {}

SpinPhase::~SpinPhase() {
  if (end_ >= 0) t_wait_avg_us = stream::engine::wait_avg(t_wait_avg_us, now_ns() - began_);
}

bool SpinPhase::spin(int64_t left_ns) {
  const int64_t now = now_ns();
  if (end_ < 0) {
    int64_t budget = static_cast<int64_t>(stream::engine::spin_budget_ns(t_wait_avg_us));
    if (left_ns >= 0 && left_ns < budget) budget = left_ns;
    // No CPU to spare on this host: sleep at once.
    if (budget > 0 && !ticket_.acquire(static_cast<uint64_t>(now))) budget = 0;
    end_ = began_ + budget;
  } else if (now < end_ && !ticket_.keep(static_cast<uint64_t>(now))) {
    end_ = now; // descheduled: the CPU is wanted elsewhere
  }
  if (now >= end_) {
    ticket_.release();
    return false;
  }
  ++rounds_;
  return stream::engine::spin_poll_channels();
}

int poll(pollfd* fds, nfds_t nfds, int timeout_ms) {
  if (__builtin_expect(!any_special(fds, nfds), 1)) return XP_REAL(poll, fds, nfds, timeout_ms);
  bool scanned;
  int64_t span = timeout_ms < 0 ? -1 : static_cast<int64_t>(timeout_ms) * 1'000'000;
  int r = slow_poll(fds, nfds, span, nullptr, false, &scanned);
  return scanned ? r : XP_REAL(poll, fds, nfds, timeout_ms);
}

int ppoll(pollfd* fds, nfds_t nfds, const timespec* tmo, const sigset_t* sigmask) {
  if (__builtin_expect(!any_special(fds, nfds), 1) || (tmo && !valid(tmo)))
    return XP_REAL(ppoll, fds, nfds, tmo, sigmask); // incl. the kernel's EINVAL
  bool scanned;
  int r = slow_poll(fds, nfds, span_of(tmo), sigmask, true, &scanned);
  return scanned ? r : XP_REAL(ppoll, fds, nfds, tmo, sigmask);
}

int select(int nfds, fd_set* r, fd_set* w, fd_set* e, timeval* tv) {
  if (__builtin_expect(!any_special(nfds, r, w, e), 1)) return XP_REAL(select, nfds, r, w, e, tv);
  if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0)) return XP_REAL(select, nfds, r, w, e, tv);
  int64_t span = -1;
  if (tv) span = (static_cast<int64_t>(tv->tv_sec) * 1'000'000 + tv->tv_usec) * 1000;
  Clock clock = Clock::after(span);
  int res = slow_select(nfds, r, w, e, span, nullptr);
  if (res == -2) return XP_REAL(select, nfds, r, w, e, tv);
  int err = errno;
  if (tv && span > 0) { // Linux writes back the time not slept
    int64_t left = clock.left();
    tv->tv_sec = static_cast<time_t>(left / 1'000'000'000);
    tv->tv_usec = static_cast<suseconds_t>(left % 1'000'000'000 / 1000);
  }
  errno = err;
  return res;
}

int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const timespec* ts,
            const sigset_t* sigmask) {
  if (__builtin_expect(!any_special(nfds, r, w, e), 1) || (ts && !valid(ts)))
    return XP_REAL(pselect, nfds, r, w, e, ts, sigmask);
  int res = slow_select(nfds, r, w, e, span_of(ts), sigmask);
  if (res == -2) return XP_REAL(pselect, nfds, r, w, e, ts, sigmask);
  return res;
}

} // namespace xp::readiness
