#include "verbs/cm.h"

#include "common/logsink.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fd_place.h"
#include "verbs/cm_addr.h"
#include "verbs/rc_link_impl.h"

namespace xp::verbs {
using namespace detail;

namespace {

enum class CtxKind : uint8_t { listener, active, passive };

// What an rdma_cm id's context points to.
struct Ctx {
  CtxKind kind;
  void* user = nullptr;
  RcLink* link = nullptr;
  rdma_cm_id* id = nullptr;
  RcLinkParams params;
  uint8_t app[kAppPrivateMax] = {};
  size_t app_len = 0;
  int timeout_ms = 3000;
};

} // namespace

struct CmListener {
  Ctx ctx;
};

struct CmRequest {
  rdma_cm_id* id = nullptr;
  WireRing peer{};
  sockaddr_storage peer_addr{};
  sockaddr_storage local_addr{}; // the address the request reached
  uint16_t local_port = 0;       // the listener's port the request reached
};

struct Cm::Impl {
  rdma_event_channel* ec = nullptr;
};

Cm* Cm::create() {
  if (!rdma_loaded()) return nullptr;
  // A fork child's own librdmacm (verbs/device.h); a copy that cannot be
  // loaded was said there.
  const FreshCm fresh = fresh_rdmacm_if_asked();
  auto* cm = new (std::nothrow) Cm();
  if (cm == nullptr) return nullptr;
  cm->impl_ = new (std::nothrow) Impl();
  if (cm->impl_ == nullptr || (cm->impl_->ec = rdmacm().create_event_channel()) == nullptr) {
    // In a fork child this is the end of its claim, which nothing else
    // says above debug (stream/fork_handover.h); the parent's start says
    // nothing new here.
    if (fresh != FreshCm::not_asked)
      XP_SLOG(XP_SLOG_INFO,
              "fork child: no rdma_cm event channel (%s; %s librdmacm): the accepted connection "
              "it would upgrade stays on TCP (shared_by_fork)",
              cm->impl_ == nullptr ? "out of memory" : strerror(errno),
              fresh == FreshCm::copy ? "its private copy of" : "the inherited");
    delete cm;
    return nullptr;
  }
  cm->impl_->ec->fd = place_high(cm->impl_->ec->fd);
  // next() must never block the engine thread.
  int fl = static_cast<int>(syscall(SYS_fcntl, cm->impl_->ec->fd, F_GETFL));
  syscall(SYS_fcntl, cm->impl_->ec->fd, F_SETFL, fl | O_NONBLOCK);
  // librdmacm asks the ibacm service for an IB route once per process, the
  // first time rdmacm().resolve_route() runs (acm.c ucma_ib_init: it opens
  // /run/ibacm.port and a socket, kept while ibacm runs): that would be in
  // the engine thread, behind the program's back (an fd made between its
  // close(n) and its next call takes the number n).  A route-only query
  // here, in the application's call that starts the engine, does it now.
  rdma_addrinfo hints{};
  hints.ai_family = AF_INET;
  rdma_addrinfo* rai = nullptr;
  if (rdmacm().getaddrinfo(nullptr, nullptr, &hints, &rai) == 0) rdmacm().freeaddrinfo(rai);
  return cm;
}

Cm::~Cm() {
  if (impl_) {
    if (impl_->ec) rdmacm().destroy_event_channel(impl_->ec);
    delete impl_;
  }
}

int Cm::fd() const {
  return impl_->ec->fd;
}

Status Cm::listen(const sockaddr* addr, void* user, CmListener** out, uint16_t* port,
                  bool af_only) {
  auto* l = new (std::nothrow) CmListener();
  if (l == nullptr) return Status::no_resource;
  l->ctx.kind = CtxKind::listener;
  l->ctx.user = user;
  if (rdmacm().create_id(impl_->ec, &l->ctx.id, &l->ctx, RDMA_PS_TCP) != 0) {
    delete l;
    return Status::io_error;
  }
  // An IPv6 listener takes IPv4 requests too unless af_only (a socket
  // with IPV6_V6ONLY: another socket may hold the port for IPv4).
  int afonly = af_only ? 1 : 0;
  if ((addr->sa_family == AF_INET6 &&
       rdmacm().set_option(l->ctx.id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &afonly,
                           sizeof afonly) != 0) ||
      rdmacm().bind_addr(l->ctx.id, const_cast<sockaddr*>(addr)) != 0 ||
      rdmacm().listen(l->ctx.id, 128) != 0) {
    Status st = errno == EADDRINUSE ? Status::unsupported : Status::io_error;
    rdmacm().destroy_id(l->ctx.id);
    delete l;
    return st;
  }
  *port = ntohs(rdmacm().get_src_port(l->ctx.id));
  *out = l;
  return Status::ok;
}

void Cm::close_listener(CmListener* l) {
  if (l == nullptr) return;
  rdmacm().destroy_id(l->ctx.id);
  delete l;
}

Status Cm::connect(const sockaddr* src, const sockaddr* dst, const RcLinkParams& p, const void* app,
                   size_t app_len, void* user) {
  if (app_len > kAppPrivateMax) return Status::invalid;
  auto* c = new (std::nothrow) Ctx();
  auto* link = c ? new (std::nothrow) RcLink() : nullptr;
  if (link == nullptr) {
    delete c;
    return Status::no_resource;
  }
  c->kind = CtxKind::active;
  c->user = user;
  c->link = link;
  c->params = p;
  c->timeout_ms = p.timeout_ms;
  if (app_len) memcpy(c->app, app, app_len);
  c->app_len = app_len;
  link->cm_ctx_ = c;
  if (rdmacm().create_id(impl_->ec, &c->id, c, RDMA_PS_TCP) != 0) {
    delete link;
    delete c;
    return Status::io_error;
  }
  XP_SLOG(XP_SLOG_DEBUG, "rdma_cm: connect %p to port %u", static_cast<void*>(c->id),
          dst->sa_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(dst)->sin_port)
          : dst->sa_family == AF_INET6
              ? ntohs(reinterpret_cast<const sockaddr_in6*>(dst)->sin6_port)
              : 0u);
  if (rdmacm().resolve_addr(c->id, const_cast<sockaddr*>(src), const_cast<sockaddr*>(dst),
                            p.timeout_ms) != 0) {
    XP_SLOG(XP_SLOG_DEBUG, "rdma_cm: resolve_addr failed: %s", strerror(errno));
    rdmacm().destroy_id(c->id);
    delete link;
    delete c;
    return Status::io_error;
  }
  return Status::ok;
}

