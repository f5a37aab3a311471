// Server side: one listener serving every scenario, thread per connection.
//
// A client run is a "session": its control connection creates it, every data connection
// names it in its Hello, and its counters (bytes, ops, verified payloads, threads' CPU)
// are what the server reports back at the end of the run.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "options.h"
#include "wire.h"

namespace xb {

// ps: the parameter shards, immutable after creation so any number of connections can
// send them concurrently straight from this memory (no copy, no lock).
struct ShardStore {
  std::vector<uint64_t> sizes; // per shard
  std::vector<uint64_t> keys;  // pattern key per shard
  std::vector<std::vector<uint8_t>> data;
};

struct Session {
  uint64_t id = 0;
  Hello hello{};
  uint64_t start_ns = 0;
  std::atomic<uint64_t> bytes_in{0}, bytes_out{0}, ops{0};
  std::atomic<uint64_t> conns_accepted{0}, conns_open{0};
  std::atomic<uint64_t> checked{0}, errors{0};
  std::atomic<uint64_t> thread_cpu_ns{0};
  std::unique_ptr<ShardStore> shards;

  void count_check(bool ok) {
    checked.fetch_add(1, std::memory_order_relaxed);
    if (!ok) errors.fetch_add(1, std::memory_order_relaxed);
  }
};

// Pattern key of ps shard `shard`; the client computes the same to verify fetches.
uint64_t shard_key(uint64_t seed, uint32_t shard);

// Hands an idle connection to the server's single parking thread, which closes it when the
// client does; the handler thread can then exit, so memory per held connection measures
// the transport rather than our thread stacks.
void park_connection(int fd, std::shared_ptr<Session> s);

int run_server(const Options& o);

} // namespace xb
