#include "preload/epoll_state.h"
#include "common/fork_parts.h"

#include <cerrno>
#include <climits>
#include <mutex>
#include <new>
#include <pthread.h>
#include <vector>

#include "common/lock_check.h"
#include "preload/boundary.h"
#include "preload/epoll_internal.h"
#include "preload/readiness.h"
#include "stream/ready_source.h"
#include "stream/wake.h"

namespace xp::epoll {

std::atomic<uint32_t> g_active{0};
namespace {
// claims() once made: the fork child handler only resets what exists (it
// must not allocate).
std::atomic<LockedClaims*> g_claims{nullptr};
} // namespace

// Never destroyed: the engine thread and the program's other threads still
// use it (epoll_wait, close) while exit() runs the static destructors.
LockedClaims& claims() {
  static LockedClaims* c = [] {
    fork_parts::mark(fork_parts::kEpoll);
    auto* made = new LockedClaims();
    g_claims.store(made, std::memory_order_release);
    return made;
  }();
  return *c;
}

namespace {

constinit std::mutex g_mu; // the list of states and the free list; taken before any state's mu
// g_mu, marked before it is first taken (the fork child handler re-makes it).
std::mutex& list_mu() {
  fork_parts::mark(fork_parts::kEpoll);
  return g_mu;
}
EpollState* g_list = nullptr;
EpollState* g_free = nullptr;
std::atomic<uint32_t> g_orphans{0};

void link(EpollState* e) {
  e->prev = nullptr;
  e->next = g_list;
  if (g_list) g_list->prev = e;
  g_list = e;
}
void unlink(EpollState* e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    g_list = e->next;
  if (e->next) e->next->prev = e->prev;
  e->prev = e->next = nullptr;
}

// References dropped after the locks are gone: releasing a socket record
// may run the stream layer's clean-up, which may call back into this file.
class Drops {
public:
  Drops() = default;
  Drops(const Drops&) = delete;
  Drops& operator=(const Drops&) = delete;
  ~Drops() {
    for (SocketRecord* r : recs_)
      track::table().pool()->release(r);
    for (EpollState* e : states_)
      release(e);
  }
  void rec(SocketRecord* r) { recs_.push_back(r); }
  void state(EpollState* e) { states_.push_back(e); }

private:
  std::vector<SocketRecord*> recs_;
  std::vector<EpollState*> states_;
};

// A member's change linked it on e's ready list (Reg::on_change, under the
// member's watch lock, not e->mu): wake e's sleepers, which registered
// under e's own key (epoll_wait.cc, WakeList).  seq_cst: pairs with a
// sleeper's count-then-look (its look at the ready list takes the list's
// lock after the count went up).
bool wake_set(void* ctx) {
  auto* e = static_cast<EpollState*>(ctx);
  if (e->keyed.load(std::memory_order_seq_cst) == 0) return false;
  stream::wake::notify_set(e);
  return true;
}

void sync_user(EpollState* e, uint32_t before) {
  uint32_t now = e->regs.user_count();
  e->n_user.store(now, std::memory_order_seq_cst);
  if (before == 0 && now != 0) g_active.fetch_add(1, std::memory_order_relaxed);
  if (before != 0 && now == 0) g_active.fetch_sub(1, std::memory_order_relaxed);
}

// Under e->mu: bring the set's waiters back to look again (they slept
// before something they must see: a first user-mode member, a new source
// among keyed members).  Once until a waiter consumed it (consume_wake);
// settle() leaves it readable meanwhile.
void kick_waiters(EpollState* e) {
  if (e->wake < 0 || e->kick) return;
  readiness::eventfd_raise(e->wake);
  e->level = e->kick = true;
}

void set_src(EpollState* e, Reg* r, stream::ReadySource* src) {
  uint32_t before = e->regs.user_count();
  const bool fresh = src != nullptr && src != r->src;
  e->regs.set_src(r, src);
  sync_user(e, before);
  // Keyed sleepers wait for the sources they saw: a new one is theirs to
  // look at, so they wake and register again.
  if (fresh && e->keyed.load(std::memory_order_relaxed) != 0) kick_waiters(e);
}

void erase_reg(EpollState* e, Reg* r, Drops& drops) {
  uint32_t before = e->regs.user_count();
  if (FdSlot* s = g_slots.find(r->fd)) s->nregs.fetch_sub(1, std::memory_order_relaxed);
  if (r->orphan) {
    --e->n_orphans;
    g_orphans.fetch_sub(1, std::memory_order_relaxed);
  }
  drops.rec(static_cast<SocketRecord*>(const_cast<void*>(r->key)));
  e->regs.erase(r);
  sync_user(e, before);
}

void recycle(EpollState* e) {
  Drops drops; // runs after the locks below are released
  std::lock_guard<std::mutex> g(list_mu());
  unlink(e);
  std::lock_guard<std::mutex> l(e->mu);
  while (e->regs.size() != 0)
    erase_reg(e, &e->regs.at(e->regs.size() - 1), drops);
  for (Nested& n : e->nested)
    drops.state(n.child);
  e->nested.clear();
  e->n_nested.store(0, std::memory_order_relaxed);
  if (e->wake >= 0) readiness::close_internal(e->wake);
  e->wake = -1;
  e->wake_in_kernel = e->level = e->kick = false;
  for (EpollState::ChanReg& c : e->chan_regs)
    c = {};
  e->epfd = -1;
  e->kernel_first.store(false, std::memory_order_relaxed);
  // States are never freed: a lock-free reader may still load this pointer
  // from a slot and find refs == 0, which it must be able to read.
  e->next = g_free;
  g_free = e;
}

int real_ctl(int epfd, int op, int fd, epoll_event* ev) {
  return XP_REAL(epoll_ctl, epfd, op, fd, ev);
}

// The stand-in a user-mode socket keeps in the kernel: no readiness bits, so
// only EPOLLERR/EPOLLHUP (which the kernel adds) can fire it, and EPOLLONESHOT
// makes that happen at most once.  EPOLLEXCLUSIVE registrations cannot be
// one-shot; they keep the flag and any invalid bits, so the kernel rejects
// what it would have rejected in the application's mask.
uint32_t stand_in(uint32_t app) {
  if (app & EPOLLEXCLUSIVE) return EPOLLEXCLUSIVE | EPOLLET | (app & ~kExclusiveOkBits);
  return EPOLLET | EPOLLONESHOT;
}

// Replace the kernel registration of r (in set epfd) by the stand-in or by
// the application's own.  EPOLLEXCLUSIVE ones cannot be modified: DEL+ADD.
bool kernel_swap(int epfd, Reg* r, bool to_stand_in) {
  epoll_event ev;
  ev.events = to_stand_in ? stand_in(r->events) : r->events;
  ev.data.u64 = to_stand_in ? kShadowData : r->data;
  if (r->events & EPOLLEXCLUSIVE) {
    if (real_ctl(epfd, EPOLL_CTL_DEL, r->fd, nullptr) != 0) return false;
    return real_ctl(epfd, EPOLL_CTL_ADD, r->fd, &ev) == 0;
  }
  return real_ctl(epfd, EPOLL_CTL_MOD, r->fd, &ev) == 0;
}

// ---- epoll_ctl

// A tracked socket: ADD/MOD/DEL with the kernel and the table kept in step,
// under the state lock (the mode hook takes it too).
int ctl_socket(EpollState* e, int epfd, int op, int fd, epoll_event* ev, SocketRecord* rec) {
  Drops drops;
  std::lock_guard<std::mutex> l(e->mu);
  stream::ReadySource* src = rec->ready.load(std::memory_order_acquire);
  Reg* r = e->regs.find(fd, rec);
  epoll_event mine;
  mine.data.u64 = kShadowData;
  int res;
  if (op == EPOLL_CTL_DEL) {
    res = real_ctl(epfd, op, fd, ev);
    int err = errno;
    if (res == 0 && r) erase_reg(e, r, drops);
    errno = err;
    return res;
  }
  if (src && op == EPOLL_CTL_ADD && (ev->events & EPOLLEXCLUSIVE) &&
      (ev->events & ~kExclusiveOkBits)) {
    errno = EINVAL; // the kernel's verdict on the application's own mask
    return -1;
  }
  mine.events = stand_in(ev->events);
  res = real_ctl(epfd, op, fd, src ? &mine : ev);
  int err = errno;
  if (res != 0) {
    errno = err;
    return res;
  }
  if (op == EPOLL_CTL_ADD && r) erase_reg(e, r, drops); // stale: closed behind our back
  if (op == EPOLL_CTL_ADD || !r) {
    Reg fresh;
    fresh.fd = fd;
    fresh.key = rec;
    rec->refs.fetch_add(1, std::memory_order_relaxed); // held while registered
    if (FdSlot* s = g_slots.get(fd)) s->nregs.fetch_add(1, std::memory_order_relaxed);
    uint32_t before = e->regs.user_count();
    r = e->regs.insert(fresh);
    sync_user(e, before);
  }
  e->regs.rearm(r, ev->events, ev->data.u64);
  r->shadow = src != nullptr;
  set_src(e, r, src);
  if (src) {
    activate(e, epfd);
    if (e->regs.check(*r, false)) raise_level(e); // the kernel wakes waiters on a ready ADD/MOD
  }
  errno = err;
  return 0;
}

// fd is an epoll set: the kernel registration stays the application's; the
// outer set remembers it, to look through it at user-mode members.
int ctl_nested(int epfd, int op, int fd, epoll_event* ev) {
  int res = real_ctl(epfd, op, fd, ev);
  if (res != 0 || in_vfork_child()) return res;
  int err = errno;
  StateRef child = op == EPOLL_CTL_ADD ? ensure_state(fd) : StateRef();
  StateRef outer = op == EPOLL_CTL_ADD ? ensure_state(epfd) : acquire(g_slots.find(epfd));
  if (outer) {
    Drops drops;
    std::lock_guard<std::mutex> l(outer->mu);
    for (size_t i = 0; i < outer->nested.size(); ++i) {
      if (outer->nested[i].fd != fd) continue;
      if (op == EPOLL_CTL_MOD) outer->nested[i].data = ev->data.u64;
      if (op != EPOLL_CTL_DEL) continue;
      drops.state(outer->nested[i].child);
      outer->nested[i] = outer->nested.back();
      outer->nested.pop_back();
      break;
    }
    if (op == EPOLL_CTL_ADD && child) outer->nested.push_back({fd, child.take(), ev->data.u64});
    outer->n_nested.store(static_cast<uint32_t>(outer->nested.size()), std::memory_order_release);
  }
  errno = err;
  return res;
}

// Another number naming e, for calls from hooks once e->epfd is closed.
int other_name(EpollState* e, int closing) {
  int found = -1;
  g_slots.for_each_in(0, INT_MAX, [&](int fd, FdSlot& s) {
    if (found < 0 && fd != closing && s.ep.load(std::memory_order_acquire) == e) found = fd;
  });
  return found;
}

} // namespace

void release(EpollState* e) {
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) recycle(e);
}

