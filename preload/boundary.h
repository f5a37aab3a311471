// Helpers for the extern "C" boundary: export attribute, access to the real
// function with ENOSYS when libc lacks it.
#pragma once
#include <cerrno>

#include "preload/lifecycle.h"
#include "preload/real.h"
#include "preload/track.h"

#define XP_EXPORT extern "C" __attribute__((visibility("default")))

// Calls the real NAME, or fails with ENOSYS like a libc without it.
#define XP_REAL(name, ...)                                                                         \
  ({                                                                                               \
    auto xp_fn_ = ::xp::real::name();                                                              \
    xp_fn_ ? xp_fn_(__VA_ARGS__) : (errno = ENOSYS, -1);                                           \
  })
