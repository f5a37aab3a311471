// Kernel features that keep a connection on TCP: detection (see
// kernel_features.h).  Cold path: a setsockopt of one of these options,
// a connection about to upgrade.
#include "preload/kernel_features.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/xfrm.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/log.h"
#include "stream/pin.h"

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TLS_TX
#define TLS_TX 1
#define TLS_RX 2
#endif

namespace xp::kfeat {
namespace {

bool nonzero_int(const void* val, socklen_t len) {
  int v = 0;
  if (val == nullptr || len < static_cast<socklen_t>(sizeof v)) return false;
  memcpy(&v, val, sizeof v);
  return v != 0;
}

// ---- io_uring: its fds read "anon_inode:[io_uring]" in /proc/self/fd.
bool io_uring_fd_present() {
  long d = syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return false;
  const int dir = static_cast<int>(d);
  alignas(8) char buf[4096];
  bool found = false;
  while (!found) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n && !found;) {
      struct Dirent {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      auto* e = reinterpret_cast<const Dirent*>(buf + off);
      off += e->reclen;
      if (e->type != DT_LNK) continue;
      char link[32];
      long l = syscall(SYS_readlinkat, dir, e->name, link, sizeof link);
      static const char kRing[] = "anon_inode:[io_uring]";
      found = l == static_cast<long>(sizeof kRing - 1) && memcmp(link, kRing, l) == 0;
    }
  }
  syscall(SYS_close, dir);
  return found;
}

// ---- IPsec: the kernel's xfrm policies (needs CAP_NET_ADMIN).

// One end of the connection as its packets carry it: IPv4-mapped IPv6
// addresses are IPv4 packets (and IPv4 policies); port in network order.
struct End {
  int family = 0; // AF_INET or AF_INET6; 0: neither
  uint8_t a[16] = {};
  uint16_t port = 0;
};

End end_of(const sockaddr_storage& ss) {
  End e;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    e.family = AF_INET;
    memcpy(e.a, &in->sin_addr, 4);
    e.port = in->sin_port;
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    e.port = in6->sin6_port;
    uint8_t a[16];
    memcpy(a, &in6->sin6_addr, 16);
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(a, kMapped, sizeof kMapped) == 0) {
      e.family = AF_INET;
      memcpy(e.a, a + 12, 4);
    } else {
      e.family = AF_INET6;
      memcpy(e.a, a, 16);
    }
  }
  return e;
}

bool addr_in(const End& e, const xfrm_address_t& net, uint8_t plen) {
  const unsigned bits = e.family == AF_INET ? 32 : 128;
  if (plen > bits) plen = static_cast<uint8_t>(bits);
  uint8_t n[16];
  memcpy(n, &net, e.family == AF_INET ? 4 : 16); // a4, or a6 (network order)
  const unsigned whole = plen / 8, rest = plen % 8;
  if (memcmp(e.a, n, whole) != 0) return false;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (e.a[whole] & mask) == (n[whole] & mask);
}

bool port_in(uint16_t p, uint16_t sel, uint16_t mask) {
  return ((p ^ sel) & mask) == 0;
}

// Does the policy's selector take this packet (src -> dst)?
bool selects(const xfrm_selector& s, const End& src, const End& dst) {
  if (s.family != src.family && s.family != AF_UNSPEC) return false;
  if (s.proto != 0 && s.proto != IPPROTO_TCP) return false;
  return addr_in(src, s.saddr, s.prefixlen_s) && addr_in(dst, s.daddr, s.prefixlen_d) &&
         port_in(src.port, s.sport, s.sport_mask) && port_in(dst.port, s.dport, s.dport_mask);
}

// The dump's messages: 1 a policy with a template (IPsec) covers the
// connection in either direction, 0 none, -1 error, 2 more to read.
int scan(const uint8_t* p, size_t len, const End& local, const End& peer, int* err) {
  while (len >= sizeof(nlmsghdr)) {
    nlmsghdr h;
    memcpy(&h, p, sizeof h);
    if (h.nlmsg_len < sizeof h || h.nlmsg_len > len) return -1;
    if (h.nlmsg_type == NLMSG_DONE) return 0;
    if (h.nlmsg_type == NLMSG_ERROR) {
      nlmsgerr e;
      if (h.nlmsg_len < NLMSG_LENGTH(sizeof e)) return -1;
      memcpy(&e, p + NLMSG_HDRLEN, sizeof e);
      *err = -e.error;
      return -1;
    }
    if (h.nlmsg_type == XFRM_MSG_NEWPOLICY &&
        h.nlmsg_len >= NLMSG_LENGTH(sizeof(xfrm_userpolicy_info))) {
      xfrm_userpolicy_info pi;
      memcpy(&pi, p + NLMSG_HDRLEN, sizeof pi);
      bool tmpl = false;
      // Attributes follow the fixed part: XFRMA_TMPL says "transform this".
      size_t a = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof pi);
      while (a + sizeof(nlattr) <= h.nlmsg_len) {
        nlattr at;
        memcpy(&at, p + a, sizeof at);
        if (at.nla_len < sizeof at) break;
        if ((at.nla_type & NLA_TYPE_MASK) == XFRMA_TMPL && at.nla_len > sizeof at) tmpl = true;
        a += NLA_ALIGN(at.nla_len);
      }
      const bool covers = (pi.dir == XFRM_POLICY_OUT && selects(pi.sel, local, peer)) ||
                          (pi.dir == XFRM_POLICY_IN && selects(pi.sel, peer, local));
      if (covers && (tmpl || pi.action == XFRM_POLICY_BLOCK)) return 1;
    }
    size_t step = NLMSG_ALIGN(h.nlmsg_len);
    if (step >= len) break;
    p += step;
    len -= step;
  }
  return 2;
}

