#include "verbs/probe/probe.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include "verbs/wire_ring.h"

namespace xp::verbs::probe {
namespace {

const char* gid_text(const ibv_gid& g, char* buf, size_t n) {
  if (inet_ntop(AF_INET6, g.raw, buf, static_cast<socklen_t>(n)) == nullptr) snprintf(buf, n, "?");
  return buf;
}

bool gid_zero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

const char* gid_type(unsigned t) {
  switch (t) {
  case IBV_GID_TYPE_IB:
    return "IB";
  case IBV_GID_TYPE_ROCE_V1:
    return "RoCE v1";
  case IBV_GID_TYPE_ROCE_V2:
    return "RoCE v2";
  }
  return "?";
}

const char* addr_text(const sockaddr* a, char* buf, size_t n) {
  const void* raw = nullptr;
  uint16_t port = 0;
  if (a != nullptr && a->sa_family == AF_INET) {
    raw = &reinterpret_cast<const sockaddr_in*>(a)->sin_addr;
    port = ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
  } else if (a != nullptr && a->sa_family == AF_INET6) {
    raw = &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
  }
  char ip[INET6_ADDRSTRLEN] = "?";
  if (raw) inet_ntop(a->sa_family, raw, ip, sizeof ip);
  if (port)
    snprintf(buf, n, a->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
  else
    snprintf(buf, n, "%s", ip);
  return buf;
}

// The next rdma_cm event within deadline (steady clock, ms); null on timeout.
rdma_cm_event* next_event(rdma_event_channel* ec, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return nullptr;
    pollfd p{ec->fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return nullptr;
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ec, &ev) == 0) return ev;
    if (errno != EAGAIN && errno != EINTR) return nullptr;
  }
}

} // namespace

int list_devices(FILE* out) {
  int n = 0, active = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    fprintf(out, "devices: none (no RDMA device: load a driver, e.g. rdma_rxe for Soft-RoCE)\n");
    if (list) ibv_free_device_list(list);
    return 0;
  }
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    ibv_context* ctx = ibv_open_device(list[i]);
    ibv_device_attr da{};
    if (ctx == nullptr || ibv_query_device(ctx, &da) != 0) {
      fprintf(out, "device %s: cannot open (%s)\n", name, strerror(errno));
      if (ctx) ibv_close_device(ctx);
      continue;
    }
    for (uint8_t port = 1; port <= da.phys_port_cnt; ++port) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, port, &pa) != 0) continue;
      active += pa.state == IBV_PORT_ACTIVE;
      fprintf(out, "device %s port %u: %s, %s", name, port, ibv_port_state_str(pa.state),
              pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand");
      const int gids = pa.gid_tbl_len < 16 ? pa.gid_tbl_len : 16;
      for (int g = 0; g < gids; ++g) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(g), &e, 0) != 0) continue;
        if (gid_zero(e.gid)) continue;
        char t[INET6_ADDRSTRLEN];
        fprintf(out, ", GID %d %s %s", g, gid_text(e.gid, t, sizeof t), gid_type(e.gid_type));
      }
      fputc('\n', out);
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return active;
}

namespace {

// Resolves dst's address from src into a fresh id on its own channel.
//
// Problem: the first rdma_cm resolution towards a neighbour the kernel has
// not resolved yet may never complete (seen on Linux 6.1 with rxe: the ARP
// reply arrives, rdma_cm is not woken), while a second one right after
// succeeds.  A program's connection never meets this (its TCP handshake
// resolved the neighbour first); a probe does.  Mechanism: attempts of one
// second each, each on a fresh id, until the deadline.
bool resolve_address(const sockaddr* src, const sockaddr* dst,
                     std::chrono::steady_clock::time_point deadline, rdma_event_channel** ec_out,
                     rdma_cm_id** id_out, FILE* out) {
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    const auto step = std::min(deadline, now + std::chrono::seconds(1));
    rdma_event_channel* ec = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    if (ec == nullptr || rdma_create_id(ec, &id, nullptr, RDMA_PS_TCP) != 0) {
      fprintf(out, "rdma_cm: unavailable (%s): no RDMA device or rdma_cm module (rdma_ucm)\n",
              strerror(errno));
      if (ec) rdma_destroy_event_channel(ec);
      return false;
    }
    const int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(step - now).count() + 1);
    if (rdma_resolve_addr(id, const_cast<sockaddr*>(src), const_cast<sockaddr*>(dst), ms) != 0) {
      fprintf(out, "route: none (%s): no RDMA device has an address that reaches it\n",
              strerror(errno));
      rdma_destroy_id(id);
      rdma_destroy_event_channel(ec);
      return false;
    }
    rdma_cm_event* ev = next_event(ec, step);
    const bool ok = ev != nullptr && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED;
    if (ev) rdma_ack_cm_event(ev);
    if (ok) {
      *ec_out = ec;
      *id_out = id;
      return true;
    }
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ec);
  }
}

} // namespace