StateRef acquire(FdSlot* s) {
  if (s == nullptr) return {};
  for (;;) {
    EpollState* e = s->ep.load(std::memory_order_acquire);
    if (e == nullptr) return {};
    uint32_t r = e->refs.load(std::memory_order_relaxed);
    bool got = false;
    while (r != 0) {
      if (e->refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel)) {
        got = true;
        break;
      }
    }
    if (!got) continue; // being recycled: the slot changes under us
    if (s->ep.load(std::memory_order_acquire) == e) return StateRef(e);
    release(e);
  }
}

StateRef ensure_state(int epfd) {
  FdSlot* s = g_slots.get(epfd);
  if (s == nullptr) return {};
  for (;;) {
    if (StateRef e = acquire(s)) return e;
    std::lock_guard<std::mutex> g(list_mu());
    if (s->ep.load(std::memory_order_acquire) != nullptr) continue;
    EpollState* e = g_free;
    if (e)
      g_free = e->next;
    else
      e = new (std::nothrow) EpollState;
    if (e == nullptr) return {};
    e->next = nullptr;
    e->epfd = epfd;
    e->regs.set_waker(wake_set, e);
    e->names.store(1, std::memory_order_relaxed);
    e->refs.store(2, std::memory_order_relaxed); // the slot's and the caller's
    link(e);
    s->flags.fetch_or(kSlotEpoll, std::memory_order_relaxed);
    s->ep.store(e, std::memory_order_release);
    return StateRef(e);
  }
}

