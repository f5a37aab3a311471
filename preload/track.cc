#include "preload/track.h"

#include <cstring>
#include <netinet/in.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/logsink.h"
#include "preload/config.h"
#include "preload/kernel_features.h"
#include "preload/lifecycle.h"
#include "preload/log.h"
#include "preload/real.h"
#include "preload/stats.h"
#include "preload/test_user_mode.h"
#include "stream/conn.h"
#include "stream/engine.h"
#include "stream/fork_bytes.h"
#include "stream/pin.h"
#include "stream/ready_source.h"
#include "stream/reattach.h"
#include "stream/upgrade_policy.h"

namespace xp::track {
namespace {

void recycle(SocketRecord* r) {
  stats::release_slot(r->slot);
  r->slot = nullptr;
  r->ready.store(nullptr, std::memory_order_relaxed);
  if (stream::Conn* c = r->conn.exchange(nullptr)) c->unref();
  r->deferred.store(false, std::memory_order_relaxed);
  r->outcome_pending = false;
  r->names.store(1, std::memory_order_relaxed);
  r->share = nullptr;
}

bool is_inet(int domain) {
  return domain == AF_INET || domain == AF_INET6;
}

// getsockname/getpeername without going through our wrappers.
bool raw_name(int fd, bool peer, sockaddr_storage* ss, socklen_t* len) {
  *len = sizeof *ss;
  long r = ::syscall(peer ? SYS_getpeername : SYS_getsockname, fd, ss, len);
  return r == 0;
}

void fill_endpoint(const sockaddr_storage& ss, uint8_t* addr, uint16_t* port, uint8_t* family) {
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    memcpy(addr, &in->sin_addr, 4);
    *port = ntohs(in->sin_port);
    *family = 4;
  } else if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    memcpy(addr, &in6->sin6_addr, 16);
    *port = ntohs(in6->sin6_port);
    *family = 6;
  }
}

// Count a connection under its (final) mode and reason.
void count_outcome(SocketRecord& r, Mode m, Reason why) {
  r.mode = m;
  r.reason = why;
  Counters& c = stats::c();
  c.connections[static_cast<int>(m)].fetch_add(1, std::memory_order_relaxed);
  if (why != Reason::none)
    c.fallbacks[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
  if (ConnSlot* s = r.slot) {
    s->mode = static_cast<uint8_t>(m);
    s->reason = static_cast<uint8_t>(why);
  }
  r.outcome_pending = false;
  XP_LOG(debug, "fd %d: %s%s%s", r.fd, mode_name(m),
         why == Reason::none ? "" : " reason=", why == Reason::none ? "" : reason_name(why));
}

// The engine decided (engine thread or a data call): rdma, or tcp and why.
void on_outcome(int fd, Mode m, Reason why) {
  SocketRef r = lookup(fd);
  if (!r || !r->outcome_pending) return;
  count_outcome(*r, m, why);
}

// A direction switched to RDMA at byte `at`: the row counts its first `at`
// bytes as carried on TCP before the switch.
void on_switch(int fd, bool tx, uint64_t at) {
  SocketRef r = lookup(fd);
  if (!r || r->slot == nullptr) return;
  (tx ? r->slot->tx_switch_at : r->slot->rx_switch_at).store(at, std::memory_order_relaxed);
}

// Readiness moves between the kernel and the connection (stream/ready_source.h).
XP_STARTUP_DATA void (*g_readiness_hook)(int fd, stream::ReadySource* now) = nullptr;
void on_mode(int fd, stream::ReadySource* now) {
  SocketRef r = lookup(fd);
  if (!r) return;
  r->ready.store(now, std::memory_order_release);
  if (g_readiness_hook) g_readiness_hook(fd, now);
}

// A stream resumed on TCP after its channel failed (or could not).
void on_resume(const stream::ResumeEvent& e) {
  static_assert(kResumeCauses == static_cast<int>(stream::ResumeCause::count));
  Counters& c = stats::c();
  if (e.ok)
    c.resumed[static_cast<int>(e.cause)].fetch_add(1, std::memory_order_relaxed);
  else
    c.resume_failed.fetch_add(1, std::memory_order_relaxed);
  c.resent_bytes.fetch_add(e.resent_bytes, std::memory_order_relaxed);
  c.recover_us.fetch_add(e.recover_us, std::memory_order_relaxed);
  uint64_t m = c.recover_us_max.load(std::memory_order_relaxed);
  while (e.recover_us > m && !c.recover_us_max.compare_exchange_weak(m, e.recover_us)) {
  }
}

// Back to RDMA after a resume (stream/reattach.h).
void on_reattach(const stream::reattach::Event& e) {
  Counters& c = stats::c();
  switch (e.kind) {
  case stream::reattach::Event::attempt:
    c.reup_attempts.fetch_add(1, std::memory_order_relaxed);
    break;
  case stream::reattach::Event::failed:
    c.reup_failed.fetch_add(1, std::memory_order_relaxed);
    break;
  case stream::reattach::Event::returned:
    c.reup_returned.fetch_add(1, std::memory_order_relaxed);
    c.reup_tcp_us.fetch_add(e.tcp_us, std::memory_order_relaxed);
    break;
  }
}

void stream_log(int level, const char* fmt, va_list ap) {
  log::vwrite(static_cast<LogLevel>(level), fmt, ap);
}

void engine_config_once() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  logsink::install(stream_log, static_cast<int>(config().log_level));
  stream::engine::configure(config().engine);
  stream::engine::set_outcome_hook(on_outcome);
  stream::engine::set_switch_hook(on_switch);
  stream::engine::set_tick_hook(stats::on_tick);
  stream::set_resume_hook(on_resume);
  stream::reattach::set_hook(on_reattach);
  stream::set_mode_hook(on_mode);
}

