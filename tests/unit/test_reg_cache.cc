// Registration with protection domains (alloc/domain.h) and the
// registration cache (alloc/reg_cache.h), over a fake registrar that hands
// out keys and counts live registrations.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "alloc/arena.h"
#include "alloc/domain.h"
#include "alloc/heap.h"
#include "alloc/mem_stats.h"
#include "alloc/reg_cache.h"

using namespace xp::alloc;

namespace {

struct FakeRegistrar final : DomainRegistrar {
  struct Reg {
    uintptr_t addr;
    size_t len;
    uint32_t lkey;
  };
  std::mutex mu;
  std::map<void*, Reg> live;
  uint32_t next = 100;
  bool fail = false;
  int deregs = 0;

  bool reg_local(void* addr, size_t len, uint32_t* lkey, void** handle) override {
    std::lock_guard<std::mutex> g(mu);
    if (fail) return false;
    auto* h = new int(0);
    *lkey = next++;
    live[h] = Reg{reinterpret_cast<uintptr_t>(addr), len, *lkey};
    *handle = h;
    return true;
  }
  void dereg(void* handle) override {
    std::lock_guard<std::mutex> g(mu);
    REQUIRE(live.erase(handle) == 1);
    delete static_cast<int*>(handle);
    ++deregs;
  }
  // The registration whose range holds [p, p+n), its key; 0 if none.
  uint32_t key_for(const void* p, size_t n) {
    std::lock_guard<std::mutex> g(mu);
    auto a = reinterpret_cast<uintptr_t>(p);
    for (auto& [h, r] : live)
      if (r.addr <= a && a + n <= r.addr + r.len) return r.lkey;
    return 0;
  }
};

void* map_pages(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return p;
}

} // namespace

TEST_CASE("domains: arena units are registered on demand, once per domain, and found lock-free") {
  heap::configure_for_test(true, 64 * 1024);
  void* before = heap::malloc(300000); // committed before the domain exists
  REQUIRE(arena::contains(before));
  FakeRegistrar fake;
  int slot = attach_domain(&fake);
  REQUIRE(slot != kNoDomain);
  uint32_t lkey = 0;
  CHECK(fake.live.empty()); // attaching registers nothing
  CHECK_FALSE(lookup_local(before, 300000, slot, &lkey));
  REQUIRE(prepare_local(before, 300000, slot));
  CHECK(fake.live.size() == 1);
  CHECK(prepare_local(before, 300000, slot)); // idempotent
  CHECK(fake.live.size() == 1);
  CHECK(lookup_local(before, 300000, slot, &lkey));
  CHECK(lkey == fake.key_for(before, 300000));
  CHECK(mem_stats().arena_registered_bytes.load() >= arena::kChunk);

  // Class blocks and large groups alike; one registration covers the unit.
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i)
    blocks.push_back(heap::malloc(size_t(70000) * (i + 1)));
  void* large = heap::malloc(9 << 20);
  blocks.push_back(large);
  for (void* b : blocks) {
    size_t n = heap::malloc_usable_size(b);
    uint32_t k = 0;
    REQUIRE(prepare_local(b, n, slot));
    REQUIRE(lookup_local(b, n, slot, &k));
    CHECK(k == fake.key_for(b, n));
  }
  // Edges: an interior range, past the unit, other slots, length 0, glibc memory.
  CHECK(lookup_local(static_cast<char*>(large) + 5000000, 100, slot, &lkey));
  CHECK_FALSE(lookup_local(large, heap::malloc_usable_size(large) + arena::kChunk, slot, &lkey));
  CHECK_FALSE(prepare_local(large, heap::malloc_usable_size(large) + arena::kChunk, slot));
  CHECK_FALSE(lookup_local(before, 300000, slot + 1, &lkey));
  CHECK_FALSE(prepare_local(before, 300000, slot + 1)); // not attached
  CHECK_FALSE(lookup_local(before, 300000, kNoDomain, &lkey));
  CHECK_FALSE(lookup_local(before, 0, slot, &lkey));
  void* small = heap::malloc(100);
  CHECK_FALSE(lookup_local(small, 100, slot, &lkey));
  CHECK_FALSE(prepare_local(small, 100, slot));
  heap::free(small);

  // Detach: every registration goes, lookups miss.
  detach_domain(slot);
  CHECK(fake.live.empty());
  CHECK_FALSE(lookup_local(before, 300000, slot, &lkey));
  CHECK(mem_stats().arena_registered_bytes.load() == 0);
  for (void* b : blocks)
    heap::free(b);
  heap::free(before);
}

TEST_CASE("domains: a failed registration means copies, not errors; released chunks deregister") {
  heap::configure_for_test(true, 64 * 1024);
  FakeRegistrar fake;
  fake.fail = true;
  int slot = attach_domain(&fake);
  REQUIRE(slot != kNoDomain);
  void* big = heap::malloc(40 << 20);
  uint32_t lkey;
  CHECK_FALSE(prepare_local(big, 100, slot)); // the registrar failed: copy
  CHECK_FALSE(lookup_local(big, 100, slot, &lkey));
  heap::free(big);
  fake.fail = false;
  // Many registered large groups freed: beyond the retention bound they are
  // deregistered before their pages go back.
  std::vector<void*> v;
  for (int i = 0; i < 12; ++i) {
    v.push_back(heap::malloc(size_t(20 + i) << 20));
    REQUIRE(prepare_local(v.back(), 100, slot));
  }
  for (void* p : v)
    heap::free(p);
  CHECK(fake.deregs > 0);
  detach_domain(slot);
  CHECK(fake.live.empty());
}

