// XPRESS_BACKTRACE=1: on SIGSEGV, SIGBUS, SIGABRT, SIGFPE or SIGILL, write a
// libunwind backtrace to the log, then let the default action happen.  Only
// signals still at their default disposition get our handler, so a handler
// the program installed itself is never replaced (and one it installs later
// replaces ours, as it should).  libunwind is not linked: it is dlopen'd
// here, only when the setting asks for backtraces (a signal handler cannot
// load a library).
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>

#include "preload/lifecycle.h"
#include "preload/log.h"

namespace xp {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};

// libunwind's unw_backtrace (libunwind.h): the frames' return addresses.
using unw_backtrace_fn = int (*)(void** frames, int max);
unw_backtrace_fn g_unw_backtrace = nullptr;

void on_fatal(int sig, siginfo_t* info, void*) {
  log::write(LogLevel::error, "fatal signal %d (%s) at address %p; backtrace:", sig,
             sigdescr_np(sig), info ? info->si_addr : nullptr);
  void* frames[64];
  int n = g_unw_backtrace(frames, 64);
  for (int i = 0; i < n; ++i) {
    Dl_info dl{};
    const char* obj = "?";
    const char* sym = "?";
    long off = 0;
    if (dladdr(frames[i], &dl) != 0) {
      if (dl.dli_fname) obj = dl.dli_fname;
      if (dl.dli_sname) {
        sym = dl.dli_sname;
        off = static_cast<char*>(frames[i]) - static_cast<char*>(dl.dli_saddr);
      } else {
        off = static_cast<char*>(frames[i]) - static_cast<char*>(dl.dli_fbase);
      }
    }
    log::write(LogLevel::error, "  #%-2d %p %s+0x%lx (%s)", i, frames[i], sym, off, obj);
  }
  // Default action now: the handler was installed with SA_RESETHAND, so the
  // re-raised signal (or the re-executed faulting instruction) terminates the
  // process with the usual status and core dump.
  signal(sig, SIG_DFL);
  raise(sig);
}

} // namespace

void install_backtrace_handlers() {
  void* lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr)
    g_unw_backtrace = reinterpret_cast<unw_backtrace_fn>(dlsym(lib, "unw_backtrace"));
  if (g_unw_backtrace == nullptr) {
    XP_LOG(warn, "XPRESS_BACKTRACE: libunwind.so.8 not usable (%s): no backtraces",
           lib ? "no unw_backtrace" : dlerror());
    return;
  }
  for (int sig : kSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue; // the program's own
    struct sigaction sa {};
    sa.sa_sigaction = on_fatal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
    sigaction(sig, &sa, nullptr);
  }
}

} // namespace xp
