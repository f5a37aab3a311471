// Which sockets a fork shared are held by this process alone again
// (docs/protocol.md §7 "After a fork: who else holds the socket").
//
// At a fork the parent's streams moved to TCP because the child holds the
// same sockets.  Whether another process still holds one is a question
// about the kernel's file table, so it is asked there: a socket is shared
// while another process's /proc/P/fd names its inode (one we cannot look
// into counts as a holder when it was started after the fork).  The
// question is asked again when a process known to hold one of them exits
// (a pidfd polls readable: no need for the program to reap it, and an
// exec keeps the pid, so an exec'd child is followed too) and otherwise on
// a back-off, which catches a child that closed the socket or exec'd with
// close-on-exec while it lives on.  A grandchild that inherited the socket
// is found by the scan itself, whoever its parent is by then.
//
// No lock inside: the caller serialises (stream/engine_fork.cc holds a
// lock, but not during the scan: due/answer).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace xp::stream::fork_share {

// Clock ticks since boot, as /proc/P/stat's starttime counts them.
uint64_t boot_ticks();
// The inode of the socket behind fd (0: not a socket, or fstat failed).
uint64_t socket_inode(int fd);

// /proc/P/stat's fields that holders() needs.  start_ticks: starttime
// (UINT64_MAX when unreadable: a holder we cannot rule out; 0 for a zombie,
// which holds no file any more); kernel_thread: PF_KTHREAD in its flags.
struct StatInfo {
  uint64_t start_ticks = UINT64_MAX;
  bool kernel_thread = false;
};
StatInfo parse_stat(const char* stat_line);

// For every inode of `inos`: the processes other than `self` whose fd table
// names it, plus (for every inode) the processes started at or after
// `since_ticks` whose fd table we may not read, kernel threads aside.  Inodes nobody else holds
// have no entry.  One pass over /proc: no lock should be held meanwhile.
using Held = std::unordered_map<uint64_t, std::vector<pid_t>>;
Held holders(const std::unordered_set<uint64_t>& inos, pid_t self, uint64_t since_ticks);

// A fork child's claim (stream/fork_handover.h): true while `parent`, the
// process that forked it, lives and its fd table cannot be read (the child
// changed its user, the parent is undumpable, /proc is mounted hidepid).
// holders() counts an unreadable process only when it started since the
// fork, which the parent did not, so the child must not take "not seen" for
// "let go".  The parent is alive while it is still ours (getppid).
bool parent_unseen(pid_t parent);

// What a scan is to ask (Watch::due), kept to match its answer
// (Watch::answer) with what changed meanwhile.
struct Ask {
  std::unordered_set<uint64_t> inos;
  uint64_t since_ticks = 0;
  bool exited = false;
  uint64_t adds = 0;
};

class Watch {
public:
  Watch() = default;
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  ~Watch();

  // This process forked while it held these sockets; since_ticks
  // (boot_ticks()) was taken before the fork.  The child's pid may not be
  // known (daemon(), a fork inside a library): the scan finds it.
  void add_fork(const std::vector<uint64_t>& inos, uint64_t since_ticks, uint64_t now_ms);
  // A process known to hold some of them (the child fork() returned):
  // its exit is seen at the next poll, without waiting for the re-check.
  void add_holder(pid_t pid);
  // Holders' pidfds are also added to this epoll set (EPOLLIN, one-shot,
  // data = tag), so that the owner of the set polls at once when one exits.
  void set_epoll(int epfd, uint64_t tag) {
    epfd_ = epfd;
    tag_ = tag;
  }
  // This process closed the socket: no longer watched.
  void forget(uint64_t ino);
  // A fork child's copy: the parent watches, not the child.
  void reset();
  // The inodes no other process holds any more (each reported once, then
  // forgotten).  Cheap unless a watched process exited or a re-check is
  // due: then one scan of /proc answers for every watched socket.
  std::vector<uint64_t> poll(uint64_t now_ms);
  // poll() in three steps, for a caller that shares the Watch under a lock
  // and must not hold it during the scan: due() (under the lock) says
  // whether a scan is due and what to ask; holders() (no lock); answer()
  // (under the lock) applies it: inodes forgotten meanwhile are not
  // reported, ones added meanwhile wait for the next scan, which is then
  // due at the first re-check.
  bool due(uint64_t now_ms, Ask* a);
  std::vector<uint64_t> answer(const Ask& a, const Held& held, uint64_t now_ms);
  bool empty() const { return inos_.empty(); }
  size_t scans() const { return scans_; }

  // Re-checks while a socket stays shared: first after this long, doubling
  // up to the maximum (a child that closed the socket or exec'd with
  // close-on-exec is seen within that time; one that exits, at once).
  static constexpr uint32_t kFirstRecheckMs = 1000;
  static constexpr uint32_t kMaxRecheckMs = 30000;

private:
  bool some_holder_exited();
  void arm(int pfd, int op);

  std::unordered_set<uint64_t> inos_;
  std::unordered_map<pid_t, int> pidfds_; // watched holders (-1: no pidfd here)
  uint64_t since_ticks_ = 0;              // the earliest fork still watched
  uint64_t next_ms_ = 0;
  uint32_t delay_ms_ = kFirstRecheckMs;
  size_t scans_ = 0;
  int epfd_ = -1;
  uint64_t tag_ = 0;
  uint64_t adds_ = 0; // add_fork and add_holder calls, to tell an answer what changed
};

} // namespace xp::stream::fork_share
