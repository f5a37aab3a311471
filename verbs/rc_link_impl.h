// RcLink (a verbs::Link on one RC QP) and the rdma_cm private-data format,
// shared by the synchronous set-up (rc_link.cc) and the asynchronous one the
// engine uses (cm.cc).  Internal to verbs/.
#pragma once
#include <cstddef>
#include <cstdint>
#include <poll.h>
#include <sys/mman.h>

#include "common/switches.h"
#include "verbs/mem_domain.h"
#include "verbs/rc_link.h"
#include "verbs/rdma_lib.h"
#include "verbs/wire_ring.h"

namespace xp::verbs::detail {

inline void* map_zeroed(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Waits for the next rdma_cm event on ec, of the expected type.
inline Status wait_event(rdma_event_channel* ec, rdma_cm_event_type want, int timeout_ms,
                         rdma_cm_event** out) {
  pollfd pfd{ec->fd, POLLIN, 0};
  int r = ::poll(&pfd, 1, timeout_ms);
  if (r == 0) return Status::timed_out;
  if (r < 0) return Status::io_error;
  rdma_cm_event* ev = nullptr;
  if (rdmacm().get_cm_event(ec, &ev) != 0) return Status::io_error;
  if (ev->event != want) {
    Status st = ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_UNREACHABLE
                    ? Status::unsupported
                    : Status::io_error;
    rdmacm().ack_cm_event(ev);
    return st;
  }
  *out = ev;
  return Status::ok;
}

class RcLink final : public Link {
public:
  ~RcLink() override;
  Status setup(rdma_cm_id* id, const RcLinkParams& p);
  Status set_peer(const void* priv, size_t len);
  void fill_wire(WireRing* w, const void* app, size_t app_len) const;

  uint8_t* send_stage() override { return stage_; }
  size_t peer_ring_size() const override { return peer_size_; }
  const uint8_t* recv_ring() const override { return ring_; }
  size_t recv_ring_size() const override { return ring_size_; }
  uint32_t max_inline() const override { return max_inline_; }
  uint32_t send_queue_depth() const override { return sq_depth_; }
  Status post_write_imm(size_t off, size_t len, uint32_t imm, bool signaled, bool solicited,
                        uint64_t wr_id) override;
  Status post_write_imm_gather(size_t off, size_t hdr_len, const void* payload, size_t len,
                               uint32_t lkey, uint32_t imm, uint64_t wr_id) override;
  uint32_t max_send_sge() const override { return max_sge_; }
  Status post_recvs(uint32_t n) override;
  uint32_t recv_spare() const override { return sw::kRecvSpare; }
  int poll(Completion* out, int max) override;
  Status arm(bool solicited_only) override {
    return ibv_req_notify_cq(cq_, solicited_only ? 1 : 0) == 0 ? Status::ok : Status::io_error;
  }
  int wait_fd() const override { return comp_ ? comp_->fd : -1; }
  bool ack_event() override;
  int mem_domain() const override { return mem_.slot(); }
  size_t peer_stream_window() const override {
    return peer_window_log2_ ? size_t{1} << peer_window_log2_ : 0;
  }
  Status force_error() override; // rc_link_fault.cc
  bool peer_solicits() const override { return peer_solicits_; }

  rdma_cm_id* id_ = nullptr;
  rdma_event_channel* ec_ = nullptr; // owned by clients only
  bool connected_ = false;
  void* cm_ctx_ = nullptr; // cm.cc: the asynchronous set-up context of this id

private:
  ibv_pd* pd_ = nullptr;
  PdMemory mem_; // the arenas (and cached user buffers) registered with pd_
  ibv_comp_channel* comp_ = nullptr;
  ibv_cq* cq_ = nullptr;
  uint8_t* ring_ = nullptr;
  size_t ring_size_ = 0;
  ibv_mr* ring_mr_ = nullptr;
  uint8_t* stage_ = nullptr;
  size_t peer_size_ = 0;
  ibv_mr* stage_mr_ = nullptr;
  uint64_t peer_addr_ = 0;
  uint32_t peer_rkey_ = 0;
  uint32_t max_inline_ = 0, sq_depth_ = 0, max_sge_ = 1;
  uint8_t window_log2_ = 0, peer_window_log2_ = 0;
  bool qp_created_ = false;
  bool peer_solicits_ = false;
};

} // namespace xp::verbs::detail