TEST_CASE("reg_cache: miss registers, hit reuses, put releases, invalidation drops") {
  heap::configure_for_test(true, 64 * 1024);
  FakeRegistrar fake;
  int slot = attach_domain(&fake);
  REQUIRE(slot != kNoDomain);
  const size_t n = 1 << 20;
  char* buf = static_cast<char*>(map_pages(n));
  uint64_t hits = mem_stats().cache_hits.load(), misses = mem_stats().cache_misses.load();

  reg_cache::Ref a, b;
  REQUIRE(reg_cache::get(buf + 100, 5000, slot, &a));
  CHECK(a.lkey == fake.key_for(buf + 100, 5000));
  REQUIRE(reg_cache::get(buf + 100, 5000, slot, &b)); // same range: hit
  CHECK(b.lkey == a.lkey);
  CHECK(mem_stats().cache_misses.load() == misses + 1);
  CHECK(mem_stats().cache_hits.load() == hits + 1);
  CHECK(reg_cache::active());
  reg_cache::put(a);
  reg_cache::put(b);
  CHECK(fake.live.size() >= 1); // unreferenced entries stay cached

  // munmap (through the hook's calls): the entry goes before the memory does.
  size_t regs = fake.live.size();
  reg_cache::invalidate_begin(buf, n);
  reg_cache::invalidate_end();
  CHECK(fake.live.size() == regs - 1);
  CHECK(fake.key_for(buf + 100, 5000) == 0);

  // A referenced entry is hidden at once and deregistered by its last put.
  REQUIRE(reg_cache::get(buf, 4096, slot, &a));
  regs = fake.live.size();
  reg_cache::invalidate_begin(buf, 1);
  reg_cache::invalidate_end();
  CHECK(fake.live.size() == regs); // still in use by a work request
  reg_cache::Ref c;
  REQUIRE(reg_cache::get(buf, 4096, slot, &c)); // not found: registered anew
  CHECK(c.lkey != a.lkey);
  reg_cache::put(a);
  CHECK(fake.live.size() == regs); // a's registration gone, c's there
  reg_cache::put(c);

  // Not for the cache: arena memory, the brk heap, length 0, unknown slots.
  void* arena_block = heap::malloc(200000);
  CHECK_FALSE(reg_cache::get(arena_block, 1000, slot, &a));
  heap::free(arena_block);
  char* heap_top = static_cast<char*>(sbrk(65536)); // surely brk heap now
  REQUIRE(heap_top != reinterpret_cast<char*>(-1));
  CHECK_FALSE(reg_cache::get(heap_top + 4096, 100, slot, &a));
  sbrk(-65536);
  CHECK_FALSE(reg_cache::get(buf, 0, slot, &a));
  CHECK_FALSE(reg_cache::get(buf, 10, slot + 1, &a));

  detach_domain(slot);
  CHECK(fake.live.empty());
  munmap(buf, n);
}

TEST_CASE("reg_cache: bounded, least recently used evicted; referenced entries never") {
  heap::configure_for_test(true, 64 * 1024);
  FakeRegistrar fake;
  int slot = attach_domain(&fake);
  REQUIRE(slot != kNoDomain);
  reg_cache::set_limits(3, size_t{1} << 30);
  char* buf = static_cast<char*>(map_pages(8 * 65536));
  reg_cache::Ref r[8];
  for (int i = 0; i < 3; ++i) {
    REQUIRE(reg_cache::get(buf + i * 65536, 65536, slot, &r[i]));
    reg_cache::put(r[i]);
  }
  REQUIRE(reg_cache::get(buf, 65536, slot, &r[0])); // entry 0 is now the most recent
  reg_cache::put(r[0]);
  uint64_t ev = mem_stats().cache_evictions.load();
  REQUIRE(reg_cache::get(buf + 3 * 65536, 65536, slot, &r[3])); // evicts entry 1
  CHECK(mem_stats().cache_evictions.load() == ev + 1);
  CHECK(fake.key_for(buf + 65536, 65536) == 0);
  CHECK(fake.key_for(buf, 65536) != 0);
  // Everything referenced: a new range is registered for this use only.
  REQUIRE(reg_cache::get(buf, 65536, slot, &r[0]));
  REQUIRE(reg_cache::get(buf + 2 * 65536, 65536, slot, &r[2]));
  REQUIRE(reg_cache::get(buf + 5 * 65536, 65536, slot, &r[5]));
  CHECK(r[5].uncached != nullptr);
  size_t regs = fake.live.size();
  reg_cache::put(r[5]);
  CHECK(fake.live.size() == regs - 1);
  reg_cache::put(r[0]);
  reg_cache::put(r[2]);
  reg_cache::put(r[3]);
  reg_cache::set_limits(128, size_t{256} << 20);
  detach_domain(slot);
  CHECK(fake.live.empty());
  CHECK_FALSE(reg_cache::active());
  munmap(buf, 8 * 65536);
}
