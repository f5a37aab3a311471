// Connection set-up: non-blocking connect (EINPROGRESS, writability via poll and
// epoll, SO_ERROR), refused connections, operations on unconnected sockets.
#include "sem.h"

#include <stdlib.h>

#include <arpa/inet.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static int so_error(int fd) {
  int err = -1;
  socklen_t len = sizeof err;
  RC(0, getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len));
  return err;
}

static void connect_nonblock_poll(void) {
  struct sockaddr_in a;
  int l = tcp_listener(&a);
  int s = OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  ERR(EINPROGRESS, connect(s, (struct sockaddr*)&a, sizeof a));
  struct pollfd p = {.fd = s, .events = POLLOUT};
  RC(1, poll(&p, 1, 5000));
  MASK("poll revents", p.revents, POLLOUT);
  EQ("SO_ERROR", so_error(s), 0);
  // The first connect() after a non-blocking connect completed reports success.
  RC(0, connect(s, (struct sockaddr*)&a, sizeof a));
  ERR(EISCONN, connect(s, (struct sockaddr*)&a, sizeof a));
  int c = OK(accept(l, NULL, NULL));
  RC(3, send(s, "abc", 3, 0));
  wait_avail(c, 3);
  char buf[8];
  RC(3, recv(c, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "abc", 3) == 0);
  RC(2, send(c, "xy", 2, 0));
  wait_avail(s, 2);
  RC(2, recv(s, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "xy", 2) == 0);
  RC(0, close(s));
  RC(0, close(c));
  RC(0, close(l));
}

static void connect_nonblock_epoll(void) {
  struct sockaddr_in a;
  int l = tcp_listener(&a);
  int s = OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  int ep = OK(epoll_create1(EPOLL_CLOEXEC));
  ERR(EINPROGRESS, connect(s, (struct sockaddr*)&a, sizeof a));
  struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = 0x1234};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
  struct epoll_event out[4];
  memset(out, 0, sizeof out);
  RC(1, epoll_wait(ep, out, 4, 5000));
  MASK("epoll events", out[0].events, EPOLLOUT);
  EQ("epoll data", out[0].data.u64, 0x1234);
  EQ("SO_ERROR", so_error(s), 0);
  int c = OK(accept(l, NULL, NULL));
  RC(5, send(s, "hello", 5, 0));
  wait_avail(c, 5);
  char buf[8];
  RC(5, recv(c, buf, sizeof buf, 0));
  CHECK(memcmp(buf, "hello", 5) == 0);
  RC(0, close(ep));
  RC(0, close(s));
  RC(0, close(c));
  RC(0, close(l));
}

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = sem_addr();
  return a;
}

static void connect_refused_nonblock(void) {
  int holder;
  struct sockaddr_in a = loopback(closed_port(&holder));
  int s = OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  ERR(EINPROGRESS, connect(s, (struct sockaddr*)&a, sizeof a));
  struct pollfd p = {.fd = s, .events = POLLOUT};
  RC(1, poll(&p, 1, 5000));
  MASK("poll revents", p.revents, POLLOUT | POLLERR | POLLHUP);
  EQ("SO_ERROR (first read)", so_error(s), ECONNREFUSED);
  EQ("SO_ERROR (cleared)", so_error(s), 0);
  // The failed asynchronous connect leaves the socket shut down both ways.
  char buf[4];
  RC(0, recv(s, buf, sizeof buf, 0));
  ERR(EPIPE, send(s, "x", 1, MSG_NOSIGNAL));

  int s2 = OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  int ep = OK(epoll_create1(0));
  ERR(EINPROGRESS, connect(s2, (struct sockaddr*)&a, sizeof a));
  struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = 7};
  RC(0, epoll_ctl(ep, EPOLL_CTL_ADD, s2, &ev));
  struct epoll_event out[2];
  RC(1, epoll_wait(ep, out, 2, 5000));
  MASK("epoll events", out[0].events, EPOLLOUT | EPOLLERR | EPOLLHUP);
  EQ("SO_ERROR", so_error(s2), ECONNREFUSED);
  RC(0, close(ep));
  RC(0, close(s2));
  RC(0, close(s));
  RC(0, close(holder));
}

