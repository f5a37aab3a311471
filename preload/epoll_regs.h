// One epoll set's registrations of tracked sockets, and what epoll_wait
// reports for the ones in user mode (stream/ready_source.h).  No system call
// here: the kernel side lives in epoll_state.cc, so this logic (EPOLLET,
// EPOLLONESHOT, EPOLLEXCLUSIVE, the requested mask, maxevents, merging with
// the kernel's events) is unit tested with fake sources.
#pragma once
#include <atomic>
#include <boost/intrusive/list.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <sys/epoll.h>
#include <vector>

#include "stream/ready_source.h"

namespace xp::epoll {

// epoll_ctl flags that are not readiness bits (the kernel's EP_PRIVATE_BITS).
constexpr uint32_t kPrivateBits = EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE;
// What the kernel accepts together with EPOLLEXCLUSIVE (EPOLLEXCLUSIVE_OK_BITS).
constexpr uint32_t kExclusiveOkBits =
    EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE;

// The data values of xpress's own kernel registrations in an epoll set: the
// wake eventfd and the neutral stand-in of a user-mode socket.  Never shown
// to the application.  Both are non-canonical x86-64 addresses, so an
// application that stores pointers cannot collide with them.
constexpr uint64_t kWakeData = 0x7870726573735f77ull;   // "xpress_w"
constexpr uint64_t kShadowData = 0x7870726573735f73ull; // "xpress_s"
// A channel's completion fd while a sleeper waits on the set (epoll_wait.cc,
// ChanWait): this tag in the high half, the fd in the low half.
constexpr uint64_t kChanTag = 0x78707263ull << 32; // "xprc"
constexpr bool is_chan_data(uint64_t d) {
  return (d >> 32) == (kChanTag >> 32);
}

// Bits a reported event may carry for a registration's mask: the requested
// readiness bits plus EPOLLERR and EPOLLHUP, which the kernel always reports.
inline uint32_t report_mask(uint32_t events) {
  return (events & ~kPrivateBits) | EPOLLERR | EPOLLHUP;
}
// A source answers EPOLLIN/EPOLLOUT; TCP's poll sets the *NORM bits with them.
inline uint32_t widen(uint32_t ready) {
  if (ready & EPOLLIN) ready |= EPOLLRDNORM;
  if (ready & EPOLLOUT) ready |= EPOLLWRNORM;
  return ready;
}

// EPOLLEXCLUSIVE across epoll sets: the kernel wakes one exclusive waiter
// per event; here the first set to look at a new readiness generation of a
// socket claims it and the others stay quiet until the next one.
class ExclusiveClaims {
public:
  virtual bool claim(const void* key, uint32_t gen) = 0; // true: gen was not claimed yet
  virtual bool claimable(const void* key, uint32_t gen) = 0;
  virtual void forget(const void* key) = 0; // the socket is gone

protected:
  ~ExclusiveClaims() = default;
};

// A table of claims (not thread-safe; the process-wide one wraps it in a lock).
class ClaimTable final : public ExclusiveClaims {
public:
  bool claim(const void* key, uint32_t gen) override;
  bool claimable(const void* key, uint32_t gen) override;
  void forget(const void* key) override;

private:
  struct Claim {
    const void* key;
    uint32_t gen;
  };
  std::vector<Claim> claims_; // few: only sockets registered with EPOLLEXCLUSIVE
};

class Regs;

// One registration, as the kernel keys it: fd number and open file (the
// socket's record stands for the file).  While in user mode it watches its
// source (stream::ReadyWatch) and sits on the set's ready list whenever it
// may have something to report (Regs).
struct Reg final : stream::ReadyWatch {
  bool on_change(bool wake_exclusive) override;
  Regs* owner = nullptr;
  uint32_t pos = 0; // index in the owner's table
  boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::safe_link>>
      ready_hook;
  int fd = -1;
  const void* key = nullptr;
  uint32_t events = 0; // as the application asked, flags included
  uint64_t data = 0;
  // Non-null while xpress answers readiness: the kernel then holds only the
  // neutral stand-in (`shadow`).  A disarmed EPOLLONESHOT registration keeps
  // its stand-in after leaving user mode (the kernel cannot hold a disarmed
  // registration otherwise); the next EPOLL_CTL_MOD restores it.
  stream::ReadySource* src = nullptr;
  bool shadow = false;
  bool armed = true;        // EPOLLONESHOT: cleared by a report, set by MOD
  bool edge_pending = true; // ADD/MOD/entering user mode: report the current level once (ET)
  bool orphan = false;      // its fd number was closed while another fd keeps the socket open
  bool excl_owned = true;   // EPOLLEXCLUSIVE: this set claimed the current generation
  uint32_t last_gen = 0;    // EPOLLET: generation last looked at
  uint32_t excl_gen = 0;    // EPOLLEXCLUSIVE: generation last claimed (or lost)
};

// A set's registrations, with its ready list as the kernel keeps one
// (fs/eventpoll.c's rdllist): a user-mode registration is linked there when
// its source tells of a change (Reg::on_change, from whichever thread made
// it), when it enters user mode, and on ADD/MOD; harvest() looks only at
// the list, re-checks each entry, keeps a level-triggered one while it is
// ready and unlinks the others, so a wait costs what changed, not how many
// members there are.  An entry whose source reads a kernel socket
// (ReadySource::kernel_watch: its readiness changes with nobody telling)
// stays linked; after a change announced without a source
// (stream::wake::all_gen()) every user-mode registration is linked again.
//
// Lock rules: everything but on_change() runs under the owner's lock (the
// epoll set's mu; the unit tests have one thread).  The ready list has its
// own lock, ready_mu_, the innermost: on_change() takes it with the
// source's watch lock held, and every other function here takes it inside
// the owner's lock.  The waker runs with the source's watch lock held and
// no other (it must not take the owner's lock).
class Regs {
public:
  explicit Regs(ExclusiveClaims* claims) : claims_(claims) {}
  Regs(const Regs&) = delete;
  Regs& operator=(const Regs&) = delete;
  ~Regs() { clear(); }

