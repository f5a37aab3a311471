// Plain blocking POSIX socket helpers.
//
// Only calls that every transport under test intercepts are used (socket, connect, accept,
// read, write, writev, poll, shutdown, close, setsockopt TCP_NODELAY/SO_REUSEADDR,
// getsockname): rsocket's preload wraps no epoll, accept4 or MSG_* flags, and iperf3-style
// TCP_INFO queries break it, so none of those appear here.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace xb {

uint64_t now_ns(); // CLOCK_MONOTONIC

enum class Io { kOk, kEof, kError, kTimeout };
// Describes the last result on this thread ("connection closed by peer", strerror, ...).
std::string io_text(Io r);

// Hot-path transfers: block until all n bytes moved.  The process-wide watchdog bounds them.
Io read_full(int fd, void* buf, size_t n, size_t* got = nullptr);
Io write_full(int fd, const void* buf, size_t n);
Io writev_full(int fd, iovec* iov, int count);
// Control-path transfers: poll before each call so a silent peer cannot stall the run.
Io read_until(int fd, void* buf, size_t n, uint64_t deadline_ns);
Io write_until(int fd, const void* buf, size_t n, uint64_t deadline_ns);

struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text; // "host:port" for messages
};
// Resolves once (connect storms must not pay for getaddrinfo); prefers IPv4.
bool resolve(const std::string& host, uint16_t port, Endpoint* ep, std::string* err);
// Blocking connect with TCP_NODELAY; -1 and *err on failure.
int connect_to(const Endpoint& ep, std::string* err);
// Listening socket; *bound receives the actual port (for --port 0).
int listen_on(const std::string& bind, uint16_t port, uint16_t* bound, std::string* err);
void set_nodelay(int fd);

} // namespace xb
