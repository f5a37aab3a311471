// Rendezvous state of one listening socket, in MAP_SHARED memory created at
// listen(): fork children that inherit the socket share it.  The process
// that holds the rdma_cm listener on the TCP port (owner) redirects
// requests for connections another process accepted to that process's own
// rdma_cm port (docs/protocol.md §1).
//
// The connections the processes publish are an open-addressed hash table
// of 4-tuple ids (recover::tuple_id): the home slot is a SipHash of the id
// under a key drawn when the share is made (a fork child inherits it; the
// tuples are the peers' choice), then linear probing within a bounded
// window, so that publishing, looking up and removing cost a bounded number
// of slots however many connections are published.  Removal leaves a
// tombstone, which probes step over and publishing reuses.
//
// Lock-free between processes: each slot's state word is the only
// synchronisation.  A writer claims a free or deleted slot by CAS to
// "being written", fills it, then releases it "valid"; only the process
// that published an entry deletes it.  The word's upper bits count the
// slot's claims, so a reader that read a slot's fields while it was
// deleted and claimed again sees the word change and ignores what it read.
// Within a process every call is under the engine's mutex.
#pragma once
#include <atomic>
#include <cstdint>
#include <sys/socket.h>

#include "recover/siphash.h"
#include "recover/upgrade_wire.h"

namespace xp::stream {

struct ListenShare {
  // Room for 10,000 connections per listening socket with the table still
  // under a third full, where a probe rarely goes past its home slot.
  // 32768 slots of 48 bytes: 1.5 MiB of address space per listening socket,
  // touched (and resident) only as connections are published.
  static constexpr uint32_t kSlots = 32768;
  // The longest probe: an entry is always within this many slots of its
  // home, so a lookup of a connection nobody published stops here at the
  // latest (tombstones never turn free again).  A publication that finds
  // no room within it fails (the table is full there).
  static constexpr uint32_t kWindow = 128;
  // Low two bits of a slot's state word; the rest counts its claims.
  enum Tag : uint32_t { kFree = 0, kWriting = 1, kValid = 2, kDeleted = 3 };
  struct Slot {
    std::atomic<uint32_t> state; // Tag | claims << 2; zero: never used
    int32_t pid;
    uint16_t port;                         // that process's private rdma_cm port
    uint8_t tuple[recover::kTupleIdBytes]; // recover::tuple_id of the connection
  };
  uint32_t magic;
  std::atomic<int32_t> owner_pid;
  std::atomic<int32_t> owner_state;        // 0 none, 1 listening, 2 could not listen
  sockaddr_storage addr;                   // where the rendezvous listens (port P, listen_addr.h)
  bool af_only;                            // addr is IPv6 and takes no IPv4 requests
  uint8_t hash_key[recover::kSipKeyBytes]; // share_init: the slots' SipHash key
  // Bumped by whoever changes a slot: a process whose pending requests may
  // be for a sibling's connection looks at the slots only when it moved.
  std::atomic<uint32_t> slots_gen;
  Slot slots[kSlots];
};

// A fresh (zero-filled) share's hash key, from getrandom.
void share_init(ListenShare* s);
// Publish tuple id key as (pid, port); false: no room within the key's
// window (the connection is not redirected to pid).
bool share_publish(ListenShare* s, const uint8_t key[recover::kTupleIdBytes], int32_t pid,
                   uint16_t port);
// Whether a process other than not_pid published key, and its port.
bool share_find(ListenShare* s, const uint8_t key[recover::kTupleIdBytes], int32_t not_pid,
                uint16_t* port);
// Delete pid's entry for key; false: it has none.
bool share_remove(ListenShare* s, const uint8_t key[recover::kTupleIdBytes], int32_t pid);
// The slot a probe for key starts at.
uint32_t share_home(const ListenShare* s, const uint8_t key[recover::kTupleIdBytes]);
// Slots this thread's calls above looked at, in all (the tests' measure of
// their cost).
uint64_t share_probes();

} // namespace xp::stream
