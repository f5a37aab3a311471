// The hooked allocator: the whole malloc family, as preload/wrap_alloc.cc
// exports it.  Requests below the threshold (XPRESS_ALLOC_MIN_KB, default
// 64 KiB) go straight to glibc (__libc_malloc and friends: no lookup, so they
// work before any constructor ran and inside dlsym); larger ones come from
// the registered arenas (alloc/arena.h), or from glibc when the arena cannot
// serve them.  free() decides by address: one range check.
//
// Configuration is read from the environment on the first large request
// (getenv allocates nothing); until the environment exists (the dynamic
// loader's own early calls) large requests go to glibc too.  XPRESS_ALLOC=0,
// XPRESS_ENABLE=0 or an invalid value turns the hook off: every call is
// forwarded to glibc.
#pragma once
#include <cstddef>

namespace xp::alloc::heap {

void* malloc(size_t n);
void* calloc(size_t n, size_t size);
void* realloc(void* p, size_t n);
void* reallocarray(void* p, size_t n, size_t size);
void free(void* p);
int posix_memalign(void** out, size_t align, size_t size);
void* aligned_alloc(size_t align, size_t size);
void* memalign(size_t align, size_t size);
void* valloc(size_t size);
void* pvalloc(size_t size);
size_t malloc_usable_size(void* p);

// Whether the arenas are in use (decides from the environment if nobody did).
bool hook_enabled();
// The smallest request the arenas serve (SIZE_MAX when the hook is off).
size_t threshold();

constexpr size_t kDefaultMinKb = 64;

// pthread_atfork handlers (registered first by preload/wrap_alloc.cc, so
// that they run last before the fork and first after it).
void before_fork();
void after_fork_parent();
void after_fork_child();

// Tests: decide without the environment.
void configure_for_test(bool on, size_t min_bytes);

} // namespace xp::alloc::heap
