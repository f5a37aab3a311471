// epoll for sockets whose readiness xpress answers ("user mode",
// stream/ready_source.h).  Per epoll set, created on the first epoll_ctl that
// involves a tracked socket, xpress keeps the application's registrations of
// tracked sockets (epoll_regs.h).  A socket in kernel mode has the
// application's own registration in the kernel.  A socket in user mode has
// a neutral stand-in there instead (EPOLLET|EPOLLONESHOT with no readiness
// bits, reserved data): the kernel never reports it to the application, but
// it keeps doing what only the kernel can do exactly -- the errno of every
// epoll_ctl (EEXIST, ENOENT, EBADF, EINVAL for EPOLLEXCLUSIVE, ...) and the
// life of a registration, which belongs to the open file description (it
// survives the close of one of two dup'ed fds and goes with the last).
// epoll_wait reports user-mode sockets from their ReadySource and sleeps in
// the kernel with a per-set wake eventfd (reserved data) in the set.
// Epoll sets that never see a tracked socket cost one FdSlots lookup.
#pragma once
#include <atomic>
#include <cstdint>
#include <signal.h>
#include <sys/epoll.h>
#include <time.h>

#include "preload/fd_slots.h"

namespace xp {
struct SocketRecord;
namespace stream {
class ReadySource;
}
} // namespace xp

namespace xp::epoll {

// How the application waited: the kernel calls keep the same kind, mask and
// timeout precision.
struct WaitCall {
  enum Kind : uint8_t { plain, pwait, pwait2 } kind = plain;
  int timeout_ms = -1;            // plain, pwait
  const timespec* ts = nullptr;   // pwait2 (null: no timeout)
  const sigset_t* mask = nullptr; // pwait, pwait2
};

// The wrappers (wrap_poll.cc).
void on_create(int epfd);
int ctl(int epfd, int op, int fd, epoll_event* ev);
int wait(int epfd, epoll_event* events, int maxevents, const WaitCall& call);

// A socket's readiness source changed (track's mode hook, test mode).
void on_mode(int fd, stream::ReadySource* now);
// The application is about to close fd (readiness.cc calls it when the
// fd's slot has anything in it, or when rec's last name goes).  rec: the
// tracked socket fd names (null if none); last: no other fd names it.
void on_close(int fd, FdSlot* s, SocketRecord* rec, bool last);
// newfd now names what oldfd names (after the real dup; the previous
// occupant of newfd was handled as a close).
void on_dup(int oldfd, int newfd);
// One of xpress's wake eventfds moved to another number (close_range
// protection); newfd -1: it was replaced behind our back (dup2 over it).
void renumber_wake(int oldfd, int newfd);
// Some registration outlived the number it was made under (see on_close).
bool has_orphans();
// In a fork child, before anything there takes its locks (lifecycle.cc's
// child handler calls it first): the locks re-made.
void after_fork_child();

// poll/select: epoll sets with user-mode members (directly or nested) are
// readable only as far as xpress keeps their wake eventfd's level true.
extern std::atomic<uint32_t> g_active; // epoll sets with user-mode members
bool active_fd(int fd);
void refresh_fd(int fd);                 // before the kernel looks at it
int wake_fds(int fd, int* out, int cap); // eventfds to register as sleepers

} // namespace xp::epoll
