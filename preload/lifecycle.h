// Start-up, fork and exit.  Everything is lazy: the first call that needs
// the configuration (an inet socket, fork, daemon; possibly from another
// library's constructor, before ours) parses it and reports its errors, once;
// no thread is started and no device touched here.
#pragma once

// The few variables a process touches at start-up and exit even when it
// never opens a socket: kept together in a section of their own, which the
// linker places after .data, on the page the loader already writes while
// clearing .bss's start (one page fault fewer for each of them).
#define XP_STARTUP_DATA __attribute__((section("xp_startup")))

namespace xp {

// Parse configuration, set up logging, fork handlers and (if asked) crash
// backtraces.  Cheap after the first call; safe to call from any wrapper.
void ensure_init();

// True inside a child created by vfork() that has not exec'd yet: it shares
// the parent's memory, so wrappers must not change any xpress state.
bool in_vfork_child();
// The process exits (exit's destructors, _exit, _Exit): open streams on RDMA
// end as the kernel's close of their sockets would end them
// (stream::engine::before_exit).  Not in a vfork child.
void before_exit();
// Called by the vfork entry stub just before the real vfork.
extern "C" void* xp_vfork_prepare();

// Re-entrancy guard: rdma-core and libc call socket functions internally;
// while a guard is held on this thread, the sockets they make are not
// tracked as the application's connections (track.cc).
struct InternalCall {
  InternalCall();
  ~InternalCall();
  InternalCall(const InternalCall&) = delete;
  InternalCall& operator=(const InternalCall&) = delete;
};
bool in_internal_call();

// Crash backtraces (XPRESS_BACKTRACE=1).
void install_backtrace_handlers();

} // namespace xp