void raise_level(EpollState* e) {
  if (e->wake < 0 || e->level) return;
  readiness::eventfd_raise(e->wake);
  e->level = true;
}

// Under e->mu.  The set gets its wake eventfd in the kernel.  A thread may
// be asleep in the set already, without being registered as a sleeper: it
// entered before the set had user-mode members (straight to the kernel, or
// the managed way while there was nothing to wait for).  Such threads are
// counted; if there are any, the eventfd is left readable to bring them back
// to wait the managed way.  Otherwise it stays clear: an outer epoll set or
// a poll() looking at this one must not see it readable for nothing.
void activate(EpollState* e, int epfd) {
  if (!e->wake_in_kernel) {
    if (e->wake < 0) e->wake = readiness::internal_eventfd();
    if (e->wake < 0) return; // degraded: waits sleep in short slices
    epoll_event ev;
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeData;
    if (real_ctl(epfd, EPOLL_CTL_ADD, e->wake, &ev) != 0 && errno != EEXIST) return;
    e->wake_in_kernel = true;
  }
  // Pairs with the waiters' count-then-check (seq_cst on both sides): either
  // they see the user-mode member and wait the managed way, or we see them.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t asleep = e->idle.load(std::memory_order_relaxed);
  if (FdSlot* s = g_slots.find(epfd)) asleep += s->raw_waiters.load(std::memory_order_relaxed);
  if (asleep != 0) kick_waiters(e);
}