Status Cm::accept(CmRequest* req, const RcLinkParams& p, const void* app, size_t app_len,
                  void* user) {
  auto* c = new (std::nothrow) Ctx();
  auto* link = c ? new (std::nothrow) RcLink() : nullptr;
  Status st = link ? Status::ok : Status::no_resource;
  if (st == Status::ok) st = link->setup(req->id, p);
  if (st == Status::ok) st = link->set_peer(&req->peer, sizeof req->peer);
  if (st == Status::ok) {
    c->kind = CtxKind::passive;
    c->user = user;
    c->link = link;
    c->id = req->id;
    link->cm_ctx_ = c;
    req->id->context = c;
    WireRing w;
    link->fill_wire(&w, app, app_len);
    rdma_conn_param cp{};
    cp.private_data = &w;
    cp.private_data_len = sizeof w;
    cp.rnr_retry_count = 7;
    cp.retry_count = 7;
    if (rdmacm().accept(req->id, &cp) != 0) st = Status::io_error;
  }
  XP_SLOG(XP_SLOG_DEBUG, "rdma_cm: accept %p: %s", static_cast<void*>(req->id), status_name(st));
  if (st != Status::ok) {
    if (link && link->id_) {
      rdmacm().reject(req->id, nullptr, 0);
      delete link; // setup() took the id: this destroys it
    } else {
      delete link;
      rdmacm().reject(req->id, nullptr, 0);
      rdmacm().destroy_id(req->id);
    }
    delete c;
  }
  delete req;
  return st;
}

