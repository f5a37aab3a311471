// Helpers of the standalone C ping-pong programs (bench/*-pingpong.c): a
// monotonic clock in microseconds and the comparison qsort needs to sort
// round-trip times for percentiles.
#pragma once
#include <time.h>

static inline double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static inline int cmp_double(const void* x, const void* y) {
  double d = *(const double*)x - *(const double*)y;
  return d < 0 ? -1 : d > 0;
}
