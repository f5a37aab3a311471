// The few C++ run-time entry points the library's code calls, defined here
// so that libxpress.so needs no libstdc++ at all (linked into the library
// only; the unit tests and tools use the real libstdc++).  Loading
// libstdc++.so into every preloaded process, or linking libstdc++.a's
// exception machinery (whose emergency pool mallocs 73 KB from its
// constructor and registers a destructor with __cxa_atexit), would cost
// every exec; the library is built without exceptions, so each "throw"
// below is a fatal error, as an exception escaping -fno-exceptions code is.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

[[noreturn]] void fatal(const char* what) {
  static const char prefix[] = "xpress: fatal: ";
  ::syscall(SYS_write, 2, prefix, sizeof prefix - 1);
  size_t n = 0;
  while (what[n] != '\0')
    ++n;
  ::syscall(SYS_write, 2, what, n);
  ::syscall(SYS_write, 2, "\n", 1);
  ::abort();
}

// Function-local statics (Itanium C++ ABI 3.3.2): byte 0 of the guard says
// "initialised" (the compiler's inline check reads it), byte 1 "being
// initialised by some thread".  One lock for all guards, not held while an
// initialiser runs, so one initialiser may start another.
pthread_mutex_t g_guard_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_guard_cv = PTHREAD_COND_INITIALIZER;

uint8_t* guard_bytes(int64_t* g) {
  return reinterpret_cast<uint8_t*>(g);
}

} // namespace

void* operator new(size_t n) {
  void* p = malloc(n ? n : 1);
  if (p == nullptr) fatal("out of memory (operator new)");
  return p;
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return malloc(n ? n : 1);
}
void operator delete(void* p) noexcept {
  free(p);
}
void operator delete(void* p, size_t) noexcept {
  free(p);
}
// The array forms too: libstdc++.a's would bring its exception machinery
// (and the emergency pool's constructor) back with them.
void* operator new[](size_t n) {
  return operator new(n);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return malloc(n ? n : 1);
}
void operator delete[](void* p) noexcept {
  free(p);
}
void operator delete[](void* p, size_t) noexcept {
  free(p);
}

// What the standard containers call on a failure they would throw for.
namespace std {
void __throw_bad_alloc() {
  fatal("out of memory (std::bad_alloc)");
}
void __throw_bad_array_new_length() {
  fatal("std::bad_array_new_length");
}
void __throw_length_error(const char* what) {
  fatal(what);
}
void __throw_system_error(int) {
  fatal("std::system_error");
}
} // namespace std

extern "C" {

// glibc's implementation of thread_local destructors (since 2.18).
int __cxa_thread_atexit_impl(void (*dtor)(void*), void* obj, void* dso);

__attribute__((visibility("hidden"))) int __cxa_thread_atexit(void (*dtor)(void*), void* obj,
                                                              void* dso) noexcept {
  return __cxa_thread_atexit_impl(dtor, obj, dso);
}

__attribute__((visibility("hidden"))) int __cxa_guard_acquire(int64_t* g) noexcept {
  uint8_t* b = guard_bytes(g);
  if (__atomic_load_n(&b[0], __ATOMIC_ACQUIRE) != 0) return 0;
  pthread_mutex_lock(&g_guard_mu);
  while (true) {
    if (__atomic_load_n(&b[0], __ATOMIC_RELAXED) != 0) {
      pthread_mutex_unlock(&g_guard_mu);
      return 0;
    }
    if (b[1] == 0) {
      b[1] = 1;
      pthread_mutex_unlock(&g_guard_mu);
      return 1; // the caller initialises, then calls __cxa_guard_release
    }
    pthread_cond_wait(&g_guard_cv, &g_guard_mu);
  }
}

__attribute__((visibility("hidden"))) void __cxa_guard_release(int64_t* g) noexcept {
  uint8_t* b = guard_bytes(g);
  pthread_mutex_lock(&g_guard_mu);
  b[1] = 0;
  __atomic_store_n(&b[0], 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&g_guard_cv);
  pthread_mutex_unlock(&g_guard_mu);
}

__attribute__((visibility("hidden"))) void __cxa_guard_abort(int64_t* g) noexcept {
  uint8_t* b = guard_bytes(g);
  pthread_mutex_lock(&g_guard_mu);
  b[1] = 0;
  pthread_cond_broadcast(&g_guard_cv);
  pthread_mutex_unlock(&g_guard_mu);
}

__attribute__((visibility("hidden"))) void __cxa_pure_virtual() {
  fatal("pure virtual function called");
}

// pthread_atfork as libc_nonshared.a defines it (handlers tied to this
// library, so that unloading it unregisters them), here so that it sits in
// the start-up text with the constructors that call it: libc_nonshared's copy
// lands at the end of the text, on a page of its own that every process
// would fault in for it.
extern void* __dso_handle __attribute__((visibility("hidden")));
int __register_atfork(void (*prepare)(), void (*parent)(), void (*child)(), void* dso);
__attribute__((visibility("hidden"), section(".text.startup"))) int
pthread_atfork(void (*prepare)(), void (*parent)(), void (*child)()) noexcept {
  return __register_atfork(prepare, parent, child, __dso_handle);
}

} // extern "C"
