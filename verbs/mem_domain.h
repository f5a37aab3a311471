// One protection domain's side of the registered memory (alloc/domain.h):
// ibv_reg_mr with local access only for the arenas and the registration
// cache.  Internal to verbs/ (RcLink owns one per PD).
#pragma once
#include "alloc/domain.h"
#include "verbs/rdma_lib.h"

namespace xp::verbs::detail {

class PdMemory final : public alloc::DomainRegistrar {
public:
  // Right after ibv_alloc_pd: a slot for pd (registration happens on demand).
  void attach(ibv_pd* pd);
  // Before ibv_dealloc_pd, once no work request uses the keys.
  void detach();
  int slot() const { return slot_; }

  bool reg_local(void* addr, size_t len, uint32_t* lkey, void** handle) override;
  void dereg(void* handle) override;

private:
  ibv_pd* pd_ = nullptr;
  int slot_ = alloc::kNoDomain;
};

} // namespace xp::verbs::detail
