#include "verbs/mem_domain.h"

namespace xp::verbs::detail {

void PdMemory::attach(ibv_pd* pd) {
  pd_ = pd;
  slot_ = alloc::attach_domain(this);
}

void PdMemory::detach() {
  if (slot_ != alloc::kNoDomain) alloc::detach_domain(slot_);
  slot_ = alloc::kNoDomain;
}

bool PdMemory::reg_local(void* addr, size_t len, uint32_t* lkey, void** handle) {
  // Local access only: arena and cache memory is never remotely writable
  // (the receive ring is the only remote-writable region; protocol §7).
  ibv_mr* mr = ibv().reg_mr(pd_, addr, len, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) return false;
  *lkey = mr->lkey;
  *handle = mr;
  return true;
}

void PdMemory::dereg(void* handle) {
  ibv().dereg_mr(static_cast<ibv_mr*>(handle));
}

} // namespace xp::verbs::detail
