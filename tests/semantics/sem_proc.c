// Processes: fork (child uses an inherited socket), daemon, vfork+_exit,
// vfork+exec, posix_spawn, exec with and without FD_CLOEXEC.  Exec'd children
// run "semantics --fdcheck FD" (see sem_core.c), preloaded like the parent.
#include "sem.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int child_status(pid_t pid) {
  int st;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}

static int sees_eof(int fd) {
  char c;
  if (!(wait_ready(fd, POLLIN, 2000) & POLLIN)) return 0;
  return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

static void fork_inherit(void) {
  int a, b, go[2];
  tcp_pair(&a, &b);
  REQUIRE(pipe(go) == 0);
  fflush(stdout);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    char c, buf[8];
    close(go[1]);
    if (read(go[0], &c, 1) != 1) _exit(10);
    if (send(a, "child", 5, 0) != 5) _exit(11);
    if (recv(a, buf, 5, MSG_WAITALL) != 5 || memcmp(buf, "reply", 5) != 0) _exit(12);
    if (close(a) != 0) _exit(13);
    _exit(0);
  }
  RC(0, close(a)); // the parent's copy goes away first
  RC(1, write(go[1], "g", 1));
  char buf[8];
  EQ("bytes from child", recv_all(b, buf, 5), 5);
  CHECK(memcmp(buf, "child", 5) == 0);
  RC(5, send(b, "reply", 5, 0));
  EQ("child exit status", child_status(pid), 0);
  CHECK(sees_eof(b)); // every copy closed
  // the other way round: the child closes its copy, the parent keeps working
  int c, d;
  tcp_pair(&c, &d);
  fflush(stdout);
  pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(close(c) == 0 ? 0 : 1);
  EQ("child exit status", child_status(pid), 0);
  CHECK(roundtrip(c, d));
  // both processes use the socket in turn
  fflush(stdout);
  pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(roundtrip(c, d) ? 0 : 1);
  EQ("child exit status", child_status(pid), 0);
  CHECK(roundtrip(c, d));
  RC(0, close(go[0]));
  RC(0, close(go[1]));
  RC(0, close(b));
  RC(0, close(c));
  RC(0, close(d));
}

static void daemon_inherit(void) {
  int a, b;
  tcp_pair(&a, &b);
  fflush(stdout);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (daemon(1, 1) != 0) _exit(1);
    alarm(5); // daemon() left our process group
    char buf[4];
    if (send(a, "daemon", 6, 0) != 6) _exit(2);
    if (recv(a, buf, 2, MSG_WAITALL) != 2) _exit(3);
    _exit(0);
  }
  EQ("daemon() parent exit status", child_status(pid), 0);
  RC(0, close(a));
  char buf[8];
  EQ("bytes from the daemon", recv_all(b, buf, 6), 6);
  CHECK(memcmp(buf, "daemon", 6) == 0);
  RC(2, send(b, "ok", 2, 0));
  CHECK(sees_eof(b));
  RC(0, close(b));
}

static void vfork_exit(void) {
  int a, b;
  tcp_pair(&a, &b);
  fflush(stdout);
  pid_t pid = vfork();
  if (pid == 0) _exit(7);
  REQUIRE(pid > 0);
  EQ("child exit status", child_status(pid), 7);
  CHECK(roundtrip(a, b));
  RC(0, close(a));
  RC(0, close(b));
}

// A vfork child shares the parent's memory but not its fd table: what it
// closes or dups stays in the child (posix_spawn file actions do the same).
static void vfork_child_closes(void) {
  int a, b;
  tcp_pair(&a, &b);
  fflush(stdout);
  pid_t pid = vfork();
  if (pid == 0) {
    if (dup2(a, 30) != 30) _exit(1);
    if (close(a) != 0) _exit(2);
    _exit(close(30) == 0 ? 0 : 3);
  }
  REQUIRE(pid > 0);
  EQ("child exit status", child_status(pid), 0);
  ERR(EBADF, fcntl(30, F_GETFD));
  CHECK(roundtrip(a, b));
  RC(0, close(a));
  CHECK(sees_eof(b));
  RC(0, close(b));
}

