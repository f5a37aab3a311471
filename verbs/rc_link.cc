#include "verbs/rc_link.h"
#include "verbs/cm_addr.h"
#include "verbs/rc_link_impl.h"

#include "common/fd_place.h"

#include <arpa/inet.h>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

namespace xp::verbs {
using namespace detail;
namespace detail {

Status RcLink::setup(rdma_cm_id* id, const RcLinkParams& p) {
  id_ = id;
  if (p.ring_bytes < 4096 || p.ring_bytes % 64 != 0 || p.ring_bytes > sw::kRingMaxBytes)
    return Status::invalid;
  // One PD per connection keeps every remote-writable region reachable only
  // through this connection's QP (docs/protocol.md §7).
  // The device context's own fds (opened by rdma-core) and the completion
  // channel's go to the high range, once (see common/fd_place.h).
  id->verbs->cmd_fd = place_high(id->verbs->cmd_fd);
  id->verbs->async_fd = place_high(id->verbs->async_fd);
  pd_ = ibv().alloc_pd(id->verbs);
  if (pd_) mem_.attach(pd_);
  comp_ = pd_ ? ibv().create_comp_channel(id->verbs) : nullptr;
  if (comp_) {
    comp_->fd = place_high(comp_->fd);
    // Several threads may wait on it (the engine, blocked callers): taking
    // the event must never block the one that lost the race.
    long fl = syscall(SYS_fcntl, comp_->fd, F_GETFL);
    syscall(SYS_fcntl, comp_->fd, F_SETFL, fl | O_NONBLOCK);
  }
  // One per 64-byte ring slot (the most records the peer's credit allows
  // there) plus the spares the record channel may owe back (recv_spare).
  uint32_t recv_wrs = static_cast<uint32_t>(p.ring_bytes / 64) + sw::kRecvSpare;
  int cqe = static_cast<int>(recv_wrs + p.sq_depth);
  cq_ = comp_ ? ibv().create_cq(id->verbs, cqe, nullptr, comp_, 0) : nullptr;
  ring_size_ = p.ring_bytes;
  window_log2_ = p.stream_window ? static_cast<uint8_t>(std::bit_width(p.stream_window) - 1) : 0;
  ring_ = cq_ ? static_cast<uint8_t*>(map_zeroed(ring_size_)) : nullptr;
  ring_mr_ =
      ring_ ? ibv().reg_mr(pd_, ring_, ring_size_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
            : nullptr;
  if (ring_mr_ == nullptr) return Status::no_resource;
  ibv_qp_init_attr qa{};
  qa.send_cq = cq_;
  qa.recv_cq = cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = p.sq_depth;
  qa.cap.max_recv_wr = recv_wrs;
  // Two: a zero-copy record gathers its header from the staging mirror and
  // its payload from the application's buffer (rxe offers 32).
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = p.max_inline;
  if (rdmacm().create_qp(id, pd_, &qa) != 0) return Status::no_resource;
  qp_created_ = true;
  max_inline_ = qa.cap.max_inline_data;
  max_sge_ = qa.cap.max_send_sge;
  sq_depth_ = p.sq_depth;
  return post_recvs(recv_wrs) == Status::ok ? Status::ok : Status::no_resource;
}

void RcLink::fill_wire(WireRing* w, const void* app, size_t app_len) const {
  memset(w, 0, sizeof *w);
  w->magic = kWireMagic;
  w->version = kWireVersion;
  w->app_len = static_cast<uint8_t>(app_len);
  w->window_log2 = window_log2_;
  w->addr = reinterpret_cast<uint64_t>(ring_);
  w->rkey = ring_mr_->rkey;
  w->size = static_cast<uint32_t>(ring_size_);
  if (app_len) memcpy(w->app, app, app_len);
}

Status RcLink::set_peer(const void* priv, size_t len) {
  // The peer's descriptor, checked once (size capped at our own maximum).
  WireRing w{};
  if (parse_wire_ring(priv, len, &w) != Status::ok) return Status::invalid;
  peer_window_log2_ = w.window_log2;
  peer_solicits_ = w.version >= 5;
  peer_addr_ = w.addr;
  peer_rkey_ = w.rkey;
  peer_size_ = w.size;
  stage_ = static_cast<uint8_t*>(map_zeroed(peer_size_));
  stage_mr_ = stage_ ? ibv().reg_mr(pd_, stage_, peer_size_, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  return stage_mr_ ? Status::ok : Status::no_resource;
}

Status RcLink::post_write_imm(size_t off, size_t len, uint32_t imm, bool signaled, bool solicited,
                              uint64_t wr_id) {
  if (off + len > peer_size_) return Status::invalid;
  ibv_sge sge{reinterpret_cast<uint64_t>(stage_ + off), static_cast<uint32_t>(len),
              stage_mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | (solicited ? IBV_SEND_SOLICITED : 0) |
                  (len <= max_inline_ ? IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = peer_addr_ + off;
  wr.wr.rdma.rkey = peer_rkey_;
  ibv_send_wr* bad = nullptr;
  int r = ibv_post_send(id_->qp, &wr, &bad);
  if (r == ENOMEM) return Status::no_resource;
  return r == 0 ? Status::ok : Status::io_error;
}

Status RcLink::post_write_imm_gather(size_t off, size_t hdr_len, const void* payload, size_t len,
                                     uint32_t lkey, uint32_t imm, uint64_t wr_id) {
  if (max_sge_ < 2) return Status::unsupported;
  if (off + hdr_len + len > peer_size_) return Status::invalid;
  // Only header and payload are written: the padding up to the immediate's
  // length is never read by the receiver (docs/protocol.md §4).
  ibv_sge sge[2] = {
      {reinterpret_cast<uint64_t>(stage_ + off), static_cast<uint32_t>(hdr_len), stage_mr_->lkey},
      {reinterpret_cast<uint64_t>(payload), static_cast<uint32_t>(len), lkey}};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED; // data: docs/protocol.md §4
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = peer_addr_ + off;
  wr.wr.rdma.rkey = peer_rkey_;
  ibv_send_wr* bad = nullptr;
  int r = ibv_post_send(id_->qp, &wr, &bad);
  if (r == ENOMEM) return Status::no_resource;
  return r == 0 ? Status::ok : Status::io_error;
}

Status RcLink::post_recvs(uint32_t n) {
  // Zero-length receives (WRITE_WITH_IMM only needs a WR to consume),
  // chained 32 to a provider call.
  ibv_recv_wr wr[32];
  while (n > 0) {
    uint32_t k = n < 32 ? n : 32;
    for (uint32_t i = 0; i < k; ++i) {
      wr[i] = ibv_recv_wr{};
      wr[i].next = i + 1 < k ? &wr[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(id_->qp, wr, &bad) != 0) return Status::io_error;
    n -= k;
  }
  return Status::ok;
}

int RcLink::poll(Completion* out, int max) {
  ibv_wc wc[32];
  int n = ibv_poll_cq(cq_, max < 32 ? max : 32, wc);
  if (n < 0) {
    out[0] = Completion{Completion::Kind::error, 0, 0, -1};
    return 1;
  }
  for (int i = 0; i < n; ++i) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      out[i] = Completion{Completion::Kind::error, 0, wc[i].wr_id, static_cast<int>(wc[i].status)};
    } else if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      out[i] = Completion{Completion::Kind::recv_imm, ntohl(wc[i].imm_data), 0, 0};
    } else {
      out[i] = Completion{Completion::Kind::send_done, 0, wc[i].wr_id, 0};
    }
  }
  return n;
}

bool RcLink::ack_event() {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  if (ibv().get_cq_event(comp_, &cq, &ctx) != 0) return false; // EAGAIN: taken elsewhere
  ibv().ack_cq_events(cq, 1);
  return true;
}

RcLink::~RcLink() {
  if (id_ && connected_) rdmacm().disconnect(id_);
  if (qp_created_) rdmacm().destroy_qp(id_);
  if (stage_mr_) ibv().dereg_mr(stage_mr_);
  if (ring_mr_) ibv().dereg_mr(ring_mr_);
  if (cq_) ibv().destroy_cq(cq_);
  if (comp_) ibv().destroy_comp_channel(comp_);
  mem_.detach(); // the PD's registrations must go first
  if (pd_) ibv().dealloc_pd(pd_);
  if (stage_) munmap(stage_, peer_size_);
  if (ring_) munmap(ring_, ring_size_);
  if (id_) rdmacm().destroy_id(id_);
  if (ec_) rdmacm().destroy_event_channel(ec_);
}

} // namespace detail

Status rc_connect(const sockaddr* src, const sockaddr* dst, const RcLinkParams& p, const void* app,
                  size_t app_len, Link** out, RcConnected* info) {
  if (app_len > kAppPrivateMax) return Status::invalid;
  if (!rdma_loaded()) return Status::io_error; // as when rdma_cm cannot be used
  auto* link = new (std::nothrow) RcLink();
  if (link == nullptr) return Status::no_resource;
  link->ec_ = rdmacm().create_event_channel();
  Status st = Status::io_error;
  rdma_cm_event* ev = nullptr;
  if (link->ec_ && rdmacm().create_id(link->ec_, &link->id_, nullptr, RDMA_PS_TCP) == 0 &&
      rdmacm().resolve_addr(link->id_, const_cast<sockaddr*>(src), const_cast<sockaddr*>(dst),
                            p.timeout_ms) == 0) {
    st = wait_event(link->ec_, RDMA_CM_EVENT_ADDR_RESOLVED, p.timeout_ms, &ev);
  }
  if (st == Status::ok) {
    rdmacm().ack_cm_event(ev);
    st = rdmacm().resolve_route(link->id_, p.timeout_ms) == 0
             ? wait_event(link->ec_, RDMA_CM_EVENT_ROUTE_RESOLVED, p.timeout_ms, &ev)
             : Status::io_error;
  }
  if (st == Status::ok) {
    rdmacm().ack_cm_event(ev);
    rdma_cm_id* id = link->id_;
    link->id_ = nullptr; // setup() takes it back
    st = link->setup(id, p);
  }
  if (st == Status::ok) {
    WireRing w;
    link->fill_wire(&w, app, app_len);
    rdma_conn_param cp{};
    cp.private_data = &w;
    cp.private_data_len = sizeof w;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    st = rdmacm().connect(link->id_, &cp) == 0
             ? wait_event(link->ec_, RDMA_CM_EVENT_ESTABLISHED, p.timeout_ms, &ev)
             : Status::io_error;
  }
  if (st == Status::ok) {
    link->connected_ = true;
    st = link->set_peer(ev->param.conn.private_data, ev->param.conn.private_data_len);
    WireRing w{};
    if (st == Status::ok && info != nullptr &&
        parse_wire_ring(ev->param.conn.private_data, ev->param.conn.private_data_len, &w) ==
            Status::ok) {
      info->app_len = w.app_len;
      memcpy(info->app, w.app, w.app_len);
      copy_cm_addr(rdma_get_local_addr(link->id_), &info->local);
      copy_cm_addr(rdma_get_peer_addr(link->id_), &info->peer);
    }
    rdmacm().ack_cm_event(ev);
  }
  if (st != Status::ok) {
    delete link;
    return st;
  }
  *out = link;
  return Status::ok;
}

struct RcListener::Impl {
  rdma_event_channel* ec = nullptr;
  rdma_cm_id* id = nullptr;
};

Status RcListener::listen(const sockaddr* addr, int backlog, RcListener** out) {
  if (!rdma_loaded()) return Status::io_error; // as when rdma_cm cannot be used
  auto* l = new (std::nothrow) RcListener();
  if (l == nullptr || (l->impl_ = new (std::nothrow) Impl()) == nullptr) {
    delete l;
    return Status::no_resource;
  }
  l->impl_->ec = rdmacm().create_event_channel();
  if (l->impl_->ec == nullptr ||
      rdmacm().create_id(l->impl_->ec, &l->impl_->id, nullptr, RDMA_PS_TCP) != 0 ||
      rdmacm().bind_addr(l->impl_->id, const_cast<sockaddr*>(addr)) != 0 ||
      rdmacm().listen(l->impl_->id, backlog) != 0) {
    Status st = errno == EADDRINUSE ? Status::unsupported : Status::io_error;
    delete l;
    return st;
  }
  *out = l;
  return Status::ok;
}

Status RcListener::accept(const RcLinkParams& p, int timeout_ms, Link** out, void* app_out,
                          size_t* app_len) {
  rdma_cm_event* ev = nullptr;
  Status st = wait_event(impl_->ec, RDMA_CM_EVENT_CONNECT_REQUEST, timeout_ms, &ev);
  if (st != Status::ok) return st;
  rdma_cm_id* child = ev->id;
  WireRing peer{};
  size_t plen = ev->param.conn.private_data_len;
  if (ev->param.conn.private_data)
    memcpy(&peer, ev->param.conn.private_data, plen < sizeof peer ? plen : sizeof peer);
  rdmacm().ack_cm_event(ev);
  auto* link = new (std::nothrow) RcLink();
  if (link == nullptr) {
    rdmacm().reject(child, nullptr, 0);
    rdmacm().destroy_id(child);
    return Status::no_resource;
  }
  st = link->setup(child, p);
  if (st == Status::ok) st = link->set_peer(&peer, sizeof peer);
  if (st != Status::ok) {
    rdmacm().reject(child, nullptr, 0);
    delete link;
    return st;
  }
  WireRing w;
  link->fill_wire(&w, nullptr, 0);
  rdma_conn_param cp{};
  cp.private_data = &w;
  cp.private_data_len = sizeof w;
  cp.rnr_retry_count = 7;
  if (rdmacm().accept(child, &cp) != 0) {
    delete link;
    return Status::io_error;
  }
  st = wait_event(impl_->ec, RDMA_CM_EVENT_ESTABLISHED, p.timeout_ms, &ev);
  if (st != Status::ok) {
    delete link;
    return st;
  }
  rdmacm().ack_cm_event(ev);
  link->connected_ = true;
  if (app_out && app_len) {
    size_t n = peer.app_len < *app_len ? peer.app_len : *app_len;
    memcpy(app_out, peer.app, n);
    *app_len = n;
  }
  *out = link;
  return Status::ok;
}

int RcListener::fd() const {
  return impl_->ec->fd;
}

RcListener::~RcListener() {
  if (impl_) {
    if (impl_->id) rdmacm().destroy_id(impl_->id);
    if (impl_->ec) rdmacm().destroy_event_channel(impl_->ec);
    delete impl_;
  }
}

} // namespace xp::verbs
