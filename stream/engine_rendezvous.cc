// Rendezvous over rdma_cm (docs/protocol.md §1): the client's request names
// the TCP 4-tuple; the process holding that accepted connection answers,
// after a redirect when a sibling (fork child sharing the listening socket)
// holds it.  Runs on the engine thread with State::mu held.
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <new>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "recover/rendezvous_wire.h"
#include "stream/engine_internal.h"
#include "stream/reattach.h"
#include "stream/wake.h"

namespace xp::stream::engine {

void CmUserDrop::operator()(CmUser* u) const {
  // Still in its table (an event that ended it without the table's step):
  // out of it first, never a freed entry left there.
  (u->kind == CmUser::Kind::client ? g().inflight : g().accepting).remove(u);
  if (u->conn) u->conn->unref();
  delete u;
}

OwnedCmUser conn_user(CmUser::Kind k, Conn* c, uint16_t port, bool reattach) {
  auto* u = new (std::nothrow) CmUser{k, c, nullptr, port, reattach};
  if (u) c->ref();
  return OwnedCmUser(u);
}

namespace {

// The rdma_cm private data (recover/rendezvous_wire.h).
using ReqWire = recover::CmRequestWire;
using AcceptWire = recover::CmAcceptWire;
using RejectWire = recover::CmRejectWire;
using recover::rej_busy;
using recover::rej_redirect;
using recover::rej_unknown;
using recover::rej_version;
using recover::RejectCode;
constexpr uint8_t kWireVersion = recover::kRendezvousVersion;
constexpr uint8_t kKindRequest = recover::kCmRequest, kKindAccept = recover::kCmAccept,
                  kKindReattach = recover::kCmReattach;
static_assert(sizeof(ReqWire) == verbs::kAppPrivateMax);

verbs::RcLinkParams link_params(State& eng) {
  verbs::RcLinkParams lp;
  lp.ring_bytes = eng.p.ring_bytes;
  lp.sq_depth = 256;
  lp.max_inline = 64;
  lp.timeout_ms = static_cast<int>(eng.p.handshake_timeout_ms);
  lp.stream_window = eng.p.stream_window;
  return lp;
}

void set_port(sockaddr_storage* a, uint16_t port) {
  if (a->ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(port);
}

// The rdma_cm addresses of a client attempt: from the TCP client address
// to the server's, at port (IPv4 or IPv6 as the 4-tuple).
void cm_addrs(const Conn* c, uint16_t port, sockaddr_storage* src, sockaddr_storage* dst) {
  recover::to_sockaddr(recover::client_addr(c->tuple), 0, src);
  recover::to_sockaddr(recover::server_addr(c->tuple), port, dst);
}

void cm_connect(State& eng, Conn* c, uint16_t port) {
  XP_ASSERT_HELD(c->mu); // c->rv (stream/conn_rendezvous.h)
  if (eng.cm == nullptr) return fail(c, Reason::handshake_failed, "rdma_cm not running");
  ReqWire w{};
  w.kind = kKindRequest;
  w.version = kWireVersion;
  w.sid = 0;
  recover::tuple_key(c->tuple, w.key);
  memcpy(w.nonce, c->rv.nonce.b, 16);
  sockaddr_storage src, dst;
  cm_addrs(c, port, &src, &dst);
  OwnedCmUser u = conn_user(CmUser::Kind::client, c, port);
  if (!u) return fail(c, Reason::resources_exhausted);
  c->rv.cm_tried = true;
  eng.inflight.add(u.get());
  c->deadline_ms = now_ms() + eng.p.handshake_timeout_ms;
  Status st = eng.cm->connect(reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                              link_params(eng), &w, sizeof w, u.get());
  if (st != Status::ok) {
    u.reset(); // out of inflight too
    return fail(c, Reason::handshake_failed, "rdma_cm connect failed");
  }
  u.release(); // rdma_cm's until its last event (on_cm_event)
}

// An rdma_cm attempt ended (eng.mu held): the connections that waited for
// it try again (attach over its channel, or their own attempt).
void attempt_done(State& eng, CmUser* u, bool release = true) {
  eng.inflight.remove(u);
  auto& pk = eng.parked;
  if (pk.empty() || !release) return;
  {
    std::lock_guard<std::mutex> q(eng.qmu);
    for (Conn* c : pk)
      eng.start_queue.push_back(c); // the parked reference moves to the queue
  }
  pk.clear();
  kick();
}

void send_reject(State& eng, verbs::CmRequest* req, RejectCode code, uint16_t port = 0) {
  RejectWire r{code, 0, htons(port)};
  eng.cm->reject(req, &r, sizeof r);
}

// The requester's address (IPv4-mapped is IPv4).
recover::IpAddr requester(State& eng, verbs::CmRequest* req) {
  return recover::ip_addr(eng.cm->request_peer(req));
}

// Room for one more server channel from `from` (docs/protocol.md §8): the
// live and dying ones (their memory is still pinned) and the accepts under
// way count against XPRESS_SERVER_CHANNELS and, per requester address,
// XPRESS_SERVER_CHANNELS_PER_PEER.
bool server_channel_room(State& eng, const recover::IpAddr& from) {
  uint32_t all = 0, peer = 0;
  for (auto* v : {&eng.chans.live(), &eng.chans.dying()})
    for (const Channel* ch : *v) {
      if (ch->client_side) continue;
      ++all;
      peer += ch->peer_addr == from;
    }
  for (const CmUser* u : eng.accepting) {
    ++all;
    peer += u->from == from;
  }
  return all < eng.p.server_channels && peer < eng.p.server_channels_per_peer;
}

// Accept req for c as a server channel (u names it); false when refused
// (over a cap: rejected busy) or the accept failed.  u is the caller's to
// free then.
bool server_accept(State& eng, verbs::CmRequest* req, AcceptWire a, CmUser* u) {
  u->from = requester(eng, req);
  u->port = eng.cm->request_local_port(req);
  // The cap first: a request over it costs no randomness.
  if (!server_channel_room(eng, u->from)) {
    XP_SLOG(XP_SLOG_DEBUG, "rdma_cm request refused: server channel cap reached");
    send_reject(eng, req, rej_busy);
    return false;
  }
  // The channel's name (recover::ChannelBinding): the request's addresses
  // and a nonce drawn for this accept alone.
  if (!fresh_chan_nonce(a.chan) ||
      recover::channel_binding_from(eng.cm->request_peer(req), eng.cm->request_local(req), a.chan,
                                    &u->binding) != Status::ok) {
    send_reject(eng, req, rej_busy);
    return false;
  }
  if (eng.cm->accept(req, link_params(eng), &a, sizeof a, u) != Status::ok) return false;
  eng.accepting.add(u);
  return true;
}

// A server accept ended (established or not): out of the table, and its
// connection may take the next request (a channel-only one, a retry).
void server_accept_done(State& eng, CmUser* u) {
  eng.accepting.remove(u);
  std::lock_guard<std::mutex> l(u->conn->mu);
  u->conn->rv.accepting = false;
}

// A resumed stream's client wants a channel to us: accepted without
// binding anything (REATTACH over it proves who asks).
void accept_channel(State& eng, Conn* c, verbs::CmRequest* req) {
  std::lock_guard<std::mutex> l(c->mu);
  // One channel-only request per 4-tuple at a time (accepting).
  if (c->closed.load() || !c->resumed.load() || c->ch != nullptr || c->rv.accepting)
    return send_reject(eng, req, rej_busy);
  AcceptWire a{};
  a.kind = kKindAccept;
  a.version = kWireVersion;
  OwnedCmUser u = conn_user(CmUser::Kind::server, c, 0, true);
  if (!u) return send_reject(eng, req, rej_busy);
  c->rv.accepting = true;
  if (!server_accept(eng, req, a, u.get())) {
    c->rv.accepting = false;
    return;
  }
  u.release(); // rdma_cm's until its last event (on_cm_event)
}

void accept_for(State& eng, Conn* c, verbs::CmRequest* req, uint16_t sid,
                const recover::Nonce& nonce_c) {
  c->rv.heard_from_peer.store(true);
  std::lock_guard<std::mutex> l(c->mu);
  if (c->closed.load() || c->rv.accepting || c->sess.state() != recover::State::idle) {
    send_reject(eng, req, rej_busy);
    return;
  }
  // As an ATTACH over the cap of streams waiting for their client's first
  // proof (handle_attach): this one stays on TCP.
  if (!unproven_room(eng, requester(eng, req))) {
    send_reject(eng, req, rej_busy);
    fail(c, Reason::resources_exhausted, "streams waiting for their client's proof at the cap");
    return;
  }
  AcceptWire a{};
  a.kind = kKindAccept;
  a.version = kWireVersion;
  memcpy(a.nonce, c->rv.nonce.b, 16);
  OwnedCmUser u = conn_user(CmUser::Kind::server, c, 0);
  if (!u) return send_reject(eng, req, rej_busy);
  c->rv.accepting = true;
  c->rv.pending_sid = sid;
  c->rv.peer_nonce = nonce_c;
  if (!server_accept(eng, req, a, u.get())) {
    c->rv.accepting = false;
    return;
  }
  u.release(); // rdma_cm's until its last event (on_cm_event)
}

} // namespace

void send_reject_unknown(State& eng, verbs::CmRequest* req) {
  send_reject(eng, req, rej_unknown);
}

void send_reject_busy(State& eng, verbs::CmRequest* req) {
  send_reject(eng, req, rej_busy);
}

// A request we cannot answer yet waits; true when it was answered.
bool answer_request(State& eng, verbs::CmRequest* req, ListenShare* sh,
                    const uint8_t key[recover::kTupleIdBytes], uint16_t sid,
                    const recover::Nonce& nonce, bool reattach) {
  XP_ASSERT_HELD(eng.mu);
  if (Conn* c = find_by_key(eng, key)) {
    if (reattach)
      accept_channel(eng, c, req);
    else
      accept_for(eng, c, req, sid, nonce);
    return true;
  }
  if (reattach && !sh) { // our private port: nobody else to ask
    send_reject(eng, req, rej_unknown);
    return true;
  }
  if (recently_closed(eng, key)) {
    send_reject(eng, req, rej_unknown);
    return true;
  }
  uint16_t port = 0;
  if (sh && share_find(sh, key, getpid(), &port)) { // a sibling published it
    send_reject(eng, req, rej_redirect, port);
    return true;
  }
  return false;
}

namespace {

void bind_new_channel(Conn* c, Channel* ch, uint16_t sid, const recover::Nonce& peer_nonce) {
  std::lock_guard<std::mutex> l(c->mu);
  if (c->at_fork.handed_over &&
      !ch->client_side) { // our fork child holds it now (stream/fork_handover.h)
    const recover::Message m = recover::make_nak(sid, recover::NakCode::moved);
    std::lock_guard<std::mutex> chl(ch->mu);
    (void)ch->mux->channel().send_control(static_cast<flow::RecordType>(m.type), m.stream, m.seq,
                                          m.payload, m.len);
    return;
  }
  if (c->closed.load() || c->phase.load() != Phase::upgrading || c->ch != nullptr) return;
  if (!ch->client_side && !channel_serves(ch, c))
    return fail(c, Reason::handshake_failed, "rdma_cm requester is not the TCP client");
  Stream* st;
  {
    std::lock_guard<std::mutex> chl(ch->mu);
    st = ch->mux->open(sid, 0, 0);
    if (st) {
      st->owner = c;
      ch->conns.add(c);
      c->ref();
    }
  }
  if (st == nullptr) return fail(c, Reason::resources_exhausted);
  c->ch = ch;
  c->st = st;
  c->sid = sid;
  c->sess.set_channel(ch->binding);
  if (c->sess.adopt(sid, peer_nonce) != Status::ok)
    return fail(c, Reason::handshake_failed, "session cannot adopt the stream");
  advance(c);
}

} // namespace

bool channel_serves(const Channel* ch, const Conn* c) {
  return !ch->client_side && ch->peer_addr.known() &&
         ch->peer_addr == recover::client_addr(c->tuple);
}

bool recently_closed(State& eng, const uint8_t key[recover::kTupleIdBytes]) {
  XP_ASSERT_HELD(eng.mu);
  for (const auto& k : eng.closed_keys)
    if (memcmp(k.data(), key, k.size()) == 0) return true;
  return false;
}

void forget_attempts(State& eng, Conn* c) {
  XP_ASSERT_HELD(eng.mu);
  // An attempt under way stays in inflight until its rdma_cm event (which
  // releases the connections parked behind it): its answer is what the
  // next connection to that host waits for (the negative cache learns
  // from a refusal; a channel it builds serves them).
  for (CmUser* u : eng.inflight)
    if (u->conn == c) return;
  // Closed between its first attempt and the retry: nothing will release
  // the connections parked behind it.  (retry_at_ms: the tick writes it
  // under Conn::mu alone.)
  bool retrying;
  {
    std::lock_guard<std::mutex> l(c->mu);
    retrying = c->rv.retry_at_ms != 0;
  }
  if (retrying && !eng.parked.empty()) {
    std::lock_guard<std::mutex> q(eng.qmu);
    for (Conn* p : eng.parked)
      eng.start_queue.push_back(p);
    eng.parked.clear();
    kick();
  }
}

Channel* make_channel(State& eng, verbs::Link* link, bool client_side) {
  std::unique_ptr<Channel> ch(new (std::nothrow) Channel());
  if (ch == nullptr) return nullptr;
  ch->link = link;
  ch->client_side = client_side;
  MuxParams mp;
  mp.max_streams = eng.p.streams_per_channel;
  mp.stream_window = eng.p.stream_window;
  mp.cork_max = eng.p.autocork_max;
  ch->mux.reset(new (std::nothrow) Mux(link, mp));
  if (ch->mux == nullptr) return nullptr;
  ch->mux->set_control_handler(on_control_record, ch.get());
  Channel* c = eng.chans.adopt(std::move(ch));
  watch_channel(c);
  return c;
}

bool cm_reattach(State& eng, Conn* c, uint16_t port) {
  if (eng.cm == nullptr) return false; // rdma_cm not running (no device, unit tests)
  ReqWire w{};
  w.kind = kKindReattach;
  w.version = kWireVersion;
  recover::tuple_key(c->tuple, w.key);
  sockaddr_storage src, dst;
  cm_addrs(c, port, &src, &dst);
  OwnedCmUser u = conn_user(CmUser::Kind::client, c, port, true);
  if (!u) return false;
  eng.inflight.add(u.get());
  Status st = eng.cm->connect(reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                              link_params(eng), &w, sizeof w, u.get());
  if (st != Status::ok) {
    attempt_done(eng, u.get());
    return false;
  }
  u.release(); // rdma_cm's until its last event (on_cm_event)
  return true;
}

namespace {

// c's ATTACH over its client's channel ch (c->mu held); false when ch has
// no room for another stream.
bool attach_over(State& eng, Conn* c, Channel* ch, uint64_t now) {
  XP_ASSERT_HELD(c->mu);
  std::lock_guard<std::mutex> chl(ch->mu);
  uint32_t id = 0;
  // Failed since the caller looked (a data call's progress): its streams
  // were collected already, and one bound now would wait there for nothing.
  if (ch->failed.load()) return false;
  if (!ch->mux->fresh_id(&id) || !bind_stream(c, ch, id)) return false;
  recover::Message m;
  c->sess.set_channel(ch->binding);
  if (c->sess.start_attach(id, &m) == Status::ok) {
    ch->mux->channel().send_control(static_cast<flow::RecordType>(m.type), m.stream, m.seq,
                                    m.payload, m.len);
    XP_SLOG(XP_SLOG_TRACE, "fd %d: ATTACH as stream %u", c->sock(), id);
  }
  c->deadline_ms = now + eng.p.handshake_timeout_ms;
  return true;
}

// A redirect names the process that holds c by its private port: a channel
// this process has to that port already carries c's ATTACH, as a channel
// to the same host does in start_client, instead of a new rdma_cm
// connection for every connection a multi-process server accepts
// (docs/protocol.md §1).  Only a channel from c's own client address (the
// server binds no stream whose client is another requester, §2).  If it is
// refused or lost, c connects to the port after all (Conn::redirect_attach).
// False: no such channel with room.
bool attach_at_port(State& eng, Conn* c, uint16_t port) {
  XP_ASSERT_HELD(eng.mu);
  XP_ASSERT_HELD(c->mu);
  const recover::State st = c->sess.state();
  if (c->ch != nullptr || (st != recover::State::idle && st != recover::State::refused))
    return false;
  const recover::IpAddr server = recover::server_addr(c->tuple);
  const recover::IpAddr client = recover::client_addr(c->tuple);
  for (Channel* ch : eng.chans.live())
    if (ch->client_side && !ch->failed.load() && ch->dying_since_ms == 0 && ch->cm_port == port &&
        ch->peer_addr == server && ch->local_addr == client && attach_over(eng, c, ch, now_ms())) {
      c->rv.redirect_attach = true;
      return true;
    }
  return false;
}

} // namespace

void start_client(State& eng, Conn* c) {
  XP_ASSERT_HELD(eng.mu);
  if (c->resumed.load()) return reattach::start(c); // back to RDMA (stream/reattach.cc)
  std::lock_guard<std::mutex> l(c->mu);
  if (c->closed.load() || c->phase.load() != Phase::upgrading ||
      c->sess.state() == recover::State::failed)
    return;
  uint64_t now = now_ms();
  if (eng.negative.cached(recover::server_addr(c->tuple), c->tuple.server_port, now))
    return fail(c, Reason::peer_not_accelerated);
  // A channel to the same server address: attach over it, first one to the
  // same port (most likely the same process), then any (one process often
  // listens on several ports; the server refuses at once if it is not the
  // process that accepted this connection, and rdma_cm finds that one).
  // docs/protocol.md §8: a channel to another port may reach another
  // user's xpress service (open).
  // With XPRESS_SLEEP_ON_CHANNEL, each thread's streams go to its lane's
  // channel (Conn::lane): a new channel while the peer has fewer than
  // XPRESS_CHANNELS_PER_PEER, then any, its own lane's first.
  const uint32_t lanes = eng.p.channels_per_peer;
  const bool by_lane = eng.p.sleep_on_channel; // else: any channel, a new one when none
  const uint32_t lane = by_lane ? c->rv.lane % lanes : 0;
  std::vector<Channel*> order;
  bool have_lane = false;
  for (int pass = 0; pass < 2; ++pass)
    for (Channel* ch : eng.chans.live())
      if (ch->client_side && !ch->failed.load() && ch->dying_since_ms == 0 &&
          ch->peer_addr == recover::server_addr(c->tuple) &&
          (ch->peer_port == c->tuple.server_port) == (pass == 0)) {
        order.push_back(ch);
        have_lane |= !by_lane || ch->lane == lane;
      }
  const bool own_channel = !have_lane && order.size() < lanes && !c->rv.attach_refused;
  if (!own_channel) {
    std::stable_partition(order.begin(), order.end(),
                          [&](const Channel* ch) { return ch->lane == lane; });
    for (Channel* ch : order) {
      if (c->rv.attach_refused) break;
      if (attach_over(eng, c, ch, now)) return;
    }
  }
  // Admission: attempts under way to this host count against
  // XPRESS_CHANNELS_PER_PEER like its channels, so a burst of connects sets
  // up at most that many; beyond it a connection waits for an attempt to
  // end (then attaches over the channel it built), and stays on TCP only
  // when the channels are full and nothing is under way.
  int attempts = 0;
  for (const CmUser* u : eng.inflight) // (a closed connection's too: forget_attempts)
    attempts += recover::server_addr(u->conn->tuple) == recover::server_addr(c->tuple);
  const size_t chans = c->rv.attach_refused ? 0 : order.size(); // refused: rdma_cm, its own
  if (chans + static_cast<size_t>(attempts) >= lanes) {
    if (attempts == 0) return fail(c, Reason::resources_exhausted);
    c->deadline_ms = now + eng.p.handshake_timeout_ms;
    c->ref();
    eng.parked.push_back(c);
    return;
  }
  // Another connection found nobody listening there a moment ago: this
  // one's first attempt waits for that retry's time and counts as the retry
  // (stream/negative_cache.h).  It may wait behind an attempt once more then.
  if (c->rv.no_listener_tries == 0) {
    uint64_t at = eng.negative.hold_until(recover::server_addr(c->tuple), c->tuple.server_port, now,
                                          eng.p.negative_cache_ms);
    if (at != 0) {
      ++c->rv.no_listener_tries;
      c->rv.retry_at_ms = at;
      c->rv.parked_once = false;
      return;
    }
  }
  // Another connection to this host is setting a channel up: wait for it
  // (once), then attach over it.
  if (!c->rv.parked_once && !c->rv.attach_refused) {
    for (CmUser* u : eng.inflight) {
      if ((!by_lane || u->conn->rv.lane % lanes == lane) &&
          recover::server_addr(u->conn->tuple) == recover::server_addr(c->tuple)) {
        c->rv.parked_once = true;
        c->deadline_ms = now_ms() + eng.p.handshake_timeout_ms;
        c->ref();
        eng.parked.push_back(c);
        return;
      }
    }
  }
  cm_connect(eng, c, c->tuple.server_port);
}

namespace {

// Publish c in its listening socket's table as ours, at our private port.
void publish(State& eng, ListenShare* sh, Conn* c) {
  XP_ASSERT_HELD(eng.mu); // slot_written (stream/conn_rendezvous.h)
  if (c->rv.share != sh || c->rv.slot_written || c->closed.load()) return;
  uint8_t key[recover::kTupleIdBytes];
  recover::tuple_id(c->tuple, key);
  if (share_publish(sh, key, getpid(), eng.private_port)) {
    c->rv.slot_written = true;
    return;
  }
  // Its rdma_cm request then waits at the owner for its deadline, and the
  // connection stays on TCP.
  static bool said = false;
  if (!said)
    XP_SLOG(XP_SLOG_INFO,
            "fd %d: the listening socket's table of published connections is full here: "
            "not redirected (later ones not logged)",
            c->sock());
  said = true;
}

} // namespace

void serve_share(State& eng, ListenShare* sh, Conn* c) {
  XP_ASSERT_HELD(eng.mu);
  const int32_t me = getpid();
  bool known = false;
  for (ListenShare* k : eng.shares)
    known |= k == sh;
  if (!known) eng.shares.push_back(sh);
  int32_t owner = sh->owner_pid.load();
  if (owner != me && (owner == 0 || (kill(owner, 0) != 0 && errno == ESRCH))) {
    if (sh->owner_pid.compare_exchange_strong(owner, me)) {
      std::unique_ptr<CmUser> u(new (std::nothrow)
                                    CmUser{CmUser::Kind::listener_share, nullptr, sh, 0});
      verbs::CmListener* l = nullptr;
      uint16_t port = 0;
      if (u && eng.cm->listen(reinterpret_cast<sockaddr*>(&sh->addr), u.get(), &l, &port,
                              sh->af_only) == Status::ok) {
        eng.listeners.push_back(OwnedListener{sh, l, u.release()});
        sh->owner_state.store(1);
      } else {
        sh->owner_state.store(2);
      }
    }
    owner = sh->owner_pid.load();
  }
  // Publish the connection: the owner redirects requests to us, and a
  // sibling that gets an ATTACH for it refuses it at once.
  if (owner != me && eng.private_l == nullptr) {
    // The share's address at an ephemeral port (a dual-stack `::` takes
    // both families here too).
    sockaddr_storage a = sh->addr;
    set_port(&a, 0);
    if (eng.cm->listen(reinterpret_cast<sockaddr*>(&a), &eng.private_user, &eng.private_l,
                       &eng.private_port, sh->af_only) != Status::ok) {
      eng.publish_backlog |= c != nullptr;
      return;
    }
    set_port(&a, eng.private_port);
    eng.private_addr = a;
    eng.private_af_only = sh->af_only;
  }
  if (eng.publish_backlog) {
    // Once, after a failed listen: those connections wait for this.
    eng.publish_backlog = false;
    for (Conn* k : eng.conns)
      if (k->rv.share != nullptr) serve_share(eng, k->rv.share, k);
  }
  if (c) publish(eng, sh, c);
}

void on_cm_event(State& eng, const verbs::CmEvent& ev) {
  XP_ASSERT_HELD(eng.mu);
  using K = verbs::CmEvent::Kind;
  auto* u = static_cast<CmUser*>(ev.user);
  switch (ev.kind) {
  case K::request: {
    if (ev.ring_refused) { // verbs/wire_ring.h: e.g. a ring beyond our maximum
      XP_SLOG(XP_SLOG_INFO, "rdma_cm request refused: its ring descriptor is out of bounds");
      return send_reject(eng, ev.req, rej_version);
    }
    ReqWire w{};
    if (recover::parse_cm_request(ev.priv, ev.priv_len, &w) != Status::ok)
      return send_reject(eng, ev.req, rej_version);
    // The requester must be the TCP client it names (docs/protocol.md §2):
    // anyone else is refused before anything is looked up.
    const recover::IpAddr from = requester(eng, ev.req);
    recover::TcpTuple t;
    if (recover::request_tuple(w, eng.cm->request_peer(ev.req), eng.cm->request_local(ev.req),
                               &t) != Status::ok) {
      char a[INET6_ADDRSTRLEN] = "?";
      if (from.known()) inet_ntop(from.family == 6 ? AF_INET6 : AF_INET, from.b, a, sizeof a);
      XP_SLOG(XP_SLOG_INFO, "rdma_cm request from %s names another client address: refused", a);
      return send_reject(eng, ev.req, rej_unknown);
    }
    uint8_t key[recover::kTupleIdBytes];
    recover::tuple_id(t, key);
    if (eng.bind_failures.blocked(from, now_ms())) { // stream/bind_failures.h
      XP_SLOG(XP_SLOG_DEBUG, "rdma_cm request refused: too many failed bindings from its address");
      return send_reject(eng, ev.req, rej_busy);
    }
    recover::Nonce n;
    memcpy(n.b, w.nonce, 16);
    const bool re = w.kind == kKindReattach;
    ListenShare* sh = u && u->kind == CmUser::Kind::listener_share ? u->share : nullptr;
    if (answer_request(eng, ev.req, sh, key, w.sid, n, re)) return;
    PendingReq p{};
    p.reattach = re;
    p.req = ev.req;
    p.share = sh;
    memcpy(p.key, key, sizeof key);
    p.sid = w.sid;
    p.nonce_c = n;
    p.deadline_ms = now_ms() + eng.p.handshake_timeout_ms;
    p.from = from;
    if (!queue_request(eng, p)) {
      XP_SLOG(XP_SLOG_DEBUG, "rdma_cm request refused: too many waiting");
      send_reject(eng, ev.req, rej_busy);
    }
    return;
  }
  case K::established: {
    OwnedCmUser own(u); // the operation ends here
    const bool client = u->kind == CmUser::Kind::client;
    Conn* c = u->conn;
    if (client) {
      attempt_done(eng, u);
      eng.negative.forget_refused(recover::server_addr(c->tuple), c->tuple.server_port);
    } else {
      server_accept_done(eng, u);
    }
    // Every binding over the channel names it (docs/protocol.md §2): the
    // server made its name at the accept; the client makes it from its own
    // rdma_cm id and the accept, and sets up nothing from an accept it
    // does not understand.
    recover::ChannelBinding binding = u->binding;
    recover::Nonce accept_nonce{};
    uint8_t chan[recover::kChanNonceBytes];
    const bool named =
        !client || (recover::parse_cm_accept(ev.priv, ev.priv_len, &accept_nonce, chan) &&
                    recover::channel_binding_from(reinterpret_cast<const sockaddr*>(&ev.local),
                                                  reinterpret_cast<const sockaddr*>(&ev.peer), chan,
                                                  &binding) == Status::ok);
    Channel* ch = named ? make_channel(eng, ev.link, client) : nullptr;
    if (ch == nullptr) {
      eng.cm->destroy(ev.link);
    } else {
      ch->cm_port = u->port;
      ch->binding = binding;
      if (client) {
        ch->peer_addr = recover::server_addr(c->tuple);
        ch->peer_port = c->tuple.server_port;
        ch->local_addr = recover::client_addr(c->tuple);
        ch->lane = c->rv.lane % eng.p.channels_per_peer;
      } else {
        ch->peer_addr = u->from; // the per-peer cap counts it
      }
    }
    if (u->reattach) {
      // A channel for a resumed stream: the stream binds over it with
      // REATTACH (client); the server waits for that.
      if (client) reattach::over_channel(c, ch);
      return;
    }
    if (ch == nullptr) {
      if (named) return;
      std::lock_guard<std::mutex> l(c->mu);
      if (!c->closed.load() && c->phase.load() == Phase::upgrading && c->ch == nullptr)
        fail(c, Reason::handshake_failed, "the server's rdma_cm accept was not understood");
      return;
    }
    if (client) {
      bind_new_channel(c, ch, 0, accept_nonce);
    } else {
      bind_new_channel(c, ch, c->rv.pending_sid, c->rv.peer_nonce);
    }
    return;
  }
  case K::rejected:
  case K::failed: {
    OwnedCmUser own(u); // the operation ends here
    if (u->kind == CmUser::Kind::server) return server_accept_done(eng, u); // nothing more to do
    Conn* c = u->conn;
    const recover::CmReject r = recover::parse_cm_reject(
        ev.priv, ev.priv_len, ev.kind == K::rejected && ev.consumer_reject);
    if (u->reattach) {
      attempt_done(eng, u);
      bool again = false;
      XP_SLOG(XP_SLOG_DEBUG, "back to RDMA: rdma_cm %s (status %d, %s, code %u)",
              ev.kind == K::rejected ? "rejected" : "failed", ev.status,
              ev.consumer_reject ? "by the peer" : "no listener", r.code);
      {
        std::lock_guard<std::mutex> l(c->mu);
        // A sibling process holds the connection: once, to its port.
        if (r.code == rej_redirect && !c->reup.redirected && !c->closed.load() &&
            c->reup.state == reattach::connecting) {
          c->reup.redirected = true;
          again = cm_reattach(eng, c, r.port);
        }
      }
      if (!again) reattach::over_channel(c, nullptr);
      return;
    }
    // A connection that will try again (below) keeps the others to this
    // host parked: they learn the outcome from its second attempt.
    bool will_retry = ev.kind == K::rejected && !ev.consumer_reject && !c->closed.load() &&
                      c->rv.no_listener_tries < 1 && u->port == c->tuple.server_port;
    const bool refused_twice =
        will_retry && eng.negative.refused(recover::server_addr(c->tuple), c->tuple.server_port,
                                           now_ms(), eng.p.negative_cache_ms);
    will_retry = will_retry && !refused_twice;
    attempt_done(eng, u, !will_retry);
    {
      std::lock_guard<std::mutex> l(c->mu);
      if (r.code == rej_redirect && !c->rv.redirected && !c->closed.load()) {
        c->rv.redirected = true;
        // A redirected ATTACH refused or lost before (attach_refused): connect.
        if (c->rv.attach_refused || !attach_at_port(eng, c, r.port)) cm_connect(eng, c, r.port);
      } else if (ev.ring_refused) {
        // The server's ring descriptor is out of our bounds: it runs
        // xpress, but not one we can talk to.
        fail(c, Reason::handshake_failed, "the server's ring descriptor refused");
      } else if (r.code == 0 && ev.kind == K::rejected && !c->closed.load() && !refused_twice &&
                 c->rv.no_listener_tries < 1 && u->port == c->tuple.server_port) {
        // Nobody listens there: either no xpress, or the server process has
        // not accepted its first connection from that socket yet (which
        // opens the port).  One more try a little later tells them apart.
        ++c->rv.no_listener_tries;
        c->rv.retry_at_ms = now_ms() + kNoListenerRetryMs;
      } else if (r.code == 0) {
        // Nobody answers rdma_cm there: not an xpress peer (or no RDMA).
        eng.negative.remember(recover::server_addr(c->tuple), c->tuple.server_port, now_ms(),
                              eng.p.negative_cache_ms);
        fail(c, Reason::peer_not_accelerated);
      } else {
        XP_SLOG(XP_SLOG_DEBUG, "fd %d: rendezvous answer: code %u, event %d", c->sock(),
                static_cast<unsigned>(r.code), static_cast<int>(ev.kind));
        // Busy: one of the server's caps (docs/protocol.md §8).
        fail(c, r.code == rej_busy ? Reason::resources_exhausted : Reason::handshake_failed,
             "rendezvous refused");
      }
    }
    return;
  }
  case K::listener_lost: {
    // Its device went away: listen again once one has the address.
    for (OwnedListener& o : eng.listeners)
      if (o.user == ev.user && o.l) {
        eng.cm->close_listener(o.l);
        o.l = nullptr;
      }
    if (ev.user == &eng.private_user && eng.private_l) {
      eng.cm->close_listener(eng.private_l);
      eng.private_l = nullptr;
      eng.private_lost = true;
    }
    XP_SLOG(XP_SLOG_INFO, "rdma_cm listener lost its device: listening again when it is back");
    return;
  }
  case K::disconnected: {
    for (Channel* ch : eng.chans.live()) {
      if (ch->link == ev.link) {
        // What the peer sent before it left is in our ring already (RC
        // delivers in order, before the disconnect): take it first, its
        // streams' last bytes and FINs (a peer that exited, stream/exit.cc).
        // Control records wait in the inbox (their handling takes eng.mu).
        Changes changed;
        {
          std::lock_guard<std::mutex> l(ch->mu);
          if (!ch->failed.load()) progress_locked(ch, nullptr, &changed);
        }
        changed.wake();
        channel_failed(ch, ResumeCause::disconnected); // its streams resume on TCP; reaped
        return;
      }
    }
    // A channel already torn down (failed and emptied, e.g. its streams
    // resumed on TCP) is destroyed when its grace period ends; its user
    // pointer is long gone.
    for (Channel* ch : eng.chans.dying())
      if (ch->link == ev.link) return;
    eng.cm->destroy(ev.link); // never established here
    if (u == nullptr || (u->kind != CmUser::Kind::server && u->kind != CmUser::Kind::client))
      return;
    OwnedCmUser own(u);                                        // the operation ends here
    if (u->kind == CmUser::Kind::client) attempt_done(eng, u); // those parked behind it go on
    if (u->kind == CmUser::Kind::server) server_accept_done(eng, u);
    return;
  }
  }
}

} // namespace xp::stream::engine