// Hand a connected socket to the engine; true when the upgrade started.
bool start_upgrade(SocketRecord& r, Role role, Reason* why) {
  sockaddr_storage me, peer;
  socklen_t ml, pl;
  if (!raw_name(r.fd, false, &me, &ml) || !raw_name(r.fd, true, &peer, &pl)) {
    *why = Reason::handshake_failed;
    return false;
  }
  engine_config_once();
  *why = stream::engine::unavailable();
  if (*why != Reason::none) return false;
  {
    InternalCall guard; // the checks open files and a netlink socket
    *why = kfeat::before_upgrade(me, peer);
  }
  if (*why != Reason::none) return false;
  stream::Conn* c;
  {
    InternalCall guard; // rdma-core opens files and sockets of its own
    if (role == Role::client)
      c = stream::engine::on_connect(r.fd, reinterpret_cast<sockaddr*>(&me),
                                     reinterpret_cast<sockaddr*>(&peer), why);
    else
      c = stream::engine::on_accept(r.fd, r.share, reinterpret_cast<sockaddr*>(&me),
                                    reinterpret_cast<sockaddr*>(&peer), why);
  }
  if (c == nullptr) return false;
  r.outcome_pending = true;
  r.conn.store(c, std::memory_order_release);
  on_mode(r.fd, c); // from now on xpress answers readiness
  return true;
}

// A connection is established (either role): decide whether it tries the
// upgrade, count it when that is already decided, give it a live row.
void establish(SocketRecord& r, Role role, const sockaddr* rule_addr, socklen_t rule_len,
               bool connected, SocketRecord* listener) {
  const Config& cfg = config();
  stream::UpgradeInputs in{cfg.enabled, false};
  if (cfg.enabled) in.rule_allows = rules_allow(cfg.rules, role, rule_addr, rule_len);
  Reason why;
  {
    InternalCall guard; // device enumeration reads sysfs through libc
    why = stream::upgrade_decision(in);
  }
  r.role = role;
  test_user_mode::on_established(r);
  r.counted = true;
  stats::publish_live();
  ConnSlot* s = stats::claim_slot(r.fd);
  if (s) {
    sockaddr_storage ss;
    socklen_t len;
    if (raw_name(r.fd, false, &ss, &len)) fill_endpoint(ss, s->local, &s->local_port, &s->family);
    if (raw_name(r.fd, true, &ss, &len))
      fill_endpoint(ss, s->peer, &s->peer_port, &s->family);
    else if (rule_addr && role == Role::client && rule_len <= sizeof ss) {
      memcpy(&ss, rule_addr, rule_len); // non-blocking connect still in progress
      fill_endpoint(ss, s->peer, &s->peer_port, &s->family);
    }
    s->mode = static_cast<uint8_t>(Mode::tcp);
    s->reason = static_cast<uint8_t>(Reason::none);
    s->role = static_cast<uint8_t>(role);
  }
  r.slot = s;
  // A kernel feature turned on before the connection existed (or on the
  // listener, whose accepted sockets inherit it) keeps it on TCP.
  if (why == Reason::none) why = r.pinned.load();
  if (why == Reason::none && listener) why = listener->pinned.load();
  if (why != Reason::none) r.pinned.store(why);
  if (why == Reason::none && role == Role::server) {
    if (listener && listener->share) {
      r.share = listener->share;
      if (start_upgrade(r, role, &why)) return;
    } else {
      why = Reason::handshake_failed; // the listener has no rendezvous state
    }
  } else if (why == Reason::none && role == Role::client) {
    if (!connected) {
      r.outcome_pending = true;
      r.deferred.store(true, std::memory_order_release);
      return;
    }
    if (start_upgrade(r, role, &why)) return;
  }
  count_outcome(r, Mode::tcp, why);
  test_user_mode::on_established(r); // XPRESS_TEST_USER_MODE=1 only
}

} // namespace

