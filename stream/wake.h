// Waking threads that sleep in the kernel while xpress, not the kernel,
// knows when they can go on (connections in user mode, stream/ready_source.h).
// A thread about to sleep registers an eventfd it also passes to its kernel
// wait (poll, epoll_wait); whoever changes a connection's readiness calls
// notify(), which writes every registered eventfd.  Spurious wake-ups are
// allowed: sleepers re-check their condition.  Registration is done before
// the sleeper's final check, so no wake-up can be lost in between.
#pragma once

#include <cstdint>

namespace xp::stream::wake {

// This thread's eventfd (EFD_NONBLOCK|EFD_CLOEXEC, created on first use,
// closed at thread exit); -1 if none could be made.
int thread_fd();
// Register / unregister an eventfd as a sleeper.  add() returns false when
// the calling thread has no room for more registrations (the caller then
// sleeps with a short timeout).
// key: what the sleeper waits for (a connection: its ReadySource, which is
// where a Conn starts, so the Conn* the stream layer notifies with is the
// same key); null: anything (a watcher, see any_sleepers()).
bool add(int efd, const void* key = nullptr);
// A watcher (poll, select, epoll_wait over user-mode fds) that knows the
// connections it waits for: efd is registered under each of the n keys, so
// a change of another connection does not wake it (4 threads each polling
// its own connection: every answer woke all four).  All or nothing.
constexpr int kMaxWatchKeys = 8;
bool add_watch(int efd, const void* const* keys, int n);
// Removes every registration of efd that the calling thread made (another
// thread asleep on the same epoll set keeps its own).
void remove(int efd);
// Wake the sleepers waiting for key and those waiting for anything (key
// null: every sleeper).  One relaxed load when nobody sleeps; three, and no
// lock, when nobody waits for key or for anything; else the registrations
// of key's bucket and those for anything, not every registration.
// A connection's key (a ReadySource) also tells the source's watchers
// (ReadySource::tell_watchers: its epoll sets' ready lists); no key also
// moves all_gen().
void notify(const void* key = nullptr);
// The same without telling watchers: key is not a connection (an epoll
// set's own key, under which its sleepers register, preload/epoll_wait.cc).
void notify_set(const void* key);
// Moves with every notify() without a key: a change nobody said whose it
// was, after which a ready list is not enough (everything is looked at).
uint32_t all_gen();
// Some thread sleeps (or is about to) as a watcher: a poll, select or
// epoll_wait over user-mode fds, waiting for anything or for the keys of
// add_watch().  Such a sleeper learns of its bytes only
// from whoever polls their channel, so a channel nobody spins on must stay
// armed while it sleeps (stream/channel_events.cc).  seq_cst: pairs with the
// sleeper's registration, which comes before its arm_before_sleep().
bool any_sleepers();
// How many notify() calls took a lock to scan sleepers (tests).
uint64_t scans_for_tests();
// How many registrations notify() calls looked at, in all (tests).
uint64_t visited_for_tests();
// While one lives, notify() in this thread skips this thread's own eventfd:
// a sleeper that woke and polls before it re-checks its condition need not
// wake itself (a write now, a read later).  Only where that re-check follows.
struct SelfAwake {
  bool on = false;
  void start();
  ~SelfAwake();
};
// No thread in this process calls notify() any more (a fork child of a
// process whose engine ran: that thread stayed in the parent, and the
// child's connections that are still in user mode, resumed streams with
// bytes buffered at the fork, change only when the child itself looks).
// add() then refuses, so that sleepers sleep in short slices and look
// again (a registered sleeper would wait for a wake-up that never comes).
void set_no_waker(bool none);
// Consume pending wake-ups of efd (non-blocking read).
void drain(int efd);
// Called by add() after registering, before the sleeper's final check: the
// engine arms the completion events nobody is taking (stream/channel_events.cc).
void set_before_sleep(void (*fn)());

} // namespace xp::stream::wake