void Cm::reject(CmRequest* req, const void* app, size_t app_len) {
  uint8_t buf[4 + kAppPrivateMax];
  memcpy(buf, &kRejectMagic, 4);
  if (app_len > kAppPrivateMax) app_len = kAppPrivateMax;
  if (app_len) memcpy(buf + 4, app, app_len);
  XP_SLOG(XP_SLOG_DEBUG, "rdma_cm: reject %p", static_cast<void*>(req->id));
  rdmacm().reject(req->id, buf, static_cast<uint8_t>(4 + app_len));
  rdmacm().destroy_id(req->id);
  delete req;
}

const sockaddr* Cm::request_peer(const CmRequest* req) const {
  return reinterpret_cast<const sockaddr*>(&req->peer_addr);
}

const sockaddr* Cm::request_local(const CmRequest* req) const {
  return reinterpret_cast<const sockaddr*>(&req->local_addr);
}

uint16_t Cm::request_local_port(const CmRequest* req) const {
  return req->local_port;
}

void Cm::destroy(Link* link) {
  auto* l = static_cast<RcLink*>(link);
  auto* c = static_cast<Ctx*>(l->cm_ctx_);
  delete l; // disconnects, destroys the QP and the id
  delete c;
}

namespace {

void fail_active(Ctx* c) {
  // setup() may not have run yet: then the link does not own the id.
  if (c->link->id_ == nullptr) rdmacm().destroy_id(c->id);
  delete c->link;
  delete c;
}

} // namespace

PassiveStep passive_step(int type) {
  switch (type) {
  case RDMA_CM_EVENT_ESTABLISHED:
    return PassiveStep::established;
  case RDMA_CM_EVENT_REJECTED:
  case RDMA_CM_EVENT_ADDR_ERROR:
  case RDMA_CM_EVENT_ROUTE_ERROR:
  case RDMA_CM_EVENT_CONNECT_ERROR:
  case RDMA_CM_EVENT_UNREACHABLE:
  case RDMA_CM_EVENT_DISCONNECTED:
  case RDMA_CM_EVENT_DEVICE_REMOVAL:
    return PassiveStep::ended;
  default:
    return PassiveStep::ignore;
  }
}