static void connect_refused_blocking(void) {
  int holder;
  struct sockaddr_in a = loopback(closed_port(&holder));
  int s = OK(socket(AF_INET, SOCK_STREAM, 0));
  ERR(ECONNREFUSED, connect(s, (struct sockaddr*)&a, sizeof a));
  EQ("SO_ERROR", so_error(s), 0);
  char buf[4];
  ERR(ENOTCONN, recv(s, buf, sizeof buf, 0));
  ERR(ENOTCONN, getpeername(s, (struct sockaddr*)&a, &(socklen_t){sizeof a}));
  RC(0, close(s));
  // A second attempt on a fresh socket is refused the same way.
  int s2 = OK(socket(AF_INET, SOCK_STREAM, 0));
  ERR(ECONNREFUSED, connect(s2, (struct sockaddr*)&a, sizeof a));
  RC(0, close(s2));
  RC(0, close(holder));
}

static void connect_blocking_ok(void) {
  struct sockaddr_in a;
  int l = tcp_listener(&a);
  int s = OK(socket(AF_INET, SOCK_STREAM, 0));
  RC(0, connect(s, (struct sockaddr*)&a, sizeof a));
  EQ("SO_ERROR", so_error(s), 0);
  ERR(EISCONN, connect(s, (struct sockaddr*)&a, sizeof a));
  struct sockaddr_in peer;
  socklen_t len = sizeof peer;
  int c = OK(accept(l, (struct sockaddr*)&peer, &len));
  EQ("accept addrlen", len, sizeof peer);
  EQ("accept family", peer.sin_family, AF_INET);
  // The client's source address is the kernel's choice (loopback: 127.0.0.1).
  CHECK(peer.sin_addr.s_addr == sem_addr() || getenv("SEM_ADDR") != NULL);
  RC(0, close(c));
  RC(0, close(s));
  RC(0, close(l));
}

static void unconnected_ops(void) {
  int s = OK(socket(AF_INET, SOCK_STREAM, 0));
  char buf[4];
  ERR(ENOTCONN, recv(s, buf, sizeof buf, 0));
  ERR(ENOTCONN, read(s, buf, sizeof buf));
  ERR(EPIPE, send(s, "x", 1, MSG_NOSIGNAL));
  ERR(ENOTCONN, shutdown(s, SHUT_RDWR));
  struct sockaddr_in a;
  ERR(ENOTCONN, getpeername(s, (struct sockaddr*)&a, &(socklen_t){sizeof a}));
  ERR(EINVAL, accept(s, NULL, NULL));
  // connect() on a listening socket
  int l = tcp_listener(&a);
  ERR(EISCONN, connect(l, (struct sockaddr*)&a, sizeof a));
  ERR(ENOTCONN, recv(l, buf, sizeof buf, MSG_DONTWAIT));
  // non-blocking accept with nothing pending
  int nl = OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  struct sockaddr_in b = loopback(0);
  RC(0, bind(nl, (struct sockaddr*)&b, sizeof b));
  RC(0, listen(nl, 4));
  ERR(EAGAIN, accept(nl, NULL, NULL));
  // bind to a port in use
  int dup_bind = OK(socket(AF_INET, SOCK_STREAM, 0));
  ERR(EADDRINUSE, bind(dup_bind, (struct sockaddr*)&a, sizeof a));
  ERR(EBADF, connect(-1, (struct sockaddr*)&a, sizeof a));
  RC(0, close(dup_bind));
  RC(0, close(nl));
  RC(0, close(l));
  RC(0, close(s));
}

const struct sem_case sem_connect_cases[] = {
    {"connect_nonblock_poll", connect_nonblock_poll},
    {"connect_nonblock_epoll", connect_nonblock_epoll},
    {"connect_refused_nonblock", connect_refused_nonblock},
    {"connect_refused_blocking", connect_refused_blocking},
    {"connect_blocking_ok", connect_blocking_ok},
    {"unconnected_ops", unconnected_ops},
    {NULL, NULL},
};
