// The library binds its imports lazily (Makefile, LIB_LDFLAGS): the first
// call of each libc function from a wrapper goes through the loader's
// resolver.  This program makes the wrappers' first calls in the places where
// that must still work, each in a fresh process: in a signal handler running
// on an alternate signal stack, inside fork's atfork handlers, in a vfork
// child, and from a constructor that runs before the library's own (built as
// a second preloaded library, -DEARLY).  Run by tests/unit/startup.sh.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

// Socket calls a wrapper handles: a socketpair, a send and a receive, a dup
// and a close, an inet socket (the first one makes the library read its
// configuration).  Returns 0 when every result is the kernel's.
static int socket_calls(void) {
  int sv[2];
  char b[4] = {0};
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  if (send(sv[0], "ping", 4, 0) != 4 || recv(sv[1], b, 4, 0) != 4 || memcmp(b, "ping", 4) != 0)
    return 2;
  int d = dup(sv[0]);
  if (d < 0 || close(d) != 0 || fcntl(sv[1], F_GETFL) < 0) return 3;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0 || close(s) != 0) return 4;
  if (close(sv[0]) != 0 || close(sv[1]) != 0) return 5;
  return 0;
}

#ifdef EARLY
// A library whose constructor runs before xpress's (listed after it in
// LD_PRELOAD): the result goes to the environment for main to check.
__attribute__((constructor)) static void early(void) {
  setenv("XP_LAZY_EARLY", socket_calls() == 0 ? "ok" : "failed", 1);
}
#else

static volatile sig_atomic_t g_handler_rc = -1;
static void on_signal(int sig) {
  (void)sig;
  g_handler_rc = socket_calls();
}

static int g_atfork_rc;
static void prepare(void) {
  g_atfork_rc |= socket_calls();
}
static void child(void) {
  g_atfork_rc |= socket_calls();
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "";
  int rc = -1;
  if (strcmp(what, "signal") == 0) {
    stack_t ss = {.ss_sp = malloc(SIGSTKSZ * 4), .ss_size = SIGSTKSZ * 4, .ss_flags = 0};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK;
    if (sigaltstack(&ss, NULL) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0) return 10;
    raise(SIGUSR1);
    rc = g_handler_rc;
  } else if (strcmp(what, "atfork") == 0) {
    if (pthread_atfork(prepare, NULL, child) != 0) return 10;
    pid_t pid = fork();
    if (pid == 0) _exit(g_atfork_rc);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 11;
    rc = g_atfork_rc | (WIFEXITED(st) ? WEXITSTATUS(st) : 100);
  } else if (strcmp(what, "vfork") == 0) {
    int p[2];
    if (pipe(p) != 0) return 10;
    pid_t pid = vfork();
    if (pid == 0) {
      // Only calls a vfork child may make: dup2, write, close, _exit.
      int d = dup2(p[1], 100);
      _exit(d == 100 && write(d, "v", 1) == 1 && close(d) == 0 ? 0 : 1);
    }
    int st = 0;
    char c = 0;
    close(p[1]);
    if (pid < 0 || waitpid(pid, &st, 0) != pid || read(p[0], &c, 1) != 1) return 11;
    rc = (WIFEXITED(st) && WEXITSTATUS(st) == 0 && c == 'v') ? socket_calls() : 12;
  } else if (strcmp(what, "early") == 0) {
    const char* r = getenv("XP_LAZY_EARLY");
    rc = (r != NULL && strcmp(r, "ok") == 0) ? socket_calls() : 13;
  }
  printf("%s %d\n", what, rc);
  return rc == 0 ? 0 : 1;
}
#endif