// Under e->mu, after a report: leave the wake eventfd readable exactly when
// something stays reportable (other waiters and outer epoll sets look at it).
// Clearing drains first and looks again, so a wake-up that arrived in
// between is never lost.
void settle(EpollState* e, bool residual, bool drained) {
  if (e->wake < 0) return;
  if (!residual && (drained || (e->level && !e->kick))) {
    if (!drained) readiness::eventfd_drain(e->wake);
    e->level = false;
    residual = e->regs.reportable();
  }
  if (residual) raise_level(e);
}

void watch_kernel_members(EpollState* e) {
  XP_ASSERT_HELD(e->mu);
  if (e->epfd < 0) return;
  // Such members stay on the ready list (Regs::keep_linked): the list, not
  // every member, is looked through.
  e->regs.for_each_ready([e](Reg& r) {
    // An orphan's number was closed (another fd keeps the socket): it may
    // name another file by now, whose registration a MOD would overwrite.
    if (r.src == nullptr || !r.shadow || !r.armed || r.orphan || (r.events & EPOLLEXCLUSIVE))
      return;
    short ev = 0;
    if (r.src->kernel_watch(&ev) < 0) return;
    // Input only: the kernel re-checks a registration's level on MOD, so
    // a writable socket, or unread bytes under EPOLLET, would fire at once
    // and wake the sleeper for nothing, over and over.
    constexpr uint32_t kInput = EPOLLIN | EPOLLRDNORM | EPOLLPRI | EPOLLRDHUP;
    uint32_t bits = static_cast<uint16_t>(ev) & r.events & kInput;
    if (bits == 0) return;
    pollfd p{r.fd, static_cast<short>(bits), 0};
    if (XP_REAL(poll, &p, 1, 0) != 0) return; // input there already: the relay tells
    epoll_event k;
    k.events = bits | EPOLLET | EPOLLONESHOT;
    k.data.u64 = kShadowData;
    real_ctl(e->epfd, EPOLL_CTL_MOD, r.fd, &k);
  });
}

void consume_wake(EpollState* e) {
  std::lock_guard<std::mutex> l(e->mu);
  if (e->wake >= 0) readiness::eventfd_drain(e->wake);
  e->level = e->kick = false;
}

void on_create(int epfd) {
  FdSlot* s = g_slots.get(epfd);
  if (s == nullptr) return;
  if (s->ep.load(std::memory_order_acquire) != nullptr) // a number closed behind our back
    on_close(epfd, s, nullptr, false);
  s->flags.store(kSlotEpoll, std::memory_order_release);
}

