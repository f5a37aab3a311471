// Blocking socket helpers; see net.h for why the call set is kept this small.
#include "net.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace xb {

namespace {
thread_local int t_errno = 0;

Io fail(Io r) {
  t_errno = r == Io::kError ? errno : 0;
  return r;
}

// Waits until fd is ready for `events` or the deadline passes.
Io wait_ready(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    uint64_t now = now_ns();
    if (now >= deadline_ns) return fail(Io::kTimeout);
    int ms = static_cast<int>((deadline_ns - now + 999999) / 1000000);
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, ms);
    if (r > 0) return Io::kOk; // also for POLLERR/POLLHUP: the transfer call reports it
    if (r < 0 && errno != EINTR) return fail(Io::kError);
  }
}
} // namespace

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string io_text(Io r) {
  switch (r) {
  case Io::kOk:
    return "ok";
  case Io::kEof:
    return "connection closed by peer";
  case Io::kTimeout:
    return "timed out";
  case Io::kError:
    return std::strerror(t_errno);
  }
  return "?";
}

static Io read_some(int fd, uint8_t* p, size_t n, size_t* done, bool poll_first,
                    uint64_t deadline_ns) {
  while (*done < n) {
    if (poll_first) {
      Io w = wait_ready(fd, POLLIN, deadline_ns);
      if (w != Io::kOk) return w;
    }
    ssize_t r = read(fd, p + *done, n - *done);
    if (r > 0) {
      *done += static_cast<size_t>(r);
    } else if (r == 0) {
      return fail(Io::kEof);
    } else if (errno != EINTR && !(poll_first && errno == EAGAIN)) {
      return fail(Io::kError);
    }
  }
  return Io::kOk;
}

static Io write_some(int fd, const uint8_t* p, size_t n, bool poll_first, uint64_t deadline_ns) {
  size_t done = 0;
  while (done < n) {
    if (poll_first) {
      Io w = wait_ready(fd, POLLOUT, deadline_ns);
      if (w != Io::kOk) return w;
    }
    ssize_t r = write(fd, p + done, n - done);
    if (r > 0) {
      done += static_cast<size_t>(r);
    } else if (r == 0) {
      errno = EIO; // no progress on a stream socket: never loop on it
      return fail(Io::kError);
    } else if (errno != EINTR && !(poll_first && errno == EAGAIN)) {
      return fail(Io::kError);
    }
  }
  return Io::kOk;
}

Io read_full(int fd, void* buf, size_t n, size_t* got) {
  size_t done = 0;
  Io r = read_some(fd, static_cast<uint8_t*>(buf), n, &done, false, 0);
  if (got) *got = done;
  return r;
}

Io write_full(int fd, const void* buf, size_t n) {
  return write_some(fd, static_cast<const uint8_t*>(buf), n, false, 0);
}

Io read_until(int fd, void* buf, size_t n, uint64_t deadline_ns) {
  size_t done = 0;
  return read_some(fd, static_cast<uint8_t*>(buf), n, &done, true, deadline_ns);
}

Io write_until(int fd, const void* buf, size_t n, uint64_t deadline_ns) {
  return write_some(fd, static_cast<const uint8_t*>(buf), n, true, deadline_ns);
}

Io writev_full(int fd, iovec* iov, int count) {
  while (count > 0) {
    ssize_t r = writev(fd, iov, count);
    if (r < 0) {
      if (errno == EINTR) continue;
      return fail(Io::kError);
    }
    // Skip what was written; a partial write leaves the rest of one iovec to send.
    size_t left = static_cast<size_t>(r);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Io::kOk;
}

void set_nodelay(int fd) {
  int one = 1;
  // Request/response latency would otherwise include Nagle's delay; failure is harmless.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool resolve(const std::string& host, uint16_t port, Endpoint* ep, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *err = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return false;
  }
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  std::memcpy(&ep->addr, pick->ai_addr, pick->ai_addrlen);
  ep->len = pick->ai_addrlen;
  ep->text = host + ":" + service;
  freeaddrinfo(res);
  return true;
}

int connect_to(const Endpoint& ep, std::string* err) {
  int fd = socket(ep.addr.ss_family, SOCK_STREAM, 0);
  if (fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  set_nodelay(fd);
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    *err = "cannot connect to " + ep.text + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

int listen_on(const std::string& bind_addr, uint16_t port, uint16_t* bound, std::string* err) {
  Endpoint ep;
  if (!resolve(bind_addr, port, &ep, err)) return -1;
  int fd = socket(ep.addr.ss_family, SOCK_STREAM, 0);
  if (fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len) < 0) {
    *err = "cannot bind " + ep.text + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  // A deep backlog: the connect scenario opens connections faster than threads start.
  if (listen(fd, 4096) < 0) {
    *err = std::string("listen: ") + std::strerror(errno);
    close(fd);
    return -1;
  }
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  *bound = port;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    if (sa.ss_family == AF_INET) *bound = ntohs(reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
    if (sa.ss_family == AF_INET6) *bound = ntohs(reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port);
  }
  return fd;
}

} // namespace xb
