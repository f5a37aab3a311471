// The fd table: any fd number, memory that follows use, lock-free readers
// racing writers without touching freed or recycled records.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "preload/fd_table.h"

using namespace xp;

namespace {
long rss_pages() {
  FILE* f = fopen("/proc/self/statm", "r");
  long size = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss;
}
} // namespace

TEST_CASE("fd table: install, lookup, remove") {
  SocketPool pool;
  FdTable t(&pool);
  CHECK(t.empty());
  CHECK(!t.get(3));
  SocketRecord* r = pool.alloc();
  REQUIRE(r != nullptr);
  r->fd = 3;
  REQUIRE(t.install(3, r));
  CHECK(!t.empty());
  {
    SocketRef s = t.get(3);
    REQUIRE(s);
    CHECK(s->fd == 3);
    CHECK(s->refs.load() == 2);
  }
  CHECK(r->refs.load() == 1);
  CHECK(t.remove(3));
  CHECK(!t.remove(3));
  CHECK(!t.get(3));
  CHECK(pool.live() == 0);
}

TEST_CASE("fd table: fd numbers far above 65536 and at the top of the range") {
  SocketPool pool;
  FdTable t(&pool);
  for (int fd : {0, 65535, 65536, 70000, 200000, 1 << 20, (1 << 30) + 7, 0x7fffffff}) {
    SocketRecord* r = pool.alloc();
    r->fd = fd;
    REQUIRE(t.install(fd, r));
    SocketRef s = t.get(fd);
    REQUIRE(s);
    CHECK(s->fd == fd);
  }
  CHECK(!t.get(-1));
  CHECK(!t.get(70001));
  int seen = 0;
  t.for_each_in(60000, 0x7fffffff, [&](int) { ++seen; });
  CHECK(seen == 7);
  t.for_each_in(0, 0x7fffffff, [&](int fd) { t.remove(fd); });
  CHECK(pool.live() == 0);
}

TEST_CASE("fd table: memory follows fds in use, not their numbers") {
  SocketPool pool;
  FdTable t(&pool);
  long before = rss_pages();
  // 1000 sparse fds spread over a billion numbers: a flat table would need GBs.
  for (int i = 0; i < 1000; ++i) {
    int fd = i * 1000003;
    SocketRecord* r = pool.alloc();
    REQUIRE(r);
    REQUIRE(t.install(fd, r));
  }
  long grown_kib = (rss_pages() - before) * 4;
  CHECK(grown_kib < 40 * 1024); // < 40 MiB (two 8 KiB pages per sparse fd, plus records)
  t.for_each_in(0, 0x7fffffff, [&](int fd) { t.remove(fd); });
}

TEST_CASE("fd table: dup shares one record; it is recycled with the last name") {
  SocketPool pool;
  FdTable t(&pool);
  SocketRecord* r = pool.alloc();
  t.install(5, r);
  r->refs.fetch_add(1);
  t.install(9, r); // what track::on_dup does
  CHECK(t.get(9).get() == t.get(5).get());
  t.remove(5);
  CHECK(pool.live() == 1);
  CHECK(t.get(9));
  t.remove(9);
  CHECK(pool.live() == 0);
}

TEST_CASE("fd table: install over a live entry releases the old record") {
  SocketPool pool;
  FdTable t(&pool);
  t.install(4, pool.alloc());
  t.install(4, pool.alloc());
  CHECK(pool.live() == 1);
  t.remove(4);
  CHECK(pool.live() == 0);
}

TEST_CASE("fd table: recycle hook runs once per record") {
  SocketPool pool;
  static int recycled;
  recycled = 0;
  pool.on_recycle = [](SocketRecord*) { ++recycled; };
  FdTable t(&pool);
  t.install(1, pool.alloc());
  t.install(2, pool.alloc());
  t.remove(1);
  t.remove(2);
  CHECK(recycled == 2);
}

TEST_CASE("fd table: readers racing close and re-create never see a wrong record") {
  SocketPool pool;
  FdTable t(&pool);
  constexpr int kFds = 64;
  std::atomic<bool> stop{false};
  std::atomic<long> mismatches{0}, hits{0};
  std::vector<std::thread> readers;
  for (int k = 0; k < 3; ++k) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (int fd = 0; fd < kFds; ++fd) {
          SocketRef s = t.get(fd);
          if (!s) continue;
          hits.fetch_add(1, std::memory_order_relaxed);
          if (s->fd != fd) mismatches.fetch_add(1);
        }
      }
    });
  }
  // Run until the readers really raced the writer (bounded in time).
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int round = 0;
       round < 20000 || (hits.load() < 200000 && std::chrono::steady_clock::now() < until);
       ++round) {
    int fd = round % kFds;
    if (round & 1) {
      t.remove(fd);
    } else {
      SocketRecord* r = pool.alloc();
      r->fd = fd;
      t.install(fd, r);
    }
  }
  stop = true;
  for (auto& th : readers)
    th.join();
  CHECK(mismatches.load() == 0);
  CHECK(hits.load() > 1000);
  t.for_each_in(0, kFds, [&](int fd) { t.remove(fd); });
  CHECK(pool.live() == 0);
  MESSAGE("concurrent lookups that found a record: " << hits.load());
}
