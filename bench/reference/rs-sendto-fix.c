/* rs-sendto-fix: lets sockperf run over rsocket's preload (librspreload.so).
 *
 * sockperf sends on its connected TCP socket with sendto(fd, ..., &peer, len).
 * Linux ignores the address on a connected stream socket, but rsocket's
 * rsendto() returns EISCONN, so sockperf aborts.  This shim, preloaded before
 * librspreload.so (LD_PRELOAD=rs-sendto-fix.so:librspreload.so), drops the
 * address when the socket already has a peer and passes the call on.  It costs
 * one getpeername() per send (a user-space lookup in rsocket).  Only for the
 * reference benchmark (bench/softroce-reference.sh); not part of xpress. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

typedef ssize_t (*sendto_fn)(int, const void*, size_t, int, const struct sockaddr*, socklen_t);

ssize_t sendto(int fd, const void* buf, size_t len, int flags, const struct sockaddr* addr,
               socklen_t alen) {
  static sendto_fn next;
  if (!next) next = (sendto_fn)dlsym(RTLD_NEXT, "sendto");
  if (addr) {
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    if (getpeername(fd, (struct sockaddr*)&peer, &plen) == 0) {
      addr = NULL;
      alen = 0;
    }
  }
  return next(fd, buf, len, flags, addr, alen);
}
