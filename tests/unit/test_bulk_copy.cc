// The data path's large-copy routine (common/bulk_copy.h): every candidate
// copies exactly its bytes at any size and alignment, the choice keeps
// memcpy unless another is decisively faster, and each mode sets what it says.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "common/bulk_copy.h"

using namespace xp;

namespace {
// Copies n bytes from src+so to dst+dso with fn; the guard bytes around the
// target must stay as they were.
void check_copy(CopyFn fn, size_t n, size_t so, size_t dso) {
  std::vector<uint8_t> src(n + 128), dst(n + 256, 0xee);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>(i * 131 + 7);
  fn(dst.data() + 64 + dso, src.data() + so, n);
  for (size_t i = 0; i < 64 + dso; ++i)
    REQUIRE(dst[i] == 0xee);
  REQUIRE(memcmp(dst.data() + 64 + dso, src.data() + so, n) == 0);
  for (size_t i = 64 + dso + n; i < dst.size(); ++i)
    REQUIRE(dst[i] == 0xee);
}
} // namespace

TEST_CASE("bulk copy: every candidate copies exactly its bytes, any size and alignment") {
  const CopyImpl* im = nullptr;
  size_t n = copy_impls(&im);
  REQUIRE(n >= 1);
  CHECK(strcmp(im[0].name, "libc") == 0);
  for (size_t k = 0; k < n; ++k) {
    CAPTURE(im[k].name);
    for (size_t len :
         {0,   1,   15,  16,   17,   31,   32,   33,   63,   64,         65,         127,
          128, 129, 255, 1023, 1024, 1025, 4095, 4096, 4097, 65536 + 24, 65536 + 100})
      for (size_t so : {0, 1, 8, 31})
        for (size_t dso : {0, 3, 16, 33}) {
          CAPTURE(len);
          CAPTURE(so);
          CAPTURE(dso);
          check_copy(im[k].fn, len, so, dso);
        }
  }
}

TEST_CASE("bulk copy: memcpy stays unless another routine is at least 1.5x faster") {
  {
    uint64_t ns[] = {1000, 800, 700}; // 1.43x: noise on a real CPU, keep memcpy
    CHECK(pick_copy(ns, 3) == 0);
  }
  {
    uint64_t ns[] = {1000, 600, 660}; // 1.67x: the fastest
    CHECK(pick_copy(ns, 3) == 1);
  }
  {
    uint64_t ns[] = {4000, 1000, 500}; // TCG: rep movsb 8x slower than 32-byte moves
    CHECK(pick_copy(ns, 3) == 2);
  }
  {
    uint64_t ns[] = {500, 1000, 2000}; // memcpy fastest
    CHECK(pick_copy(ns, 3) == 0);
  }
  {
    uint64_t ns[] = {700};
    CHECK(pick_copy(ns, 1) == 0);
  }
}

TEST_CASE("bulk copy: each mode sets the routine it names, and copies stay exact") {
  const CopyImpl* im = nullptr;
  size_t n = copy_impls(&im);
  std::vector<uint8_t> a(70000), b(70000);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<uint8_t>(i ^ (i >> 8));

  CopyChoice c = select_bulk_copy(CopyMode::libc);
  CHECK(strcmp(c.name, "libc") == 0);
  CHECK(strcmp(bulk_copy_name(), "libc") == 0);
  bulk_copy(b.data() + 1, a.data(), 69000);
  CHECK(memcmp(b.data() + 1, a.data(), 69000) == 0);

  c = select_bulk_copy(CopyMode::vector);
  CHECK(strcmp(c.name, im[n - 1].name) == 0);
  CHECK(strcmp(bulk_copy_name(), im[n - 1].name) == 0);
  bulk_copy(b.data() + 5, a.data() + 3, 68000);
  CHECK(memcmp(b.data() + 5, a.data() + 3, 68000) == 0);

  c = select_bulk_copy(CopyMode::automatic);
  bool known = false;
  for (size_t k = 0; k < n; ++k)
    known = known || strcmp(c.name, im[k].name) == 0;
  CHECK(known);
  CHECK(strcmp(bulk_copy_name(), c.name) == 0);
  CHECK(c.libc_ns > 0);
  CHECK(c.chosen_ns > 0);
  CHECK(c.chosen_ns <= c.libc_ns); // never chosen slower than memcpy
  bulk_copy(b.data(), a.data(), 65536);
  CHECK(memcmp(b.data(), a.data(), 65536) == 0);
  select_bulk_copy(CopyMode::libc); // leave the process as it started
}

// An empty copy may come with null pointers (an empty send, a buffer not
// mapped yet); memcpy must not see them (UBSan's nonnull check in
// `make test-sanitize` fails here without the guard).
TEST_CASE("bulk copy: a zero-length copy accepts null pointers") {
  bulk_copy(nullptr, nullptr, 0);
  uint8_t b[4] = {1, 2, 3, 4};
  bulk_copy(b, nullptr, 0);
  bulk_copy(nullptr, b, 0);
  CHECK(b[0] == 1);
}
