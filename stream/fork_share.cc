// Who else holds a socket after a fork (fork_share.h).  Cold path: one scan
// of /proc when a watched process exits or a re-check is due.
#include "stream/fork_share.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fd_place.h"

namespace xp::stream::fork_share {
namespace {

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

bool all_digits(const char* s) {
  if (*s == '\0') return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

// "socket:[123]" -> 123; 0 for anything else.
uint64_t parse_socket_link(const char* s, ssize_t n) {
  static constexpr char kPre[] = "socket:[";
  constexpr ssize_t kPreLen = sizeof kPre - 1;
  if (n <= kPreLen + 1 || std::memcmp(s, kPre, kPreLen) != 0 || s[n - 1] != ']') return 0;
  uint64_t v = 0;
  for (ssize_t i = kPreLen; i < n - 1; ++i) {
    if (s[i] < '0' || s[i] > '9') return 0;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  return v;
}

// What holders() needs of /proc/P/stat (when its fd table is unreadable).
StatInfo read_stat(const char* pid) {
  char path[300], buf[512];
  std::snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
  if (fd < 0) return StatInfo{};
  ssize_t n = syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return StatInfo{};
  buf[n] = '\0';
  return parse_stat(buf);
}

} // namespace

StatInfo parse_stat(const char* buf) {
  StatInfo out;
  // The command name may hold spaces and parentheses: fields count from
  // the last ')'.  After it: state (field 3), flags (9), starttime (22).
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return out;
  if (p[2] == 'Z' || p[2] == 'X') {
    out.start_ticks = 0;
    return out;
  }
  uint64_t flags = 0;
  for (int field = 2; field < 22; ++field) {
    p = std::strchr(p + 1, ' ');
    if (p == nullptr) return out;
    if (field == 8) flags = std::strtoull(p + 1, nullptr, 10);
  }
  out.start_ticks = std::strtoull(p + 1, nullptr, 10);
  // PF_KTHREAD (include/linux/sched.h): a kernel thread has no user fd
  // table, so it holds no socket whatever its start time.
  out.kernel_thread = (flags & 0x00200000U) != 0;
  return out;
}

uint64_t boot_ticks() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) hz = 100;
  return static_cast<uint64_t>(ts.tv_sec) * static_cast<uint64_t>(hz) +
         static_cast<uint64_t>(ts.tv_nsec) / (1000000000ULL / static_cast<uint64_t>(hz));
}

uint64_t socket_inode(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

bool parent_unseen(pid_t parent) {
  if (parent <= 0 || getppid() != parent) return false; // it exited: we were reparented
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd", static_cast<int>(parent));
  DIR* d = opendir(path);
  if (d == nullptr) return true;
  closedir(d);
  return false;
}

Held holders(const std::unordered_set<uint64_t>& inos, pid_t self, uint64_t since_ticks) {
  Held out;
  if (inos.empty()) return out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) {
    // Nothing can be ruled out: every socket stays shared.
    for (uint64_t ino : inos)
      out[ino].push_back(-1);
    return out;
  }
  char path[300], link[64];
  while (dirent* e = readdir(proc)) {
    if (!all_digits(e->d_name)) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
    if (pid == self) continue;
    std::snprintf(path, sizeof path, "/proc/%s/fd", e->d_name);
    DIR* fds = opendir(path);
    if (fds == nullptr) {
      // Gone (ENOENT), or not ours to look into: such a process could hold
      // the socket only if it came from the fork (a child that changed its
      // user or made itself undumpable), so one started since counts.
      // A kernel thread (a kworker the rdma_cm's work started meanwhile)
      // holds none.
      const bool gone = errno == ENOENT;
      const StatInfo st = gone ? StatInfo{0, false} : read_stat(e->d_name);
      if (!gone && !st.kernel_thread &&
          (st.start_ticks == UINT64_MAX || st.start_ticks + 1 >= since_ticks))
        for (uint64_t ino : inos)
          out[ino].push_back(pid);
      continue;
    }
    const int dfd = dirfd(fds);
    while (dirent* f = readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      ssize_t n = readlinkat(dfd, f->d_name, link, sizeof link);
      if (n <= 0) continue;
      uint64_t ino = parse_socket_link(link, n);
      if (ino == 0 || inos.count(ino) == 0) continue;
      std::vector<pid_t>& v = out[ino];
      if (v.empty() || v.back() != pid) v.push_back(pid);
    }
    closedir(fds);
  }
  closedir(proc);
  return out;
}

Watch::~Watch() {
  for (auto& [pid, fd] : pidfds_)
    if (fd >= 0) syscall(SYS_close, fd);
}

void Watch::add_holder(pid_t pid) {
  if (pid <= 0 || pidfds_.count(pid)) return;
  ++adds_;
  long fd = syscall(SYS_pidfd_open, pid, 0);
  // Without pidfds (kernel before 5.3) the back-off's re-checks remain.
  const int pfd = fd >= 0 ? place_high(static_cast<int>(fd)) : -1;
  pidfds_[pid] = pfd;
  arm(pfd, EPOLL_CTL_ADD);
}

void Watch::arm(int pfd, int op) {
  if (pfd < 0 || epfd_ < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = tag_;
  syscall(SYS_epoll_ctl, epfd_, op, pfd, &ev);
}

void Watch::add_fork(const std::vector<uint64_t>& inos, uint64_t since_ticks, uint64_t now_ms) {
  if (inos.empty()) return;
  ++adds_;
  if (inos_.empty() || since_ticks < since_ticks_) since_ticks_ = since_ticks;
  for (uint64_t ino : inos)
    if (ino != 0) inos_.insert(ino);
  delay_ms_ = kFirstRecheckMs;
  next_ms_ = now_ms + delay_ms_;
}

void Watch::forget(uint64_t ino) {
  inos_.erase(ino);
  if (inos_.empty()) reset();
}

void Watch::reset() {
  for (auto& [pid, fd] : pidfds_)
    if (fd >= 0) syscall(SYS_close, fd);
  pidfds_.clear();
  inos_.clear();
  delay_ms_ = kFirstRecheckMs;
}

bool Watch::some_holder_exited() {
  for (auto& [pid, fd] : pidfds_) {
    if (fd < 0) continue;
    pollfd p{fd, POLLIN, 0};
    // Readable: exited.  POLLNVAL: the program closed our fd (closefrom
    // of everything): ask the kernel's table again too.
    if (syscall(SYS_poll, &p, 1, 0) != 0) return true;
  }
  return false;
}

bool Watch::due(uint64_t now_ms, Ask* a) {
  if (inos_.empty()) return false;
  const bool exited = some_holder_exited();
  if (!exited && now_ms < next_ms_) return false;
  a->inos = inos_;
  a->since_ticks = since_ticks_;
  a->exited = exited;
  a->adds = adds_;
  return true;
}

std::vector<uint64_t> Watch::answer(const Ask& a, const Held& held, uint64_t now_ms) {
  ++scans_;
  std::vector<uint64_t> released;
  std::unordered_set<pid_t> still;
  for (uint64_t ino : a.inos) {
    // Forgotten meanwhile (closed here): nothing to report.
    if (inos_.count(ino) == 0) continue;
    auto h = held.find(ino);
    if (h == held.end()) {
      released.push_back(ino);
      inos_.erase(ino);
      continue;
    }
    for (pid_t p : h->second)
      still.insert(p);
  }
  const bool added = adds_ != a.adds; // a fork while the scan ran: not asked yet
  if (!added) {
    // Watch exactly the processes that hold something now.
    for (auto it = pidfds_.begin(); it != pidfds_.end();) {
      if (still.count(it->first)) {
        ++it;
        continue;
      }
      if (it->second >= 0) syscall(SYS_close, it->second);
      it = pidfds_.erase(it);
    }
  }
  for (pid_t p : still) {
    auto it = pidfds_.find(p);
    if (it == pidfds_.end())
      add_holder(p);
    else
      arm(it->second, EPOLL_CTL_MOD); // one-shot: fired or not, armed again
  }
  if (inos_.empty()) {
    reset();
    return released;
  }
  // A release, an exit or a fork starts the back-off over; a scan that
  // found the same holders waits longer for the next.
  if (!released.empty() || a.exited || added)
    delay_ms_ = kFirstRecheckMs;
  else if (delay_ms_ < kMaxRecheckMs)
    delay_ms_ = delay_ms_ * 2 > kMaxRecheckMs ? kMaxRecheckMs : delay_ms_ * 2;
  next_ms_ = now_ms + delay_ms_;
  return released;
}

std::vector<uint64_t> Watch::poll(uint64_t now_ms) {
  Ask a;
  if (!due(now_ms, &a)) return {};
  return answer(a, holders(a.inos, static_cast<pid_t>(syscall(SYS_getpid)), a.since_ticks), now_ms);
}

} // namespace xp::stream::fork_share