// 1 covered, 0 not, -1 unknown (*err: why).
int ipsec_covers(const End& local, const End& peer, int* err) {
  long s = syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_XFRM);
  if (s < 0) {
    *err = errno;
    return errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT ? 0 : -1; // no xfrm in the kernel
  }
  const int fd = static_cast<int>(s);
  struct {
    nlmsghdr h;
    xfrm_userpolicy_info pi;
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof req.pi);
  req.h.nlmsg_type = XFRM_MSG_GETPOLICY;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  int res = -1;
  *err = EIO;
  if (syscall(SYS_sendto, fd, &req, req.h.nlmsg_len, 0, nullptr, 0) ==
      static_cast<long>(req.h.nlmsg_len)) {
    // Mapped per dump (once per upgrade): not a thread-local (the static
    // TLS block every thread carries stays small) and not the stack
    // (threads with small stacks call connect).
    constexpr size_t kBuf = 32768;
    void* m = mmap(nullptr, kBuf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    auto* buf = m == MAP_FAILED ? nullptr : static_cast<uint8_t*>(m);
    while (buf != nullptr) {
      long n = syscall(SYS_recvfrom, fd, buf, kBuf, 0, nullptr, nullptr);
      if (n <= 0) {
        *err = n < 0 ? errno : EIO;
        break;
      }
      res = scan(buf, static_cast<size_t>(n), local, peer, err);
      if (res != 2) break;
      res = -1;
    }
    if (buf != nullptr) munmap(buf, kBuf);
  }
  syscall(SYS_close, fd);
  return res;
}

// Without the right to list policies: IPsec in use on this host shows in
// its transforms' kernel modules.  Any of them loaded: assume it covers us.
bool ipsec_modules_loaded() {
  static const char* const kMods[] = {"/sys/module/esp4", "/sys/module/esp6", "/sys/module/ah4",
                                      "/sys/module/ah6"};
  for (const char* m : kMods)
    if (syscall(SYS_faccessat, AT_FDCWD, m, F_OK, 0) == 0) return true;
  return false;
}

} // namespace

Reason of_setsockopt(int level, int name, const void* val, socklen_t len, bool* rx) {
  *rx = false;
  if (level == IPPROTO_TCP && name == TCP_ULP) {
    // Every upper-layer protocol takes the kernel's byte stream over.
    const bool tls = val != nullptr && len >= 3 && memcmp(val, "tls", 3) == 0;
    *rx = true;
    return tls ? Reason::kernel_tls : Reason::kernel_feature;
  }
  if (level == SOL_TLS && (name == TLS_TX || name == TLS_RX)) {
    *rx = name == TLS_RX;
    return Reason::kernel_tls;
  }
  if (level == IPPROTO_TCP && name == TCP_REPAIR && nonzero_int(val, len)) {
    *rx = true; // the repair queues must hold every byte
    return Reason::kernel_feature;
  }
  // SO_ZEROCOPY alone sends nothing zero-copy (gRPC sets it on every
  // listener to learn whether the kernel can): MSG_ZEROCOPY sends are the
  // feature (zerocopy_send).
  if (level == SOL_SOCKET && (name == SO_ATTACH_FILTER || name == SO_ATTACH_BPF))
    return Reason::kernel_feature;
  if (level == IPPROTO_IP && (name == IP_XFRM_POLICY || name == IP_IPSEC_POLICY))
    return Reason::ipsec; // a per-socket IPsec policy
  if (level == IPPROTO_IPV6 && (name == IPV6_XFRM_POLICY || name == IPV6_IPSEC_POLICY))
    return Reason::ipsec;
  return Reason::none;
}

int refusal_errno(Reason why) {
  return why == Reason::kernel_tls ? ENOENT : EPERM;
}

namespace {

// The scan reads one link per open fd: with many fds it is spaced out so
// that it costs at most about 1% of the time (a ring made within that
// interval before an upgrade is seen at the next scan, as one made after).
bool io_uring_seen() {
  static std::atomic<uint64_t> next_ns{0};
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
  if (now < next_ns.load(std::memory_order_relaxed)) return false;
  const bool found = io_uring_fd_present();
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t end = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
  next_ns.store(end + 100 * (end - now), std::memory_order_relaxed);
  return found;
}

} // namespace

Reason before_upgrade(const sockaddr_storage& local, const sockaddr_storage& peer) {
  if (io_uring_seen()) {
    on_io_uring();
    return Reason::io_uring;
  }
  const End l = end_of(local), p = end_of(peer);
  if (l.family == 0 || l.family != p.family) return Reason::none;
  int err = 0;
  int c = ipsec_covers(l, p, &err);
  if (c == 1) return Reason::ipsec;
  if (c == 0) return Reason::none;
  // Unknown (no CAP_NET_ADMIN: EPERM): what the administrator requires
  // encrypted must never cross in the clear, so any sign of IPsec on the
  // host keeps the connection on TCP.
  const bool loaded = ipsec_modules_loaded();
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    XP_LOG(info, "IPsec policies cannot be listed (%s): %s", strerror(err),
           loaded ? "IPsec modules are loaded, connections stay on TCP"
                  : "no IPsec module loaded, connections may upgrade");
  }
  return loaded ? Reason::ipsec : Reason::none;
}

void on_io_uring() {
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return;
  XP_LOG(info, "the process has an io_uring: its connections stay on TCP");
  stream::pin::all_to_tcp(Reason::io_uring);
}

int xfrm_covers(const void* dump, size_t len, const sockaddr_storage& local,
                const sockaddr_storage& peer, int* err) {
  int r = scan(static_cast<const uint8_t*>(dump), len, end_of(local), end_of(peer), err);
  return r == 2 ? 0 : r;
}

} // namespace xp::kfeat