int ctl(int epfd, int op, int fd, epoll_event* ev) {
  SocketRef rec = track::lookup(fd);
  if (!rec) {
    FdSlot* fs = g_slots.find(fd);
    if (fs && (fs->flags.load(std::memory_order_acquire) & kSlotEpoll))
      return ctl_nested(epfd, op, fd, ev);
    return real_ctl(epfd, op, fd, ev);
  }
  bool valid_op = op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD || op == EPOLL_CTL_DEL;
  if (!valid_op || (op != EPOLL_CTL_DEL && ev == nullptr) || in_vfork_child())
    return real_ctl(epfd, op, fd, ev); // the kernel's error (or a vfork child's call)
  FdSlot* es = g_slots.find(epfd);
  StateRef e = acquire(es);
  if (!e) {
    if (op != EPOLL_CTL_ADD) return real_ctl(epfd, op, fd, ev); // nothing recorded here
    if (!es || !(es->flags.load(std::memory_order_acquire) & kSlotEpoll)) {
      // Not known as an epoll set (made before us, or not one at all): the
      // kernel judges the application's call first.
      int res = real_ctl(epfd, op, fd, ev);
      if (res != 0) return res;
      int err = errno;
      real_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr); // redone below, as a managed set
      e = ensure_state(epfd);
      errno = err;
      if (!e) return real_ctl(epfd, op, fd, ev);
    } else {
      e = ensure_state(epfd);
      if (!e) return real_ctl(epfd, op, fd, ev);
    }
  }
  return ctl_socket(e.get(), epfd, op, fd, ev, rec.get());
}

void on_mode(int fd, stream::ReadySource* now) {
  if (in_vfork_child()) return;
  SocketRef rec = track::lookup(fd);
  if (!rec) return;
  bool aliases = rec->names.load(std::memory_order_acquire) > 1;
  if (!aliases) {
    FdSlot* s = g_slots.find(fd);
    if (s == nullptr || s->nregs.load(std::memory_order_acquire) == 0) return;
  }
  auto apply = [now](EpollState* e, Reg* r) {
    if (r->orphan) return;
    if (now) {
      if (!r->shadow && !kernel_swap(e->epfd, r, true)) return; // closed meanwhile
      r->shadow = true;
      set_src(e, r, now);
      activate(e, e->epfd);
      if (e->regs.check(*r, false)) raise_level(e);
    } else if (r->src) {
      set_src(e, r, nullptr);
      // A disarmed EPOLLONESHOT registration keeps its stand-in until the
      // application re-arms it: the kernel cannot hold it disarmed.
      if (!r->armed) return;
      if (kernel_swap(e->epfd, r, false)) r->shadow = false;
    }
  };
  std::lock_guard<std::mutex> g(list_mu());
  for (EpollState* e = g_list; e; e = e->next) {
    std::lock_guard<std::mutex> l(e->mu);
    if (e->regs.size() == 0 || e->names.load(std::memory_order_relaxed) == 0) continue;
    if (!aliases) {
      // One fd names the socket: its registration is found by the set's
      // (fd, file) index, not by a scan of every registration.
      if (Reg* r = e->regs.find(fd, rec.get())) apply(e, r);
      continue;
    }
    for (size_t i = 0; i < e->regs.size(); ++i) {
      Reg* r = &e->regs.at(i);
      if (r->key == rec.get()) apply(e, r);
    }
  }
}

