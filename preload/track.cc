#include "preload/track.h"

#include <cstring>
#include <netinet/in.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/config.h"
#include "preload/lifecycle.h"
#include "preload/log.h"
#include "stream/upgrade_policy.h"

namespace xp::track {
namespace {

void recycle(SocketRecord* r) {
  stats::release_slot(r->slot);
  r->slot = nullptr;
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

// A connection is established (either role): decide its mode, count it and
// give it a live statistics row.
void establish(SocketRecord& r, Role role, const sockaddr* rule_addr, socklen_t rule_len) {
  const Config& cfg = config();
  stream::UpgradeInputs in{cfg.enabled, false};
  if (cfg.enabled) in.rule_allows = rules_allow(cfg.rules, role, rule_addr, rule_len);
  Reason why;
  {
    InternalCall guard; // device enumeration reads sysfs through libc
    why = stream::upgrade_decision(in);
  }
  r.role = role;
  r.mode = why == Reason::none ? Mode::rdma : Mode::tcp;
  r.reason = why;
  Counters& c = stats::c();
  c.connections[static_cast<int>(r.mode)].fetch_add(1, std::memory_order_relaxed);
  if (why != Reason::none)
    c.fallbacks[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
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
    s->mode = static_cast<uint8_t>(r.mode);
    s->reason = static_cast<uint8_t>(r.reason);
    s->role = static_cast<uint8_t>(role);
  }
  r.slot = s;
  XP_LOG(debug, "fd %d %s: %s%s%s", r.fd, role == Role::client ? "connected" : "accepted",
         mode_name(r.mode),
         why == Reason::none ? "" : " reason=", why == Reason::none ? "" : reason_name(why));
}

SocketPool g_pool(recycle);

} // namespace

// Constant-initialised: no guard on the hot path, usable before any
// constructor ran.
constinit FdTable g_table(&g_pool);

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
}

void on_connect(int fd, const sockaddr* addr, socklen_t len) {
  SocketRef r = lookup(fd);
  if (!r || r->counted || in_vfork_child() || in_internal_call()) return;
  establish(*r, Role::client, addr, len);
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
  establish(*r, Role::server, have ? reinterpret_cast<sockaddr*>(&ss) : nullptr, have ? len : 0);
}

void on_close(int fd) {
  if (in_vfork_child()) return;
  FdTable& t = table();
  if (!t.empty()) t.remove(fd);
}

void on_close_range(unsigned first, unsigned last) {
  if (in_vfork_child()) return;
  FdTable& t = table();
  if (t.empty()) return;
  int hi = last > 0x7fffffffu ? 0x7fffffff : static_cast<int>(last);
  if (first > 0x7fffffffu) return;
  t.for_each_in(static_cast<int>(first), hi, [&](int fd) { t.remove(fd); });
}

void on_dup(int oldfd, int newfd) {
  if (in_vfork_child() || oldfd == newfd) return;
  SocketRef r = lookup(oldfd);
  if (!r) {
    forget(newfd);
    return;
  }
  r->refs.fetch_add(1, std::memory_order_relaxed); // the new table entry's reference
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
