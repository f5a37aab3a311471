// The engine thread and the connection tables (see engine.h).
#include "stream/engine.h"
#include "common/fork_parts.h"
#include "common/lock_check.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fd_place.h"
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/fault.h"
#include "stream/fork_handover.h"
#include "stream/listen_addr.h"
#include "stream/move.h"
#include "stream/ready_source.h"
#include "stream/reattach.h"
#include "stream/resume_fork.h"
#include "stream/startup_checks.h"
#include "stream/wake.h"
#include "verbs/device.h"

using linux_tcp_info = ::tcp_info; // linux/tcp.h: has tcpi_bytes_received

namespace xp::stream {
namespace engine {

namespace {

constexpr uint32_t kShareMagic = 0x53505258; // "XRPS"
constexpr uint64_t kCopyChoiceMs = 1000;     // engine_main: the copy choice waits at most this
// epoll data tags: the low bit of an aligned pointer says what it is.
constexpr uintptr_t kTagConn = 1;

// Never destroyed: the engine thread runs until the process ends, after
// static destructors.
std::atomic<State*> g_created{nullptr};
// No function-local static: the fork handlers skip the engine until its
// state was made (common/fork_parts.h), so a fork may now happen while
// another thread makes it, and a child would wait forever on a static's
// guard left taken by a thread it does not have.  Two makers: one keeps
// its state, the other frees its own (nothing has seen it).
State& state_once() {
  if (State* s = g_created.load(std::memory_order_acquire)) return *s;
  fork_parts::mark(fork_parts::kEngine); // before its locks exist
  auto* st = new State();
  State* none = nullptr;
  if (g_created.compare_exchange_strong(none, st, std::memory_order_acq_rel)) return *st;
  delete st;
  return *none;
}
#define g_state (state_once())
std::atomic<OutcomeHook> g_outcome{nullptr};
std::atomic<TickHook> g_tick_hook{nullptr};
constexpr uint64_t kTickHookMs = 100;
std::atomic<SwitchHook> g_switch{nullptr};

void* engine_main(void*);

bool start_locked() {
  State& s = g_state;
  if (s.started) return s.cm != nullptr;
  s.started = true;
  s.used_rdma = true;
  wake::set_before_sleep(arm_before_sleep);
  s.cm = verbs::Cm::create();
  if (s.cm == nullptr) return false;
  s.epfd = place_high(static_cast<int>(syscall(SYS_epoll_create1, EPOLL_CLOEXEC)));
  s.cmdfd = place_high(static_cast<int>(syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC)));
  if (s.epfd < 0 || s.cmdfd < 0) {
    delete s.cm;
    s.cm = nullptr;
    return false;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0; // the command eventfd
  syscall(SYS_epoll_ctl, s.epfd, EPOLL_CTL_ADD, s.cmdfd, &ev);
  ev.data.u64 = 2; // the rdma_cm event channel
  syscall(SYS_epoll_ctl, s.epfd, EPOLL_CTL_ADD, s.cm->fd(), &ev);
  // The thread must not take signals meant for the application's threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int r = pthread_create(&t, &a, engine_main, nullptr);
  pthread_attr_destroy(&a);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (r != 0) {
    delete s.cm;
    s.cm = nullptr;
    return false;
  }
  pthread_setname_np(t, "xpress-engine");
  log_startup_checks(s.p);
  return true;
}

void watch_tcp(Conn* c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET;
  ev.data.u64 = reinterpret_cast<uintptr_t>(c) | kTagConn;
  syscall(SYS_epoll_ctl, g_state.epfd, EPOLL_CTL_ADD, c->sock(), &ev);
}

} // namespace

bool start_for_claim(Conn* c) {
  if (!start_locked()) return false;
  // A process with an engine of its own now: its exit ends its streams
  // (stream/exit.cc), and its new connections may use it too.
  g_state.forked_child = false;
  if (!g_state.inherited_user_mode) wake::set_no_waker(false);
  watch_tcp(c);
  return true;
}

void watch_channel(Channel* ch) {
  XP_ASSERT_HELD(g().mu);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = reinterpret_cast<uintptr_t>(ch); // tag 0, never 0 or 2
  syscall(SYS_epoll_ctl, g_state.epfd, EPOLL_CTL_ADD, ch->link->wait_fd(), &ev);
  ch->link->arm(false);
}

bool tcp_bytes_received(const Conn* c, uint64_t* n) {
  linux_tcp_info ti{};
  socklen_t len = sizeof ti;
  if (syscall(SYS_getsockopt, c->sock(), IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(linux_tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
    return false;
  *n = ti.tcpi_bytes_received;
  return true;
}

void tcp_event(Conn* c, uint32_t events) {
  // The kernel socket changed: remember what it said (cleared by the data
  // calls when the kernel says EAGAIN) and tell sleepers.  An edge for
  // EPOLLET only when something new happened: a bit that was not set, or
  // bytes that arrived (the event mask alone cannot tell an ACK's wake-up
  // from new data).
  uint32_t nb = events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI);
  c->ready.tcp_bits.fetch_or(nb, std::memory_order_acq_rel);
  if (c->resumed.load(std::memory_order_acquire)) { // stream/resume.cc moves the bytes
    std::lock_guard<std::mutex> l(c->mu);
    if (c->closed.load()) return;
    if (c->rs && c->rs->moved && c->ch == nullptr) {
      // Only the program's calls read a moved stream's socket (a fork
      // child may be the one using it): readiness changed, nothing more.
      c->note_ready(nb & EPOLLIN);
      wake::notify(c);
      return;
    }
    resume::pump(c);
    reattach::advance(c); // back to RDMA: frames drained, SWITCHBACK read
    return;
  }
  if ((nb & EPOLLIN) && c->rx_rdma.load() && tcp_after_switch(c)) return;
  bool new_data = false, counted = false;
  if ((nb & EPOLLIN) && !c->rx_rdma.load()) {
    // Bytes count once: a channel event that found EPOLLIN newly set, or an
    // exclusive look's catch_up, may have taken them already.  Their edge
    // is counted at once, before the poll note_ready makes (a look that
    // finds them taken but not yet counted counts an edge itself:
    // Conn::catch_up).
    uint64_t n = 0;
    if (tcp_bytes_received(c, &n)) {
      c->ready.take_and_edge(n);
      counted = true;
    } else {
      new_data = true;
    }
  }
  c->note_ready(new_data, counted);
  wake::notify();
}

namespace {

void on_channel_event(Channel* ch) {
  take_event(ch, true); // stream/channel_events.cc: whether to re-arm, whether to poll
}

void run_commands() {
  State& s = g_state;
  uint64_t v;
  syscall(SYS_read, s.cmdfd, &v, sizeof v);
  std::vector<ListenShare*> serve;
  std::vector<Conn*> start;
  {
    std::lock_guard<std::mutex> q(s.qmu);
    serve.swap(s.serve_queue);
    start.swap(s.start_queue);
  }
  std::lock_guard<std::mutex> l(s.mu);
  for (ListenShare* sh : serve)
    serve_share(s, sh, nullptr);
  for (Conn* c : start) {
    start_client(s, c);
    c->unref();
  }
}

} // namespace

// How long the engine may sleep: ticks only while something is timed (an
// upgrade under way, a request or attach waiting, channels to reap); an
// idle process with nothing to time sleeps until an event comes.
int wait_ms() {
  State& s = g_state;
  std::lock_guard<std::mutex> l(s.mu);
  if (polls_owed()) return kOwedPollMs;
  if (maybe_unarmed()) return unarmed_in_use() ? kBusyUnarmedTickMs : kUnarmedTickMs;
  if (!s.reqs.empty() || !s.attaches.empty() || !s.parked.empty() || fork_judgements_pending() ||
      s.maybe_timed.load())
    return kTickMs;
  if (!s.chans.empty() || !s.conns.empty()) {
    // Keepalives every third of their timeout (engine_control.cc).
    uint32_t ka = s.p.keepalive_ms / 3;
    return ka > 0 && ka < 1000 && !s.chans.live().empty() ? static_cast<int>(ka) : 1000;
  }
  return -1;
}

namespace {

void* engine_main(void*) {
  State& s = g_state;
  epoll_event evs[64];
  uint64_t last_tick = now_ms(), last_hook = last_tick;
  const uint64_t started = last_tick;
  bool copy_chosen = false;
  while (true) {
    std::vector<Conn*> dead;
    {
      std::lock_guard<std::mutex> q(s.qmu);
      dead.swap(s.graveyard);
    }
    for (Conn* c : dead)
      delete c;
    int n = static_cast<int>(syscall(SYS_epoll_wait, s.epfd, evs, 64, engine_wait_ms(wait_ms())));
    engine_waited();
    // The payload copy is chosen off the application's threads, once the
    // engine is first idle (or busy for kCopyChoiceMs): the engine's first
    // work (a server's rdma_cm listener, a client's first attempt) must not
    // wait for it, or a client's second ask may find no listener yet and
    // stay on TCP for good (docs/protocol.md §1).  Until then the data path
    // copies with memcpy (common/bulk_copy.h).
    if (!copy_chosen && (n == 0 || now_ms() - started >= kCopyChoiceMs)) {
      copy_chosen = true;
      const CopyChoice cc = select_bulk_copy(s.p.copy);
      if (cc.libc_ns)
        XP_SLOG(XP_SLOG_INFO, "payload copies: %s (64 KiB: memcpy %lu ns, chosen %lu ns)", cc.name,
                static_cast<unsigned long>(cc.libc_ns), static_cast<unsigned long>(cc.chosen_ns));
    }
    for (int i = 0; i < n; ++i) {
      uint64_t d = evs[i].data.u64;
      if (d == 0) {
        run_commands();
      } else if (d == 2) {
        verbs::CmEvent ev;
        while (true) {
          std::lock_guard<std::mutex> l(s.mu);
          if (!s.cm->next(&ev)) break;
          on_cm_event(s, ev);
        }
      } else if (d == kTagForkWatch) {
        tick_forks(now_ms()); // a process that held a socket a fork shared exited
      } else if (d & kTagConn) {
        tcp_event(reinterpret_cast<Conn*>(d & ~kTagConn), evs[i].events);
      } else {
        on_channel_event(reinterpret_cast<Channel*>(d));
      }
    }
    pay_owed_polls();
    if (maybe_held()) post_idle_held();
    if (maybe_unarmed()) arm_idle_channels();
    uint64_t now = now_ms();
    if (now - last_tick >= kTickMs) {
      last_tick = now;
      tick_conns(s, now);
      tick_forks(now);
      tick_claims(now);
      if (now - last_hook >= kTickHookMs) {
        last_hook = now;
        if (TickHook h = g_tick_hook.load(std::memory_order_acquire)) h();
      }
      std::lock_guard<std::mutex> l(s.mu);
      retry_pending(s, now);
      relisten(s, now);
      reap_channels(s, now);
    }
  }
  return nullptr;
}

// False when the kernel gives no randomness: no upgrade then (a guessable
// nonce or key exchange secret would weaken the binding, docs/protocol.md §2).
bool fill_random(void* b, size_t n, unsigned flags = 0) {
  ssize_t r;
  do {
    r = getrandom(b, n, flags);
  } while (r < 0 && errno == EINTR);
  return r == static_cast<ssize_t>(n);
}

bool make_secrets(recover::SessionParams* p) {
  uint8_t b[sizeof p->nonce.b + sizeof p->seed];
  if (!fill_random(b, sizeof b)) return false;
  memcpy(p->nonce.b, b, sizeof p->nonce.b);
  memcpy(p->seed, b + sizeof p->nonce.b, sizeof p->seed);
  return true;
}

Conn* make_conn(int fd, recover::Role role, const sockaddr* local, const sockaddr* peer,
                Reason* why) {
  recover::SessionParams p;
  p.role = role;
  p.timeout_ms = g_state.p.handshake_timeout_ms;
  p.wait_ms = g_state.p.program_wait_ms;
  const sockaddr* client = role == recover::Role::client ? local : peer;
  const sockaddr* server = role == recover::Role::client ? peer : local;
  if (recover::tuple_from_sockaddrs(client, server, &p.tuple) != Status::ok) {
    *why = Reason::handshake_failed;
    return nullptr;
  }
  if (!make_secrets(&p)) {
    XP_SLOG(XP_SLOG_WARN, "getrandom failed (%s): connection stays on TCP", strerror(errno));
    *why = Reason::handshake_failed;
    return nullptr;
  }
  if (!recover::pake::available()) { // said once, where libsodium was looked for
    *why = Reason::handshake_failed;
    return nullptr;
  }
  auto* c = new (std::nothrow) Conn(fd, p);
  if (c == nullptr)
    *why = Reason::resources_exhausted;
  else
    c->rv.nonce = p.nonce;
  return c;
}

// s.mu held: a new connection in the table, its socket watched; referenced
// once for the caller.
Conn* register_conn(int fd, recover::Role role, const sockaddr* local, const sockaddr* peer,
                    Reason* why) {
  Conn* c = make_conn(fd, role, local, peer, why);
  if (c == nullptr) return nullptr;
  if (!start_locked()) {
    *why = Reason::no_device;
    c->unref();
    return nullptr;
  }
  c->ref(); // the table's
  g_state.conns.add(c);
  g_state.maybe_timed.store(true); // a new upgrade is timed until advance() says otherwise
  index_server(g_state, c);        // its pending requests and ATTACHes are answered
  c->note_ready(false);            // edges are counted from here
  watch_tcp(c);
  return c;
}

} // namespace

bool fresh_chan_nonce(uint8_t out[recover::kChanNonceBytes]) {
  return fill_random(out, recover::kChanNonceBytes, GRND_NONBLOCK); // called under State::mu
}

State& g() {
  return state_once();
}

State* g_if_created() {
  return g_created.load(std::memory_order_acquire);
}

uint64_t now_ms() {
  return mono_ns() / 1000000;
}

void kick() {
  uint64_t one = 1;
  syscall(SYS_write, g_state.cmdfd, &one, sizeof one);
}

void report(Conn* c, Mode m, Reason why) {
  if (c->counted_mode || c->closed.load()) return;
  c->counted_mode = true;
  if (OutcomeHook h = g_outcome.load(std::memory_order_acquire)) h(c->sock(), m, why);
}

void report_switch(Conn* c, bool tx, uint64_t at) {
  if (c->closed.load()) return;
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: %s switched to RDMA at byte %llu", c->sock(),
          tx ? "sending" : "receiving", static_cast<unsigned long long>(at));
  if (SwitchHook h = g_switch.load(std::memory_order_acquire)) h(c->sock(), tx, at);
}

} // namespace engine

Conn::InEdge Conn::fresh_in_edge(bool in_counted) {
  // (Read after note_ready's level: a receive direction on TCP now was on
  // TCP then, and its EPOLLIN was the kernel's.)
  if (rx_rdma.load(std::memory_order_acquire) || resumed.load(std::memory_order_acquire))
    return kInEdge;
  // The caller's count came before the level: bytes after it raise another
  // relay (engine::tcp_event), which counts them.
  if (in_counted) return kInCounted;
  uint64_t n = 0;
  if (!engine::tcp_bytes_received(this, &n)) return kInEdge;
  // The bytes that made EPOLLIN appear are this edge; the engine's later
  // relay of the same bytes finds them taken.
  return ready.take_and_edge(n) ? kInTook : kInCounted;
}

void Conn::catch_up() {
  // Only while the receive direction reads TCP: then the kernel's level
  // (ready_events) runs ahead of the engine's relay (tcp_event).
  if (rx_rdma.load(std::memory_order_acquire) || resumed.load(std::memory_order_acquire)) return;
  uint64_t n = 0;
  if (!engine::tcp_bytes_received(this, &n)) return;
  // New bytes: their edge.  Bytes another took (the relay, a refresh)
  // whose edge is not counted yet (that taker descheduled between the two,
  // or a thread a fork left behind): an edge now, not a wait for it.  The
  // taker's own edge may follow: two edges for the same bytes, at worst a
  // duplicate report (epoll(7) allows it for EPOLLEXCLUSIVE), never a lost
  // one.
  if (!ready.take_tcp_bytes(n) && ready.tcp_rx_edged.load(std::memory_order_acquire) >= n) return;
  ready.edge_tcp_bytes(n);
  // Edge-triggered sets learn of it now (the engine's relay, which would
  // have told them, finds the bytes taken; it still wakes everyone).
  wake::notify(this);
}

using namespace engine;

void engine::configure(const EngineParams& p) {
  g_state.p = p;
  fault::arm_qp_error(p.fault_qp_error_at);
}

const EngineParams& engine::params() {
  return g_state.p;
}

void engine::set_outcome_hook(OutcomeHook h) {
  g_outcome.store(h, std::memory_order_release);
}

void engine::set_tick_hook(TickHook h) {
  g_tick_hook.store(h, std::memory_order_release);
}

void engine::set_switch_hook(SwitchHook h) {
  g_switch.store(h, std::memory_order_release);
}

Reason engine::unavailable() {
  if (g_state.forked_child) return Reason::fork_after_rdma;
  if (Reason r = g_state.pinned_reason.load(); r != Reason::none) return r;
  if (!verbs::device_present()) return Reason::no_device;
  return Reason::none;
}

ListenShare* engine::on_listen(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (syscall(SYS_getsockname, fd, &ss, &len) != 0) return nullptr;
  int v6only = 0;
  socklen_t olen = sizeof v6only;
  if (ss.ss_family == AF_INET6 &&
      syscall(SYS_getsockopt, fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen) != 0)
    return nullptr;
  sockaddr_storage la;
  bool af_only = false;
  if (!listen_addr(ss, v6only != 0, &la, &af_only)) return nullptr;
  // Shared with fork children, which inherit the listening socket.
  void* m =
      mmap(nullptr, sizeof(ListenShare), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  auto* s = static_cast<ListenShare*>(m); // zero-filled: every slot free, no owner
  share_init(s);
  s->magic = kShareMagic;
  s->addr = la;
  s->af_only = af_only;
  return s;
}

void engine::release_share(ListenShare*) {
  // The mapping stays: a sibling process may still accept from the socket.
}

namespace {
// Threads get lanes in the order they first connect: a pool's threads
// spread over the channels to a peer, one per thread while they suffice.
uint32_t thread_lane() {
  static std::atomic<uint32_t> next{0};
  static thread_local uint32_t lane = ~0u;
  if (lane == ~0u) lane = next.fetch_add(1, std::memory_order_relaxed);
  return lane;
}
} // namespace

Conn* engine::on_connect(int fd, const sockaddr* local, const sockaddr* peer, Reason* why) {
  State& s = g_state;
  const uint32_t lane = thread_lane();
  std::lock_guard<std::mutex> l(s.mu);
  Conn* c = register_conn(fd, recover::Role::client, local, peer, why);
  if (c == nullptr) return nullptr;
  c->rv.lane = lane;
  XP_SLOG(XP_SLOG_TRACE, "fd %d: connected, upgrade queued", fd);
  c->ref(); // the start queue's
  {
    std::lock_guard<std::mutex> q(s.qmu);
    s.start_queue.push_back(c);
  }
  kick();
  return c;
}

Conn* engine::on_accept(int fd, ListenShare* share, const sockaddr* local, const sockaddr* peer,
                        Reason* why) {
  if (share == nullptr || share->magic != kShareMagic) {
    *why = Reason::handshake_failed;
    return nullptr;
  }
  State& s = g_state;
  std::lock_guard<std::mutex> l(s.mu);
  Conn* c = register_conn(fd, recover::Role::server, local, peer, why);
  if (c == nullptr) return nullptr;
  XP_SLOG(XP_SLOG_TRACE, "fd %d: accepted", fd);
  // The client may need an attach, a refusal and a redirect first.
  c->deadline_ms = now_ms() + 2 * s.p.handshake_timeout_ms;
  c->rv.share = share;
  // At once, not from the engine thread: the client's request may already
  // be on its way, and an rdma_cm port nobody listens on means "no xpress".
  serve_share(s, share, c);
  return c;
}

bool engine::stop_switching(Conn* c) {
  std::lock_guard<std::mutex> l(c->mu);
  // Under the lock advance() switches under: a switch is either done (and
  // reported) or never happens.
  if (!c->tx_rdma.load()) c->tx_shut = true;
  return c->sess.coverage_short();
}

void engine::on_close(Conn* c) {
  resume::before_close(c); // bytes the program wrote reach the kernel first
  State& s = g_state;
  std::lock_guard<std::mutex> l(s.mu);
  {
    std::lock_guard<std::mutex> cl(c->mu);
    c->closed.store(true);
    c->ready.gen.fetch_add(1);
    syscall(SYS_epoll_ctl, s.epfd, EPOLL_CTL_DEL, c->sock(), nullptr);
    if (c->at_fork.ino != 0) fork_closed(c->at_fork.ino);
    c->at_fork.ino = 0;
    if (Channel* ch = c->ch) {
      std::lock_guard<std::mutex> chl(ch->mu);
      // Going back to RDMA, our direction still on TCP: nothing of ours is
      // on the channel, so no FIN there (the kernel's ends our frames).
      if (c->resumed.load() && !c->tx_rdma.load() && c->st) {
        ch->mux->forget(c->st);
        c->st = nullptr;
      }
      // Unread bytes make the kernel answer close with a reset; so do we.
      // Otherwise FIN, after everything written (already posted).
      if (c->st) c->st->end_as_close();
      detach(c, ch);
    }
    c->ch = nullptr;
    if (c->rv.share) {
      uint8_t key[recover::kTupleIdBytes];
      recover::tuple_id(c->tuple, key);
      (void)share_remove(c->rv.share, key, getpid());
    }
  }
  unindex_server(s, c);
  if (c->role == recover::Role::server && !c->at_fork.handed_over) {
    // (One this process let go at a fork is its child's: a request for it
    // waits for the child's publication.)
    std::array<uint8_t, recover::kTupleIdBytes> k;
    recover::tuple_id(c->tuple, k.data());
    if (s.closed_keys.size() >= 256) s.closed_keys.erase(s.closed_keys.begin());
    s.closed_keys.push_back(k);
  } else {
    forget_attempts(s, c);
  }
  if (s.conns.remove(c)) c->unref();
  wake::notify(); // a call blocked on this connection in another thread returns
}

void engine::renumber(Conn* c, int newfd) {
  std::lock_guard<std::mutex> cl(c->mu);
  int old = c->sock();
  bool watched = c->phase.load() != Phase::tcp;
  if (watched) syscall(SYS_epoll_ctl, g_state.epfd, EPOLL_CTL_DEL, old, nullptr);
  c->fd.store(newfd, std::memory_order_release);
  if (watched) watch_tcp(c);
}

void Conn::unref() {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The engine thread may hold this pointer from an epoll batch it is
  // working through: it frees the connection before its next wait.
  State& s = g_state;
  if (s.started && s.cm != nullptr) {
    std::lock_guard<std::mutex> q(s.qmu);
    s.graveyard.push_back(this);
    return;
  }
  delete this;
}

Channel* Conn::sleep_channel() const {
  // A resumed stream's readiness comes from the engine's relay of its frames.
  if (resumed.load(std::memory_order_acquire)) return nullptr;
  Channel* c = ch;
  return c != nullptr && !c->failed.load(std::memory_order_relaxed) ? c : nullptr;
}

int Conn::kernel_watch(short* events) const {
  // A resumed stream's TCP bytes are frames the engine pumps first: its
  // relay is what makes them readable.
  if (resumed.load(std::memory_order_acquire)) return -1;
  const bool rx = rx_rdma.load(std::memory_order_acquire);
  const bool tx = tx_rdma.load(std::memory_order_acquire);
  if (rx && tx) return -1;
  short ev = 0;
  if (!rx) ev |= POLLIN | POLLRDNORM | POLLPRI | POLLRDHUP;
  if (!tx) ev |= POLLOUT | POLLWRNORM;
  *events = ev;
  return sock();
}

uint32_t Conn::ready_events() const {
  if (resumed.load(std::memory_order_acquire)) return resume::ready_events(this);
  const bool rx = rx_rdma.load(std::memory_order_acquire);
  const bool tx = tx_rdma.load(std::memory_order_acquire);
  uint32_t out = 0;
  if (!rx || !tx) {
    // A direction still on TCP: the kernel knows exactly (its readiness
    // must never be stale: select() is often followed by a blocking call).
    pollfd p{sock(), POLLIN | POLLOUT | POLLRDHUP | POLLPRI, 0};
    uint32_t kb = 0;
    if (syscall(SYS_poll, &p, 1, 0) == 1) kb = static_cast<uint16_t>(p.revents);
    if (!rx) out |= kb & (EPOLLIN | EPOLLRDNORM | EPOLLRDBAND | EPOLLPRI | EPOLLRDHUP);
    if (!tx) out |= kb & (EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND);
    out |= kb & (EPOLLHUP | EPOLLERR);
  } else {
    // Both directions on RDMA: only a kernel hang-up (the peer's process
    // died) still matters, as the engine saw it.
    out |= ready.tcp_bits.load(std::memory_order_acquire) & (EPOLLHUP | EPOLLERR | EPOLLPRI);
  }
  const uint32_t sb = ready.stream_bits.load(std::memory_order_acquire);
  if (rx) {
    if (sb & (kIn | kFin | kReset)) out |= EPOLLIN | EPOLLRDNORM;
    if (sb & (kFin | kReset)) out |= EPOLLRDHUP;
  }
  if (tx && (sb & (kOut | kReset | kWriteShut))) out |= EPOLLOUT | EPOLLWRNORM;
  // (A direction still on TCP has its FIN record too, docs/protocol.md §3:
  // there the kernel's own hang-up above is the one that counts.)
  if (rx && (sb & kFin) && (sb & kWriteShut)) out |= EPOLLHUP;
  if ((sb & kReset) || dead.load(std::memory_order_acquire)) {
    // As the kernel after a reset: readable (the error, then end of
    // stream), writable (EPIPE), hung up; POLLERR until the error was
    // reported once.
    out |= EPOLLIN | EPOLLRDNORM | EPOLLOUT | EPOLLWRNORM | EPOLLRDHUP | EPOLLHUP;
    if (err_pending.load(std::memory_order_acquire)) out |= EPOLLERR;
  }
  return out;
}

} // namespace xp::stream