bool Cm::next(CmEvent* out) {
  while (true) {
    rdma_cm_event* ev = nullptr;
    if (rdmacm().get_cm_event(impl_->ec, &ev) != 0) return false; // EAGAIN: nothing pending
    // Copy what we need, then ack before acting: destroying an id waits
    // for its events to be acknowledged.
    rdma_cm_event_type type = ev->event;
    rdma_cm_id* id = ev->id;
    int status = ev->status;
    uint8_t priv[256];
    size_t plen = 0;
    if (ev->param.conn.private_data) {
      plen = ev->param.conn.private_data_len;
      if (plen > sizeof priv) plen = sizeof priv;
      memcpy(priv, ev->param.conn.private_data, plen);
    }
    auto* c = static_cast<Ctx*>(id->context);
    rdmacm().ack_cm_event(ev);
    XP_SLOG(XP_SLOG_DEBUG, "rdma_cm: %s (status %d) for %p", rdmacm().event_str(type), status,
            static_cast<void*>(id));

    *out = CmEvent{};
    out->status = status;
    if (c->kind == CtxKind::passive) {
      const PassiveStep step = passive_step(type);
      if (step == PassiveStep::ignore) continue;
      if (step == PassiveStep::established) c->link->connected_ = true;
      out->kind = step == PassiveStep::established ? CmEvent::Kind::established
                                                   : CmEvent::Kind::disconnected;
      out->user = c->user;
      out->link = c->link;
      return true;
    }
    switch (type) {
    case RDMA_CM_EVENT_CONNECT_REQUEST: {
      // id is the new connection's; its context is still the listener's.
      auto* req = new (std::nothrow) CmRequest();
      if (req == nullptr || plen < offsetof(WireRing, app)) {
        rdmacm().reject(id, nullptr, 0);
        rdmacm().destroy_id(id);
        delete req;
        continue;
      }
      req->id = id;
      req->local_port = ntohs(rdmacm().get_src_port(id));
      copy_cm_addr(rdma_get_peer_addr(id), &req->peer_addr);
      copy_cm_addr(rdma_get_local_addr(id), &req->local_addr);
      out->kind = CmEvent::Kind::request;
      out->user = c->user;
      out->req = req;
      // A descriptor we refuse (a ring beyond our maximum, ...): the layer
      // above answers with its own reject code, so that the client stays
      // on TCP knowing why rather than taking us for no listener.
      if (parse_wire_ring(priv, plen, &req->peer) != Status::ok) {
        req->peer = WireRing{};
        out->ring_refused = true;
        return true;
      }
      out->priv_len = req->peer.app_len;
      memcpy(out->priv, req->peer.app, out->priv_len);
      return true;
    }
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdmacm().resolve_route(id, c->timeout_ms) != 0) {
        out->kind = CmEvent::Kind::failed;
        out->user = c->user;
        fail_active(c);
        return true;
      }
      continue;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      Status st = c->link->setup(id, c->params);
      if (st == Status::ok) {
        WireRing w;
        c->link->fill_wire(&w, c->app, c->app_len);
        rdma_conn_param cp{};
        cp.private_data = &w;
        cp.private_data_len = sizeof w;
        cp.retry_count = 7;
        cp.rnr_retry_count = 7;
        if (rdmacm().connect(id, &cp) != 0) st = Status::io_error;
      }
      if (st != Status::ok) {
        out->kind = CmEvent::Kind::failed;
        out->user = c->user;
        fail_active(c);
        return true;
      }
      continue;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      if (c->kind == CtxKind::active) {
        if (c->link->set_peer(priv, plen) != Status::ok) {
          out->kind = CmEvent::Kind::failed;
          out->user = c->user;
          out->ring_refused = true;
          c->link->connected_ = true;
          fail_active(c);
          return true;
        }
        WireRing w{};
        (void)parse_wire_ring(priv, plen, &w); // set_peer() accepted it
        out->priv_len = w.app_len;
        memcpy(out->priv, w.app, out->priv_len);
        copy_cm_addr(rdma_get_local_addr(id), &out->local);
        copy_cm_addr(rdma_get_peer_addr(id), &out->peer);
      }
      c->link->connected_ = true;
      out->kind = CmEvent::Kind::established;
      out->user = c->user;
      out->link = c->link;
      return true;
    case RDMA_CM_EVENT_REJECTED:
      if (c->kind != CtxKind::active) continue;
      out->kind = CmEvent::Kind::rejected;
      out->user = c->user;
      out->consumer_reject = status == kRejConsumerDefined;
      if (plen >= 4 && memcmp(priv, &kRejectMagic, 4) == 0) {
        out->priv_len = plen - 4 < kAppPrivateMax ? plen - 4 : kAppPrivateMax;
        memcpy(out->priv, priv + 4, out->priv_len);
      } else {
        out->consumer_reject = false; // rdma_cm's own reject: nobody listens there
      }
      fail_active(c);
      return true;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      if (c->kind == CtxKind::active) {
        out->kind = CmEvent::Kind::failed;
        out->user = c->user;
        fail_active(c);
        return true;
      }
      continue;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      if (c->kind == CtxKind::listener) {
        if (type == RDMA_CM_EVENT_DISCONNECTED) continue;
        out->kind = CmEvent::Kind::listener_lost;
        out->user = c->user;
        return true;
      }
      out->kind = CmEvent::Kind::disconnected;
      out->user = c->user;
      out->link = c->link;
      return true;
    default:
      continue;
    }
  }
}

} // namespace xp::verbs