// The first data call on a socket whose non-blocking connect was pending.
void start_deferred(SocketRecord& r) {
  if (!r.deferred.exchange(false)) return;
  Reason why;
  if (start_upgrade(r, Role::client, &why)) return;
  count_outcome(r, Mode::tcp, why);
}

void set_readiness_hook(void (*h)(int fd, stream::ReadySource* now)) {
  g_readiness_hook = h;
}

namespace {

// Neither initialiser names a function or object (the recycle hook, the
// pool): that would be a load-time relocation writing a page of these
// large tables in every preloaded process.  attach_pool() links them at
// the first inet socket, before any record exists.
constinit SocketPool g_pool;

} // namespace

// Constant-initialised: no guard on the hot path, usable before any
// constructor ran.
constinit FdTable g_table;

namespace {
// The program's byte counts on fd, for the stream layer's after-fork check
// (stream/fork_bytes.h): its statistics row counts every call's result.
// `done` before `begun`, both before the bytes (fork_bytes::sample()).
bool fork_counts(int fd, stream::fork_bytes::Ours* out) {
  SocketRef r = lookup(fd);
  if (!r || r->slot == nullptr) return false;
  out->done = r->slot->calls_done.load(std::memory_order_seq_cst);
  out->begun = r->slot->calls_begun.load(std::memory_order_seq_cst);
  out->tx = r->slot->bytes_tx.load(std::memory_order_seq_cst);
  out->rx = r->slot->bytes_rx.load(std::memory_order_seq_cst);
  return true;
}

void attach_pool() {
  static const bool attached = [] {
    g_pool.on_recycle = recycle;
    g_table.set_pool(&g_pool);
    stream::fork_bytes::set_app_counts(fork_counts);
    return true;
  }();
  (void)attached;
}
} // namespace

// Sockets that rdma-core or libc open internally (while an InternalCall
// guard is held) are not the application's connections: they are not
// tracked, but any stale record for their number still goes.
void on_socket(int fd, int domain, int type) {
  if (in_vfork_child() || !is_inet(domain)) return;
  if (in_internal_call()) {
    forget(fd);
    return;
  }
  ensure_init();
  real::resolve_all(); // the first inet socket: every real function, now (real.h)
  attach_pool();
  int base_type = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  Counters& c = stats::c();
  if (base_type != SOCK_STREAM) {
    c.fallbacks[static_cast<int>(Reason::not_stream_socket)].fetch_add(1,
                                                                       std::memory_order_relaxed);
    forget(fd);
    return;
  }
  SocketRecord* r = table().pool()->alloc();
  if (r == nullptr) {
    forget(fd);
    return;
  }
  r->fd = fd;
  r->domain = domain;
  r->type = base_type;
  c.sockets_tracked.fetch_add(1, std::memory_order_relaxed);
  table().install(fd, r);
}

void on_listen(int fd) {
  SocketRef r = lookup(fd);
  if (!r || r->listener || in_vfork_child() || in_internal_call()) return;
  r->listener = true;
  stats::c().listeners.fetch_add(1, std::memory_order_relaxed);
  // Rendezvous state for the connections this socket will accept, created
  // here so that fork children inheriting the socket share it.  No RDMA
  // resource is touched: a master that only listens never opens a device.
  const Config& cfg = config();
  if (cfg.enabled && (r->domain == AF_INET || r->domain == AF_INET6)) {
    bool dev;
    {
      InternalCall guard;
      dev = stream::engine::unavailable() == Reason::none;
    }
    if (dev) r->share = stream::engine::on_listen(fd);
  }
}

void on_connect(int fd, const sockaddr* addr, socklen_t len) {
  SocketRef r = lookup(fd);
  if (!r || r->counted || in_vfork_child() || in_internal_call()) return;
  sockaddr_storage peer;
  socklen_t pl;
  establish(*r, Role::client, addr, len, raw_name(fd, true, &peer, &pl), nullptr);
}

void on_accept(int listen_fd, int fd) {
  if (in_vfork_child()) return;
  if (in_internal_call()) {
    forget(fd);
    return;
  }
  SocketRef l = lookup(listen_fd);
  if (!l) {
    forget(fd);
    return;
  }
  on_socket(fd, l->domain, l->type);
  SocketRef r = lookup(fd);
  if (!r) return;
  // A server rule looks at the local address: where this server listens.
  sockaddr_storage ss;
  socklen_t len;
  bool have = raw_name(fd, false, &ss, &len);
  establish(*r, Role::server, have ? reinterpret_cast<sockaddr*>(&ss) : nullptr, have ? len : 0,
            true, l.get());
}