Verdict ask(const sockaddr* src, const sockaddr* dst, int timeout_ms, FILE* out) {
  char dtext[80], stext[80];
  addr_text(dst, dtext, sizeof dtext);
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(timeout_ms);
  rdma_event_channel* ec = nullptr;
  rdma_cm_id* id = nullptr;
  if (!resolve_address(src, dst, deadline, &ec, &id, out)) {
    fprintf(out,
            "peer: no RDMA address resolution to %s within %d ms: no RDMA device here "
            "reaches it (or its host does not answer)\n",
            dtext, timeout_ms);
    return Verdict::no_rdma_path;
  }
  Verdict v = Verdict::no_rdma_path;
  const char* step = "route resolution";
  rdma_cm_event* ev = nullptr;
  addr_text(rdma_get_local_addr(id), stext, sizeof stext);
  fprintf(out, "route: %s -> %s via %s port %u\n", stext, dtext,
          id->verbs ? ibv_get_device_name(id->verbs->device) : "?", id->port_num);
  if (rdma_resolve_route(id, timeout_ms) != 0) {
    fprintf(out, "route: rdma_resolve_route failed (%s)\n", strerror(errno));
    goto done;
  }
  while ((ev = next_event(ec, deadline)) != nullptr) {
    const rdma_cm_event_type type = ev->event;
    const int status = ev->status;
    const void* priv = ev->param.conn.private_data;
    const uint8_t plen = ev->param.conn.private_data_len;
    uint32_t magic = 0;
    if (priv != nullptr && plen >= 4) memcpy(&magic, priv, 4);
    rdma_ack_cm_event(ev);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
      step = "connection request";
      if (id->route.num_paths > 0) {
        char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
        ibv_gid sg, dg;
        memcpy(sg.raw, &id->route.path_rec->sgid, 16);
        memcpy(dg.raw, &id->route.path_rec->dgid, 16);
        fprintf(out, "gids: %s -> %s\n", gid_text(sg, s, sizeof s), gid_text(dg, d, sizeof d));
      }
      // A well-formed ring descriptor whose request any xpress refuses at
      // once with its own reject ("XPRJ"): an empty application part.
      WireRing w{};
      w.magic = kWireMagic;
      w.version = kWireVersion;
      w.size = 4096;
      w.window_log2 = 16;
      rdma_conn_param p{};
      p.private_data = &w;
      p.private_data_len = offsetof(WireRing, app);
      p.qp_num = 1;
      p.retry_count = 3;
      p.rnr_retry_count = 3;
      if (rdma_connect(id, &p) != 0) {
        fprintf(out, "peer: rdma_connect failed (%s)\n", strerror(errno));
        goto done;
      }
    } else if (type == RDMA_CM_EVENT_REJECTED) {
      if (magic == kRejectMagic) {
        fprintf(out, "peer: xpress answers at %s (%.1f ms)\n", dtext, ms);
        v = Verdict::xpress_answers;
      } else if (status == kRejConsumerDefined) {
        fprintf(out, "peer: a program listens through rdma_cm at %s, but not xpress\n", dtext);
        v = Verdict::no_xpress;
      } else {
        fprintf(out,
                "peer: nobody listens through rdma_cm at %s (reject status %d, %.1f ms): the "
                "server does not run xpress, or has not accepted a connection on that port yet\n",
                dtext, status, ms);
        v = Verdict::no_xpress;
      }
      goto done;
    } else if (type == RDMA_CM_EVENT_ESTABLISHED || type == RDMA_CM_EVENT_CONNECT_RESPONSE) {
      fprintf(out, "peer: a program at %s accepted an rdma_cm connection: not xpress\n", dtext);
      rdma_disconnect(id);
      v = Verdict::no_xpress;
      goto done;
    } else {
      fprintf(out, "peer: %s failed at %s: %s (status %d)\n", dtext, step, rdma_event_str(type),
              status);
      if (type == RDMA_CM_EVENT_UNREACHABLE)
        fprintf(out, "      the host did not answer rdma_cm: no RDMA device there, or RoCE "
                     "(UDP 4791) blocked on the way\n");
      goto done;
    }
  }
  if (ev == nullptr)
    fprintf(out, "peer: no answer from %s within %d ms (%s)\n", dtext, timeout_ms, step);
done:
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ec);
  return v;
}

} // namespace xp::verbs::probe
