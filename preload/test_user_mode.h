// XPRESS_TEST_USER_MODE=1 (tests only): every tracked, connected TCP socket
// enters user mode with a readiness source that mirrors the kernel's, so the
// readiness layer (epoll_state.h, readiness.h) runs its user-mode paths on a
// host without RDMA while data still goes through the kernel.  One watcher
// thread with an internal epoll set (EPOLLET) turns the sockets' kernel
// events into new readiness generations and stream::wake::notify() calls.
#pragma once

namespace xp {
struct SocketRecord;
}

namespace xp::test_user_mode {

bool enabled();
// A connection was established (connect succeeded or is in progress,
// accept returned it): called from track's establish(), before the program
// can register the fd anywhere.
void on_established(SocketRecord& r);
// fd, one name of r, is being closed; last: no other fd names r.
void on_close(SocketRecord& r, int fd, bool last);
// The watcher's epoll fd moved (close_range protection); newfd -1: lost, a
// new one is made on next use.
void renumber(int oldfd, int newfd);

} // namespace xp::test_user_mode
