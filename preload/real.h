// Pointers to the real libc functions, one per line of interpose_table.def.
// xp::real::NAME() resolves lazily (dlsym RTLD_NEXT) on first use, so wrappers
// work before our constructor ran; a lookup that finds our own wrapper aborts.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

namespace xp::real {

#define XP(ret, name, params)                                                                      \
  using name##_fn = ret(*) params;                                                                 \
  name##_fn name();
#include "preload/interpose_table.def"
#undef XP

// Resolve every entry now (idempotent; cheap once done).  Called when the
// process makes its first inet socket (track.cc), not at start-up: ~100
// dlsym lookups are a good part of the library's start-up cost, and a
// process that never connects only needs the entries it calls (each is
// looked up on its first use).  From that socket on, no wrapper looks
// anything up, so a signal handler's socket calls never run dlsym.
void resolve_all();

} // namespace xp::real