  // Told when an entry is linked by its source's change: wakes the set's
  // sleepers; returns whether there were any.
  using Waker = bool (*)(void* ctx);
  void set_waker(Waker fn, void* ctx) {
    waker_ = fn;
    waker_ctx_ = ctx;
  }

  void reset_locks() { new (&ready_mu_) std::mutex; } // fork child: one thread

  // Pointers stay valid until the registration is erased.
  Reg* find(int fd, const void* key);
  Reg* insert(const Reg& r); // the caller made sure (fd, key) is absent
  void erase(Reg* r);
  void clear();
  size_t size() const { return regs_.size(); }
  uint32_t user_count() const { return n_user_; }
  // User-mode registrations that ask for EPOLLOUT: a sleeper on the set may
  // wait for room to send (stream::engine::room_wait_enter).
  uint32_t user_out_count() const { return n_user_out_; }
  Reg& at(size_t i) { return *regs_[i]; }

  // Enter user mode (src non-null, the kernel holds the stand-in) or leave it.
  void set_src(Reg* r, stream::ReadySource* src);
  // ADD/MOD semantics: new mask and data, re-armed, current level reported once.
  void rearm(Reg* r, uint32_t events, uint64_t data);

  // What r reports now (0: nothing).  With `take` the report happens: an
  // EPOLLET edge is consumed (also when nothing matches the mask, as the
  // kernel drops a woken item whose poll comes back empty), EPOLLONESHOT
  // disarms, EPOLLEXCLUSIVE claims the generation.
  uint32_t check(Reg& r, bool take);
  // Reports user-mode registrations into out[0..room), starting after the
  // last one reported (the kernel's round robin of level-triggered items).
  // *residual: something is still reportable afterwards (a level-triggered
  // registration just reported, or one that did not fit).
  int harvest(epoll_event* out, int room, bool* residual);
  // Whether harvest would report anything now (consumes nothing).
  bool reportable();
  // Calls fn(Reg&) for each entry of the ready list (which holds every
  // user-mode registration whose source reads a kernel socket).
  template <class Fn> void for_each_ready(Fn fn) {
    std::lock_guard<std::mutex> g(ready_mu_);
    for (Reg& r : ready_)
      fn(r);
  }
  // Registrations looked at by harvest() and reportable(), in all (tests:
  // a wait costs what changed).
  uint64_t visits() const { return visits_; }
  size_t ready_len();

private:
  friend struct Reg;
  // Links r (if it is in user mode and not linked yet).  Under ready_mu_.
  void link_locked(Reg& r);
  void link(Reg& r);
  // After a change announced to all: every user-mode registration.
  void relink_all();
  void detach(Reg& r); // stops watching its source, leaves the ready list
  bool keep_linked(const Reg& r) const;
  size_t slot_of(int fd, const void* key) const;
  void index_put(uint32_t pos);
  void index_del(size_t slot);
  void grow();

  ExclusiveClaims* claims_;
  std::vector<std::unique_ptr<Reg>> regs_; // owned one by one: hooks and pointers stay put
  using ReadyList = boost::intrusive::list<
      Reg,
      boost::intrusive::member_hook<Reg,
                                    boost::intrusive::list_member_hook<
                                        boost::intrusive::link_mode<boost::intrusive::safe_link>>,
                                    &Reg::ready_hook>,
      boost::intrusive::constant_time_size<false>>;
  std::mutex ready_mu_;
  ReadyList ready_;
  Waker waker_ = nullptr;
  void* waker_ctx_ = nullptr;
  uint32_t all_seen_ = 0; // stream::wake::all_gen() when everything was last linked
  uint64_t visits_ = 0;
  std::vector<uint32_t> index_; // open addressing, linear probing: position + 1, 0 = empty
  static bool user_out(const Reg& r) {
    return r.src != nullptr && (r.events & (EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND));
  }
  uint32_t n_user_ = 0, n_user_out_ = 0;
};

// Drops xpress's own entries (kWakeData, kShadowData, channels) from
// ev[0..n); returns the new count; *saw_wake when the wake eventfd was among
// them; the fds of the channels among them in chan_fds (up to kChanFds),
// their count in *nchan, when given.
constexpr int kChanFds = 8;
int drop_reserved(epoll_event* ev, int n, bool* saw_wake, int* chan_fds = nullptr,
                  int* nchan = nullptr);
// ev[0..na) and ev[na..na+nb) were reported by the two sides; an event of
// the second range whose data equals one of the first is folded into it
// (bits or-ed).  Returns the new total.
int fold_same_data(epoll_event* ev, int na, int nb);

} // namespace xp::epoll
