#include "preload/test_user_mode.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>

#include "preload/boundary.h"
#include "preload/config.h"
#include "preload/epoll_state.h"
#include "preload/readiness.h"
#include "stream/ready_source.h"
#include "stream/wake.h"

namespace xp::test_user_mode {
namespace {

// Mirrors the kernel: the level is a poll() of the socket, a new generation
// is any kernel event the watcher's edge-triggered set saw.
class Source final : public stream::ReadySource {
public:
  uint32_t ready_events() const override;
  uint32_t ready_gen(uint32_t events) const override;
  // The kernel's readiness is the whole answer here: watched as a
  // connection's is while it upgrades.
  int kernel_watch(short* events) const override {
    if (!live.load(std::memory_order_acquire)) return -1;
    *events = POLLIN | POLLRDNORM | POLLPRI | POLLRDHUP | POLLOUT | POLLWRNORM;
    return fd.load(std::memory_order_acquire);
  }

  std::atomic<int> fd{-1}; // a number naming the socket
  std::atomic<uint32_t> gen{0};
  std::atomic<bool> live{false}; // false once the socket's last fd closed
  Source* next = nullptr;        // all sources ever made (fork re-registration)
};

std::atomic<int> g_enabled{-1}; // -1: environment not read yet
std::mutex g_mu;                // watcher set-up and the list of sources
std::mutex g_pump;              // consuming events and bumping generations is one step
std::atomic<int> g_ep{-1};      // the watcher's epoll set
std::atomic<bool> g_thread{false};
Source* g_all = nullptr;
bool g_atfork = false;

// Consume the kernel events the watcher set has and bump the sources'
// generations.  Readers call it too (ready_gen), so an edge the kernel
// already has is never missed because the watcher thread was not scheduled
// yet: the generation a reader sees is as new as the kernel's state.
// Each source's sleepers are woken by its key, as the stream layer does
// (wake::notify(conn)), so that the user-mode semantics run proves the
// keyed registrations of poll/select/epoll sleepers miss no readiness.
void pump() {
  int ep = g_ep.load(std::memory_order_acquire);
  if (ep < 0) return;
  int n;
  epoll_event evs[64];
  {
    std::lock_guard<std::mutex> l(g_pump);
    n = XP_REAL(epoll_wait, ep, evs, 64, 0);
    for (int i = 0; i < n; ++i)
      static_cast<Source*>(evs[i].data.ptr)->gen.fetch_add(1, std::memory_order_acq_rel);
  }
  for (int i = 0; i < n; ++i)
    stream::wake::notify(static_cast<stream::ReadySource*>(static_cast<Source*>(evs[i].data.ptr)));
}

// XPRESS_TEST_RELAY_DELAY_MS (0-1000): the watcher relays each batch of
// kernel events that much later, as a busy engine does (it creates
// channels for tens of ms under TCG); sleepers that watch the sockets
// themselves (ReadySource::kernel_watch) must not wait for it.
long relay_delay_ms() {
  return config().test_relay_delay_ms;
}

void* watcher(void*) {
  const long delay_ms = relay_delay_ms();
  for (;;) {
    pollfd p = {g_ep.load(std::memory_order_acquire), POLLIN, 0};
    // No set (the program closed ours; a program thread makes the next one):
    // wait a little rather than spin on POLLNVAL.
    int n = p.fd < 0 ? -1 : XP_REAL(poll, &p, 1, -1);
    if (n > 0 && delay_ms > 0) {
      timespec d = {delay_ms / 1000, (delay_ms % 1000) * 1'000'000};
      nanosleep(&d, nullptr);
    }
    if (n < 0 || (p.revents & POLLNVAL)) {
      timespec ts = {0, 10'000'000};
      nanosleep(&ts, nullptr);
    }
    pump();
  }
  return nullptr;
}

// The watcher thread, started on first need (also again in a fork child,
// which has none).  All signals blocked: they belong to the program's threads.
void ensure_thread() {
  if (g_thread.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> l(g_mu);
  if (g_thread.load(std::memory_order_relaxed)) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  if (pthread_create(&t, &attr, watcher, nullptr) == 0)
    g_thread.store(true, std::memory_order_release);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void watch(Source* s, int fd) {
  epoll_event ev;
  ev.events = EPOLLET | EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI;
  ev.data.ptr = s;
  XP_REAL(epoll_ctl, g_ep.load(std::memory_order_acquire), EPOLL_CTL_ADD, fd, &ev);
}

// Under g_mu: the watcher set, with every live socket in it (first use, a
// fork child, or after the program closed ours).
void make_set_locked() {
  if (g_ep.load(std::memory_order_relaxed) >= 0) return;
  int ep = readiness::internal_epoll();
  if (ep < 0) return;
  g_ep.store(ep, std::memory_order_release);
  for (Source* s = g_all; s; s = s->next)
    if (s->live.load(std::memory_order_relaxed)) watch(s, s->fd.load(std::memory_order_relaxed));
}

void ensure_set() {
  if (g_ep.load(std::memory_order_acquire) >= 0) return;
  std::lock_guard<std::mutex> l(g_mu);
  make_set_locked();
}

// A fork child shares the parent's watcher set (same open file): it gets
// its own, with the live sockets it inherited, and a thread on first need.
void atfork_child() {
  new (&g_mu) std::mutex;
  new (&g_pump) std::mutex;
  g_thread.store(false, std::memory_order_relaxed);
  int old = g_ep.exchange(-1, std::memory_order_relaxed);
  if (old >= 0) readiness::close_internal(old);
  make_set_locked();
}

uint32_t Source::ready_events() const {
  if (!live.load(std::memory_order_acquire)) return 0;
  ensure_set();
  ensure_thread();
  pollfd p = {fd.load(std::memory_order_acquire),
              POLLIN | POLLPRI | POLLOUT | POLLRDHUP | POLLRDNORM | POLLRDBAND | POLLWRNORM |
                  POLLWRBAND,
              0};
  if (XP_REAL(poll, &p, 1, 0) != 1 || (p.revents & POLLNVAL)) return 0;
  return static_cast<uint16_t>(p.revents);
}

uint32_t Source::ready_gen(uint32_t) const {
  pump();
  return gen.load(std::memory_order_acquire);
}

Source* source_of(SocketRecord& r) {
  // Test sources are only installed on records without a connection; a
  // connection's own source (stream::Conn) is never ours.
  if (r.conn.load(std::memory_order_acquire) != nullptr) return nullptr;
  return static_cast<Source*>(r.ready.load(std::memory_order_acquire));
}

} // namespace

bool enabled() {
  int e = g_enabled.load(std::memory_order_relaxed);
  if (__builtin_expect(e >= 0, 1)) return e != 0;
  e = config().test_user_mode;
  g_enabled.store(e, std::memory_order_relaxed);
  return e != 0;
}

void on_established(SocketRecord& r) {
  if (!enabled() || in_vfork_child() || in_internal_call()) return;
  if (r.ready.load(std::memory_order_acquire) || r.conn.load(std::memory_order_acquire)) return;
  int saved = errno;
  Source* s = new (std::nothrow) Source;
  if (s == nullptr) return;
  s->fd.store(r.fd, std::memory_order_relaxed);
  s->live.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!g_atfork) g_atfork = pthread_atfork(nullptr, nullptr, atfork_child) == 0;
    // Sources are never freed: the watcher or a reader may still hold one
    // whose socket just closed (a few bytes per connection, tests only).
    s->next = g_all;
    g_all = s;
    if (g_ep.load(std::memory_order_relaxed) >= 0)
      watch(s, r.fd);
    else
      make_set_locked(); // with s in it
  }
  if (g_ep.load(std::memory_order_acquire) < 0) {
    s->live.store(false, std::memory_order_release);
    errno = saved;
    return;
  }
  ensure_thread();
  r.ready.store(s, std::memory_order_release);
  epoll::on_mode(r.fd, s);
  stream::wake::notify();
  errno = saved;
}

void on_close(SocketRecord& r, int fd, bool last) {
  Source* s = source_of(r);
  if (s == nullptr) return;
  if (!last && s->fd.load(std::memory_order_relaxed) == fd) {
    // Poll through another name of the socket from now on.
    int other = -1;
    track::table().for_each_in(0, INT_MAX, [&](int x) {
      if (other < 0 && x != fd && track::peek(x) == &r) other = x;
    });
    if (other >= 0) {
      s->fd.store(other, std::memory_order_release);
      return;
    }
    last = true;
  }
  if (!last) return;
  s->live.store(false, std::memory_order_release);
  r.ready.store(nullptr, std::memory_order_release);
}

void renumber(int oldfd, int newfd) {
  // Moved: the registrations follow the file.  Lost: the next use makes a
  // new set (not now: this runs just before the program's close_range,
  // which would close a new one as well).
  int expected = oldfd;
  g_ep.compare_exchange_strong(expected, newfd, std::memory_order_acq_rel);
}

} // namespace xp::test_user_mode
