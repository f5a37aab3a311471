#include "preload/lifecycle.h"
#include "common/fork_parts.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/config.h"
#include "preload/epoll_state.h"
#include "preload/log.h"
#include "preload/real.h"
#include "preload/stats.h"
#include "preload/track.h"
#include "stream/conn_io.h"
#include "stream/engine.h"
#include "stream/ready_source.h"
#include "xp_version.h"

namespace xp {
namespace {

Config g_config;
// Where each value came from, for the start-up line (read once, in init).
constinit settings::Resolved g_resolved;
// 0 = not started, 1 = in progress, 2 = done.
XP_STARTUP_DATA std::atomic<int> g_init_state{0};
thread_local bool t_initializing = false;
thread_local int t_internal_depth = 0;
// vfork: the pid of the parent that is waiting in vfork on this thread.
thread_local long t_vfork_parent = 0;

const char* env_lookup(const char* name, void*) {
  return getenv(name);
}
void env_report(const char* line, void*) {
  log::to_stderr("%s", line);
}

// Fork: the fd table holds no lock (readers are lock-free, writers use CAS),
// so nothing is taken before the fork; the child inherits every record, as
// its inherited TCP sockets are the same kernel sockets.
XP_FORK_TEXT void atfork_child() {
  // The locks first: the engine's child handler below may fail a
  // connection, whose mode change takes epoll's and the watchers' locks
  // (track's readiness hook), which a thread the child does not have may
  // have held at the fork.  (Handlers registered apart run in registration
  // order, which put these after the engine's.)
  epoll::after_fork_child();
  stream::ReadySource::after_fork_child_watch();
  if (!fork_parts::used(fork_parts::kLifecycle)) return; // common/fork_parts.h
  fork_parts::take_prepared(fork_parts::kEngine);
  log::after_fork_child();
  stats::after_fork_child();
  stream::engine::on_fork_child();
  stream::io::fd_options_changed(); // files shared with the parent now
}
// Connections still upgrading when the process forks stay on TCP: the child
// shares the kernel socket, and a switch made by one process would hide
// bytes from the other.
XP_FORK_TEXT void atfork_prepare() {
  if (!fork_parts::used(fork_parts::kEngine)) return;
  stream::engine::before_fork();
  fork_parts::set_prepared(fork_parts::kEngine);
}
XP_FORK_TEXT void atfork_parent() {
  // Only after its prepare handler: the engine may have been made between
  // the two (common/fork_parts.h, take_prepared).
  if (fork_parts::take_prepared(fork_parts::kEngine)) stream::engine::after_fork_parent();
  stream::io::fd_options_changed(); // files shared with the child now (nothing if none cached)
}

// Registered once, from the constructor (before any state they protect
// exists), or by an init that ran before it.  Never first from a wrapper
// call that a fork handler could make: glibc holds its atfork lock while
// the handlers run, and pthread_atfork takes it.
void register_fork_handlers() {
  XP_STARTUP_DATA static std::atomic<bool> done{false};
  if (!done.exchange(true)) pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

// The start-up line bug reports need: version, revision, the settings that
// differ from the defaults (with where each came from), why nothing will be
// accelerated when that is known already, and where the devices are told.
void log_banner() {
  char set[768];
  size_t o = 0;
  set[0] = '\0';
  for (int i = 0; i < settings::kCount && o + 1 < sizeof set; ++i) {
    if (g_resolved.slot[i].origin == settings::Origin::dflt) continue;
    char val[300], origin[300];
    settings::format(g_resolved, static_cast<settings::Id>(i), val, sizeof val, origin,
                     sizeof origin);
    int w = snprintf(set + o, sizeof set - o, " %s=%s (%s)", settings::kDecls[i].name, val, origin);
    if (w < 0) break;
    o += static_cast<size_t>(w);
  }
  if (o >= sizeof set) o = sizeof set - 1;
  // Devices are looked up only when a connection could use one (rdma-core
  // is loaded then): the engine's own start-up line lists them.
  XP_LOG(info,
         "xpress %s (%s), pid %ld%s; settings:%s; RDMA devices: listed when the engine starts "
         "(first connection that may use RDMA)",
         XP_VERSION, XP_GIT_REV, static_cast<long>(::syscall(SYS_getpid)),
         g_config.enabled ? "" : " (disabled: passing everything through)", o ? set : " defaults");
}

void do_init() {
  settings::Sources src;
  src.env = env_lookup;
  src.read = settings::read_file;
  src.program = program_invocation_short_name != nullptr ? program_invocation_short_name : "";
  src.secure = getauxval(AT_SECURE) != 0;
  src.check_rules = check_rules;
  src.report = env_report;
  parse_config(src, &g_resolved, &g_config);
  if (src.secure) apply_secure_execution(&g_config);
  log::g_level.store(g_config.log_level);
  log::open_destination(g_config.log_file);
#ifndef XP_TESTING
  // Fault injection and the user-mode test hooks exist only in the test
  // library (build/test/libxpress.so): say so rather than ignore them mutely.
  if (g_config.test_user_mode || g_config.test_relay_delay_ms != 0 ||
      g_config.engine.fault_qp_error_at != 0)
    XP_LOG(warn, "XPRESS_TEST_USER_MODE, XPRESS_TEST_RELAY_DELAY_MS and "
                 "XPRESS_FAULT_QP_ERROR_AT act only in the test library: ignored");
#endif
  register_fork_handlers();
  if (g_config.backtrace) install_backtrace_handlers();
  XP_LOG(debug, "initialised: enabled=%d stats=%d rules=%zu", g_config.enabled,
         static_cast<int>(g_config.stats), g_config.rules.count);
  if (log::enabled(LogLevel::info)) log_banner();
}

} // namespace

const Config& config() {
  ensure_init();
  return g_config;
}

void ensure_init() {
  if (__builtin_expect(g_init_state.load(std::memory_order_acquire) == 2, 1)) return;
  if (t_initializing) return; // a call made by init itself: defaults apply
  int expected = 0;
  if (g_init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    t_initializing = true;
    do_init();
    t_initializing = false;
    g_init_state.store(2, std::memory_order_release);
    return;
  }
  // Another thread is initialising: it finishes quickly (no blocking calls).
  while (g_init_state.load(std::memory_order_acquire) != 2)
    sched_yield();
}

bool in_vfork_child() {
  if (__builtin_expect(t_vfork_parent == 0, 1)) return false;
  long pid = ::syscall(SYS_getpid);
  if (pid != t_vfork_parent) return true;
  t_vfork_parent = 0; // back in the parent: the child has exec'd or exited
  return false;
}

extern "C" void* xp_vfork_prepare() {
  t_vfork_parent = ::syscall(SYS_getpid);
  return reinterpret_cast<void*>(real::vfork());
}

InternalCall::InternalCall() {
  ++t_internal_depth;
}
InternalCall::~InternalCall() {
  --t_internal_depth;
}
bool in_internal_call() {
  return t_internal_depth > 0;
}

void before_exit() {
  if (g_init_state.load(std::memory_order_acquire) != 2 || in_vfork_child()) return;
  InternalCall guard;
  stream::engine::before_exit(sw::kExitLingerMs);
}

// Constructor: only the fork handlers.  The configuration is read at the
// first call that needs it (an inet socket, fork, daemon): a process that
// never opens one pays nothing for it.  XPRESS_BACKTRACE in the environment
// is the exception (crashes before the first socket get their backtrace).
// Destructor: the streams end as the kernel's close at exit ends sockets,
// then stats (a destructor runs after the program's atexit handlers, which
// may still send).
// A tool linked with the library's code (xpress-stat) defines
// xp_tool_process as true: it is no preloaded program, so it neither reads
// its own configuration nor logs at start.
extern "C" {
__attribute__((weak)) XP_STARTUP_DATA bool xp_tool_process = false;
}
// The constructor scans environ itself rather than calling getenv, and
// compares with a name kept in the start-up section: getenv's code, and a
// string in .rodata, would each be a page every process faults in for a
// variable nearly none sets.  (Not the environment glibc passes to
// constructors: link-time optimisation merges them into one function
// without parameters.)
namespace {
XP_STARTUP_DATA char g_backtrace_var[] = "XPRESS_BACKTRACE=";
bool env_has(char** env, const char* key) {
  for (; env != nullptr && *env != nullptr; ++env) {
    const char* e = *env;
    size_t i = 0;
    while (key[i] != '\0' && e[i] == key[i])
      ++i;
    if (key[i] == '\0') return true;
  }
  return false;
}
} // namespace
__attribute__((constructor)) static void xp_constructor() {
  if (xp_tool_process) return;
  register_fork_handlers();
  if (env_has(environ, g_backtrace_var)) ensure_init();
}
__attribute__((destructor)) static void xp_destructor() {
  if (g_init_state.load(std::memory_order_acquire) != 2) return;
  before_exit();
  stats::at_exit();
}

} // namespace xp