// The last fd naming a connection goes: the stream closes (FIN after every
// byte written), and an undecided upgrade is counted as such.
void closing(SocketRecord& r, int fd) {
  if (r.names.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    // Another number (a dup) keeps the socket: the connection now goes by it.
    stream::Conn* c = r.conn.load(std::memory_order_acquire);
    if (c && c->sock() == fd) {
      FdTable& t = table();
      int other = -1;
      t.for_each_in(0, 0x7fffffff, [&](int n) {
        if (other < 0 && n != fd && t.peek(n) == &r) other = n;
      });
      if (other >= 0) stream::engine::renumber(c, other);
    }
    return;
  }
  if (stream::Conn* c = r.conn.load(std::memory_order_acquire)) {
    // A server that never heard from the client's xpress: a plain client.
    // Our direction stays on TCP from the outcome counted here on.
    const bool short_of_bytes = stream::engine::stop_switching(c);
    // Bound, but too few bytes crossed to prove it holds the connection.
    Reason why = c->role == recover::Role::server && !c->rv.heard_from_peer.load()
                     ? Reason::peer_not_accelerated
                 : short_of_bytes ? Reason::too_few_bytes
                                  : Reason::closed_during_upgrade;
    if (r.outcome_pending) count_outcome(r, Mode::tcp, why);
    stream::engine::on_close(c);
  } else if (r.outcome_pending) {
    count_outcome(r, Mode::tcp, Reason::closed_during_upgrade);
  }
}

bool on_kernel_feature(int fd, Reason why, bool rx) {
  if (in_vfork_child() || in_internal_call()) return true;
  SocketRef r = lookup(fd);
  if (!r || !r->counted) return true; // not connected: after_kernel_feature
  Reason none = Reason::none;
  const bool first = r->pinned.compare_exchange_strong(none, why);
  if (r->deferred.exchange(false)) { // a non-blocking connect: never starts the upgrade
    count_outcome(*r, Mode::tcp, why);
    return true;
  }
  bool ok = true;
  if (stream::Conn* c = r->conn.load(std::memory_order_acquire)) {
    c->ref();
    ok = stream::pin::to_tcp(c, why, rx);
    c->unref();
  }
  // An upgrade that ended here was counted under `why` (the engine's
  // outcome); a connection that had been on RDMA counts under rdma and
  // under `why`, its bytes so far under rdma, later ones under tcp.
  if (first && !r->outcome_pending && r->mode == Mode::rdma) {
    stats::c().fallbacks[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
    r->mode = Mode::tcp;
    r->reason = why;
    if (ConnSlot* s = r->slot) {
      s->reason = static_cast<uint8_t>(why);
      stats::rebase_slot(s, Mode::tcp);
    }
  }
  return ok;
}

void after_kernel_feature(int fd, Reason why) {
  if (in_vfork_child() || in_internal_call()) return;
  SocketRef r = lookup(fd);
  if (!r || r->counted) return;
  Reason none = Reason::none;
  r->pinned.compare_exchange_strong(none, why); // establish() keeps it on TCP
}

void on_close(int fd) {
  if (in_vfork_child()) return;
  FdTable& t = table();
  if (t.empty()) return;
  if (SocketRef r = t.get(fd)) closing(*r, fd);
  t.remove(fd);
}

void on_close_range(unsigned first, unsigned last) {
  if (in_vfork_child()) return;
  FdTable& t = table();
  if (t.empty()) return;
  int hi = last > 0x7fffffffu ? 0x7fffffff : static_cast<int>(last);
  if (first > 0x7fffffffu) return;
  t.for_each_in(static_cast<int>(first), hi, [&](int fd) {
    if (SocketRef r = t.get(fd)) closing(*r, fd);
    t.remove(fd);
  });
}

void on_dup(int oldfd, int newfd) {
  if (in_vfork_child() || oldfd == newfd) return;
  SocketRef r = lookup(oldfd);
  if (!r) {
    forget(newfd);
    return;
  }
  if (SocketRef old = lookup(newfd)) closing(*old, newfd); // dup2 over a tracked socket closes it
  r->refs.fetch_add(1, std::memory_order_relaxed);         // the new table entry's reference
  r->names.fetch_add(1, std::memory_order_relaxed);
  table().install(newfd, r.get());
}

void forget(int fd) {
  if (fd < 0 || in_vfork_child()) return;
  FdTable& t = table();
  if (!t.empty()) t.remove(fd);
}

void forget_passed_fds(const msghdr* msg) {
  if (msg == nullptr || msg->msg_controllen == 0 || table().empty()) return;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int* fds = reinterpret_cast<const int*>(CMSG_DATA(c));
    for (size_t i = 0; i < n; ++i) {
      int fd;
      memcpy(&fd, fds + i, sizeof fd);
      forget(fd);
    }
  }
}

} // namespace xp::track