void on_close(int fd, FdSlot* s, SocketRecord* rec, bool last) {
  if (s != nullptr && (s->flags.load(std::memory_order_acquire) & kSlotEpoll)) {
    s->flags.fetch_and(~kSlotEpoll, std::memory_order_relaxed);
    if (EpollState* e = s->ep.exchange(nullptr, std::memory_order_acq_rel)) {
      Drops drops; // e's own reference last
      drops.state(e);
      if (e->names.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // The set is gone for the application: the kernel drops its
        // registrations in other sets with the file.
        std::lock_guard<std::mutex> g(list_mu());
        for (EpollState* o = g_list; o; o = o->next) {
          std::lock_guard<std::mutex> l(o->mu);
          for (size_t i = o->nested.size(); i-- > 0;) {
            if (o->nested[i].child != e) continue;
            drops.state(e);
            o->nested[i] = o->nested.back();
            o->nested.pop_back();
          }
          o->n_nested.store(static_cast<uint32_t>(o->nested.size()), std::memory_order_release);
        }
      } else {
        int other = other_name(e, fd);
        std::lock_guard<std::mutex> l(e->mu);
        if (e->epfd == fd && other >= 0) e->epfd = other;
      }
    }
  }
  if (rec == nullptr) return;
  bool named = s != nullptr && s->nregs.load(std::memory_order_acquire) != 0;
  bool orphans = last && g_orphans.load(std::memory_order_acquire) != 0;
  if (!named && !orphans) {
    if (last) claims().forget(rec);
    return;
  }
  Drops drops;
  {
    std::lock_guard<std::mutex> g(list_mu());
    for (EpollState* e = g_list; e; e = e->next) {
      std::lock_guard<std::mutex> l(e->mu);
      if (e->regs.size() == 0) continue;
      if (named) {
        if (Reg* r = e->regs.find(fd, rec)) {
          if (last) {
            erase_reg(e, r, drops);
          } else if (!r->orphan) {
            // Another fd keeps the socket open: like the kernel's, the
            // registration lives on under the closed number.
            r->orphan = true;
            ++e->n_orphans;
            g_orphans.fetch_add(1, std::memory_order_relaxed);
          }
        }
      }
      if (last && e->n_orphans != 0) {
        for (size_t i = e->regs.size(); i-- > 0;)
          if (e->regs.at(i).key == rec) erase_reg(e, &e->regs.at(i), drops);
      }
    }
  }
  if (last) claims().forget(rec);
}

void on_dup(int oldfd, int newfd) {
  FdSlot* o = g_slots.find(oldfd);
  if (o == nullptr || !(o->flags.load(std::memory_order_acquire) & kSlotEpoll)) return;
  FdSlot* n = g_slots.get(newfd);
  if (n == nullptr) return;
  n->flags.fetch_or(kSlotEpoll, std::memory_order_relaxed);
  // Both numbers name one set: they must share one state, so it is made now
  // if the set has none yet (dup of an epoll fd is rare).
  if (StateRef e = ensure_state(oldfd)) {
    e->names.fetch_add(1, std::memory_order_relaxed);
    n->ep.store(e.take(), std::memory_order_release); // the new slot's reference
  }
}

void renumber_wake(int oldfd, int newfd) {
  std::lock_guard<std::mutex> g(list_mu());
  for (EpollState* e = g_list; e; e = e->next) {
    std::lock_guard<std::mutex> l(e->mu);
    if (e->wake != oldfd) continue;
    // Moved: the kernel registration follows the file, not the number, so
    // it stays.  Lost: the next user-mode member makes a new one.
    e->wake = newfd;
    if (newfd < 0) e->wake_in_kernel = e->level = e->kick = false;
  }
}

bool has_orphans() {
  return g_orphans.load(std::memory_order_relaxed) != 0;
}

// A fork child has one thread: a lock another thread of the parent held at
// the fork would never be released.
XP_FORK_TEXT void after_fork_child() {
  if (!fork_parts::used(fork_parts::kEpoll)) return;
  new (&g_mu) std::mutex;
  if (LockedClaims* c = g_claims.load(std::memory_order_acquire)) c->reset_lock();
  for (EpollState* e = g_list; e; e = e->next) {
    new (&e->mu) std::mutex;
    e->regs.reset_locks();
    // The parent's sleepers' completion fds stay in the kernel set, which
    // parent and child share: the parent takes them out.  Forgotten here,
    // so the child never removes one a parent's sleeper waits on.
    for (EpollState::ChanReg& c : e->chan_regs)
      c = {};
  }
}

namespace {

// The stream layer's mode changes reach us through track's hook; installed
// before any program code runs, so no change can slip past a new epoll set.
__attribute__((constructor)) void install_hooks() {
  track::set_readiness_hook(on_mode); // (after_fork_child: preload/lifecycle.cc)
}

} // namespace

} // namespace xp::epoll
