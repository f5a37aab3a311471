// XPRESS_TEST_USER_MODE=1 (tests only): every tracked, connected TCP socket
// enters user mode with a readiness source that mirrors the kernel's, so the
// readiness layer (epoll_state.h, readiness.h) runs its user-mode paths on a
// host without RDMA while data still goes through the kernel.  One watcher
// thread with an internal epoll set (EPOLLET) turns the sockets' kernel
// events into new readiness generations and stream::wake::notify() calls.
// Compiled only into the test library (XP_TESTING, build/test/libxpress.so);
// in the release library these hooks are empty and the setting is ignored.
#pragma once

namespace xp {
struct SocketRecord;
}

namespace xp::test_user_mode {

#ifdef XP_TESTING
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
#else
inline bool enabled() {
  return false;
}
inline void on_established(SocketRecord&) {}
inline void on_close(SocketRecord&, int, bool) {}
inline void renumber(int, int) {}
#endif

} // namespace xp::test_user_mode
