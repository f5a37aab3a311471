// Memory registration with protection domains: the interface between the
// hooked allocator / registration cache (alloc/) and the verbs layer.
//
// verbs/ allocates one protection domain (PD) per RC link.  Right after
// ibv_alloc_pd it calls attach_domain() with a DomainRegistrar that wraps
// ibv_reg_mr/ibv_dereg_mr for that PD; before ibv_dealloc_pd it calls
// detach_domain(), which deregisters everything registered with it.
//
// Arena memory is registered per unit (a 4 MiB class chunk or a large
// group) and per domain, on demand: prepare_local() registers the unit
// holding a buffer (cold, local access only: arena memory is never remotely
// writable), after which lookup_local() finds its key without a lock or a
// system call for as long as the unit stays committed.  Registering at
// attach time instead (every committed chunk with every new PD) would make
// link set-up as slow as pinning all of the arenas, longer than an upgrade
// may take (docs/results/tuning.md); on demand, only memory that is sent
// from gets pinned, once per domain.
//
// The data path (stream/, flow/), for a send of [p, p+len) on a link with
// slot = link->mem_domain():
//   if (lookup_local(p, len, slot, &lkey))            post from p with lkey
//   else if (reg_cache::get(p, len, slot, &ref))      post with ref.lkey,
//                                                     reg_cache::put(ref) on completion
//   else { copy; if (len is large) prepare_local(p, len, slot); }
// (prepare_local may take milliseconds: call it where a blocked caller or
// the engine can afford it, e.g. after the copy; the next send of the same
// buffer is zero-copy.)  reg_cache::get() refuses arena memory: arena
// buffers go through lookup_local/prepare_local only.
//
// alloc/ never includes rdma-core headers: the registrar is the only way in.
#pragma once
#include <cstddef>
#include <cstdint>

namespace xp::alloc {

// Implemented by verbs/ for one PD; called on cold paths only (domain attach,
// arena growth, registration-cache misses), possibly with alloc's locks held,
// so it must not allocate large blocks (small mallocs are fine: they go to
// glibc) and must not call back into attach/detach.
class DomainRegistrar {
public:
  virtual ~DomainRegistrar() = default;
  // Register [addr, addr+len) for local access only (IBV_ACCESS_LOCAL_WRITE).
  // On success *lkey is the key for work requests and *handle what dereg()
  // needs (the ibv_mr).
  virtual bool reg_local(void* addr, size_t len, uint32_t* lkey, void** handle) = 0;
  virtual void dereg(void* handle) = 0;
};

// Slots for protection domains; a PD attached while all are taken gets
// kNoDomain and simply never sends zero-copy (lookups miss).
constexpr int kMaxDomains = 64;
constexpr int kNoDomain = -1;

// Attach a PD: a slot for it (no registration happens here).  Returns the
// slot, or kNoDomain when the slots are full or the arena hook is off.  r
// must stay valid until detach_domain(slot).
int attach_domain(DomainRegistrar* r);
// Deregister everything registered with the slot (arena chunks and cache
// entries), then free the slot.  Call before ibv_dealloc_pd; no work request
// using the slot's keys may still be outstanding.
void detach_domain(int slot);

// Hot path, lock-free, no system call: is [p, p+len) entirely inside one
// arena unit registered with this domain?  On true *lkey is its local key.
// False for slot kNoDomain, len 0, memory outside the arenas (then try the
// registration cache), a range crossing units, or a unit not registered yet
// (then prepare_local).  The caller must own the memory (an allocated block)
// until the work request completed.
bool lookup_local(const void* p, size_t len, int slot, uint32_t* lkey);

// Cold: registers the arena unit holding [p, p+len) with the slot's domain
// (ibv_reg_mr of up to the unit's size: 4 MiB for blocks up to 2 MiB, the
// whole group for larger ones; about 0.1 s per GB).  True when lookup_local
// will now succeed for the range; false for memory outside the arenas, a
// range crossing units, an unattached slot or a failed registration (the
// caller keeps copying).  Idempotent.
bool prepare_local(const void* p, size_t len, int slot);

} // namespace xp::alloc
