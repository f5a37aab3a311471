// Inside the epoll part of the readiness layer (epoll_state.cc: sets,
// registrations, epoll_ctl, hooks; epoll_wait.cc: waiting, nested sets).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

#include "preload/epoll_regs.h"
#include "preload/epoll_state.h"

namespace xp::epoll {

class LockedClaims final : public ExclusiveClaims {
public:
  bool claim(const void* key, uint32_t gen) override {
    std::lock_guard<std::mutex> g(mu_);
    return t_.claim(key, gen);
  }
  bool claimable(const void* key, uint32_t gen) override {
    std::lock_guard<std::mutex> g(mu_);
    return t_.claimable(key, gen);
  }
  void forget(const void* key) override {
    std::lock_guard<std::mutex> g(mu_);
    t_.forget(key);
  }
  void reset_lock() { new (&mu_) std::mutex; } // fork child

private:
  std::mutex mu_;
  ClaimTable t_;
};
// Shared by all epoll sets: an EPOLLEXCLUSIVE event goes to one set only.
LockedClaims& claims(); // never destroyed (epoll_state.cc)

struct Nested {
  int fd;
  EpollState* child; // holds a reference
  uint64_t data;
};

class EpollState {
public:
  std::atomic<uint32_t> refs{0};         // one per FdSlot naming it, per call in flight, per parent
  std::atomic<uint32_t> names{0};        // fd numbers naming it (dup family)
  std::atomic<uint32_t> n_user{0};       // regs.user_count(), read without the lock
  std::atomic<uint32_t> n_nested{0};     // nested.size(), read without the lock
  std::atomic<bool> kernel_first{false}; // the last batch was all user events
  std::atomic<uint32_t> idle{0};         // waits in the kernel not registered as sleepers
  // Sleepers registered under the set's own key (epoll_wait.cc, WakeList):
  // woken when a member's change links it on the ready list (regs, its
  // waker), and when a member enters user mode while they sleep.  Changed
  // under mu; read without it by the waker.
  std::atomic<uint32_t> keyed{0};
  std::mutex mu;
  Regs regs{&claims()};
  std::vector<Nested> nested; // members that are epoll sets themselves
  int epfd = -1;              // a number naming the set, for calls made from hooks
  int wake = -1;              // eventfd, made on the first user-mode member
  bool wake_in_kernel = false;
  bool level = false; // the wake counter as xpress last left it
  bool kick = false;  // the first-activation wake-up, not consumed by a waiter yet
  uint32_t n_orphans = 0;
  // Completion fds in the kernel set while waiters sleep on it
  // (epoll_wait.cc, ChanWait), with how many waiters use each.  Under mu.
  struct ChanReg {
    int fd = -1;
    uint32_t users = 0;
  };
  static constexpr int kChanRegs = 8;
  ChanReg chan_regs[kChanRegs];
  EpollState* prev = nullptr; // g_list, under g_mu
  EpollState* next = nullptr;
};

void release(EpollState* e);

// A counted reference to the state a slot names.
class StateRef {
public:
  StateRef() = default;
  explicit StateRef(EpollState* e) : e_(e) {}
  StateRef(StateRef&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  StateRef& operator=(StateRef&& o) noexcept {
    if (this != &o) {
      if (e_) release(e_);
      e_ = o.e_;
      o.e_ = nullptr;
    }
    return *this;
  }
  StateRef(const StateRef&) = delete;
  StateRef& operator=(const StateRef&) = delete;
  ~StateRef() {
    if (e_) release(e_);
  }
  EpollState* get() const { return e_; }
  EpollState* operator->() const { return e_; }
  explicit operator bool() const { return e_ != nullptr; }
  EpollState* take() {
    EpollState* e = e_;
    e_ = nullptr;
    return e;
  }

private:
  EpollState* e_ = nullptr;
};

// The state a slot names, counted; empty if none.
StateRef acquire(FdSlot* s);
// The state of epoll set epfd, made if it has none (null: out of memory).
StateRef ensure_state(int epfd);

// Under e->mu: the wake eventfd's level (see epoll_state.cc).
void raise_level(EpollState* e);
void activate(EpollState* e, int epfd);
void settle(EpollState* e, bool residual, bool drained);
// A waiter saw the wake eventfd readable (takes e->mu).
void consume_wake(EpollState* e);
// Under e->mu, before a sleep: a user-mode member whose source still reads
// the kernel socket (an upgrade before its switch) gets a one-shot stand-in
// for its input, so that TCP bytes wake the set's sleepers directly rather
// than through the engine, which may be busy creating the channel (tens of
// ms under TCG, on each end).  Fired, it is dropped as xpress's own entry.
void watch_kernel_members(EpollState* e);

} // namespace xp::epoll
