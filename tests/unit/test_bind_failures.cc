// Failed bindings per requester address (stream/bind_failures.h,
// docs/protocol.md §8): an address gets kLimit failed bindings per window,
// then its requests are refused until the window ends; others are not.
#include <doctest/doctest.h>

#include "stream/bind_failures.h"

using xp::stream::BindFailures;

TEST_CASE("bind failures: an address is blocked after its limit, for the window only") {
  static BindFailures f;
  const uint8_t forger4[4] = {10, 77, 0, 9}, other4[4] = {10, 77, 0, 1};
  const auto forger = xp::recover::ipv4_addr(forger4), other = xp::recover::ipv4_addr(other4);
  for (uint32_t i = 0; i + 1 < BindFailures::kLimit; ++i)
    f.note(forger, 1000 + i);
  CHECK_FALSE(f.blocked(forger, 2000));
  f.note(forger, 2000);
  CHECK(f.blocked(forger, 2000));
  CHECK(f.blocked(forger, 1000 + BindFailures::kWindowMs - 1));
  CHECK_FALSE(f.blocked(other, 2000));
  // Other addresses, however many, never take a counting address's slot.
  for (uint32_t i = 0; i < 4000; ++i) {
    const uint8_t a[4] = {10, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i), 7};
    f.note(xp::recover::ipv4_addr(a), 2000);
  }
  CHECK(f.blocked(forger, 2000));
  CHECK_FALSE(f.blocked(forger, 1000 + BindFailures::kWindowMs));
  // A new window starts from nothing.
  f.note(forger, 1000 + BindFailures::kWindowMs);
  CHECK_FALSE(f.blocked(forger, 1000 + BindFailures::kWindowMs));
}