static void vfork_exec(void) {
  int a, b;
  tcp_pair(&a, &b);
  RC(40, dup2(a, 40));
  const char* v = fdcheck(SPAWN_VFORK_EXEC, 40, b);
  say("vfork+exec, fd without FD_CLOEXEC: %s", v);
  CHECK(strcmp(v, "usable") == 0);
  CHECK(roundtrip(a, b)); // the parent's connection is intact
  RC(0, fcntl(40, F_SETFD, FD_CLOEXEC));
  v = fdcheck(SPAWN_VFORK_EXEC, 40, b);
  say("vfork+exec, fd with FD_CLOEXEC: %s", v);
  CHECK(strcmp(v, "closed") == 0);
  CHECK(roundtrip(40, b));
  RC(0, close(40));
  RC(0, close(a));
  RC(0, close(b));
}

static void posix_spawn_fds(void) {
  int a, b;
  tcp_pair(&a, &b);
  RC(41, dup2(a, 41));
  const char* v = fdcheck(SPAWN_POSIX, 41, b);
  say("posix_spawn, fd without FD_CLOEXEC: %s", v);
  CHECK(strcmp(v, "usable") == 0);
  RC(42, dup3(a, 42, O_CLOEXEC));
  v = fdcheck(SPAWN_POSIX, 42, b);
  say("posix_spawn, fd with FD_CLOEXEC: %s", v);
  CHECK(strcmp(v, "closed") == 0);
  CHECK(roundtrip(a, b));
  RC(0, close(41));
  RC(0, close(42));
  RC(0, close(a));
  RC(0, close(b));
}

static void exec_cloexec(void) {
  int a, b;
  tcp_pair(&a, &b);
  const char* v;
  RC(43, dup2(a, 43));
  v = fdcheck(SPAWN_FORK_EXEC, 43, b);
  say("dup2 (no FD_CLOEXEC): %s", v);
  CHECK(strcmp(v, "usable") == 0);
  RC(44, dup3(a, 44, O_CLOEXEC));
  v = fdcheck(SPAWN_FORK_EXEC, 44, b);
  say("dup3(O_CLOEXEC): %s", v);
  CHECK(strcmp(v, "closed") == 0);
  RC(0, fcntl(44, F_SETFD, 0));
  v = fdcheck(SPAWN_FORK_EXEC, 44, b);
  say("FD_CLOEXEC cleared by F_SETFD: %s", v);
  CHECK(strcmp(v, "usable") == 0);
  RC(0, fcntl(43, F_SETFD, FD_CLOEXEC));
  v = fdcheck(SPAWN_FORK_EXEC, 43, b);
  say("FD_CLOEXEC set by F_SETFD: %s", v);
  CHECK(strcmp(v, "closed") == 0);
  int fd = OK(fcntl(a, F_DUPFD_CLOEXEC, 45));
  v = fdcheck(SPAWN_FORK_EXEC, fd, b);
  say("F_DUPFD_CLOEXEC: %s", v);
  CHECK(strcmp(v, "closed") == 0);
  // sockets born with SOCK_CLOEXEC: connect()ed and accept4()ed
  struct sockaddr_in addr;
  int l = tcp_listener(&addr);
  int c = OK(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  RC(0, connect(c, (struct sockaddr*)&addr, sizeof addr));
  int s = OK(accept4(l, NULL, NULL, SOCK_CLOEXEC));
  v = fdcheck(SPAWN_FORK_EXEC, c, s);
  say("socket(SOCK_CLOEXEC): %s", v);
  CHECK(strcmp(v, "closed") == 0);
  v = fdcheck(SPAWN_FORK_EXEC, s, c);
  say("accept4(SOCK_CLOEXEC): %s", v);
  CHECK(strcmp(v, "closed") == 0);
  CHECK(roundtrip(c, s));
  // a non-socket on the number: the helper says so
  int nul = OK(open("/dev/null", O_RDWR));
  v = fdcheck(SPAWN_FORK_EXEC, nul, b);
  say("/dev/null: %s", v);
  CHECK(strcmp(v, "not-socket") == 0);
  int fds[] = {43, 44, fd, l, c, s, nul, a, b};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    RC(0, close(fds[i]));
}

const struct sem_case sem_proc_cases[] = {
    {"fork_inherit", fork_inherit}, {"daemon_inherit", daemon_inherit},
    {"vfork_exit", vfork_exit},     {"vfork_child_closes", vfork_child_closes},
    {"vfork_exec", vfork_exec},     {"posix_spawn_fds", posix_spawn_fds},
    {"exec_cloexec", exec_cloexec}, {NULL, NULL},
};
