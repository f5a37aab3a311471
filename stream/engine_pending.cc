// The state a peer can make a server keep before the application accepted
// its connection (docs/protocol.md §8 "Bounded state"): rdma_cm requests and
// ATTACHes waiting for that accept, and the table of server connections
// they are matched against.  Each table is capped and indexed by 4-tuple,
// so the engine's 10 ms tick, which runs under the engine mutex like the program's
// accept/connect/close, does no work per pending entry: an entry is looked
// at when its connection appears (key_ready), when a sibling process
// publishes connections (ListenShare::slots_gen), and at its deadline.
#include <sys/random.h>
#include <unistd.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "recover/siphash.h"
#include "stream/engine_internal.h"

namespace xp::stream::engine {

size_t TupleKeyHash::operator()(const TupleKey& k) const {
  // Keyed: the tuples are the peer's choice (no collision flooding).
  static const auto key = [] {
    std::array<uint8_t, recover::kSipKeyBytes> b{};
    if (getrandom(b.data(), b.size(), 0) != static_cast<ssize_t>(b.size())) {
      uint64_t t = mono_ns();
      memcpy(b.data(), &t, sizeof t);
    }
    return b;
  }();
  return static_cast<size_t>(recover::siphash24_64(key.data(), k.b.data(), k.b.size()));
}

namespace {

void key_ready(State& eng, const TupleKey& k) {
  if (eng.reqs_by_key.count(k) || eng.attaches_by_key.count(k)) eng.ready_keys.push_back(k);
}

template <typename Map, typename It> void unindex(Map& m, const TupleKey& k, It it) {
  auto range = m.equal_range(k);
  for (auto i = range.first; i != range.second; ++i) {
    if (i->second == it) {
      m.erase(i);
      return;
    }
  }
}

void erase_req(State& eng, std::list<PendingReq>::iterator it) {
  unindex(eng.reqs_by_key, tkey(it->key), it);
  auto a = eng.reqs_per_addr.find(it->from);
  if (a != eng.reqs_per_addr.end() && --a->second == 0) eng.reqs_per_addr.erase(a);
  eng.reqs.erase(it);
}

TupleKey attach_key(const PendingAttach& p) {
  // The ATTACH was parsed when it was queued: the tuple is in its payload.
  recover::TcpTuple t;
  recover::Nonce n;
  recover::NakCode nak;
  uint8_t key[recover::kTupleIdBytes] = {};
  if (recover::parse_attach(p.rec.payload, p.rec.h.len, &t, &n, &nak) == Status::ok)
    recover::tuple_id(t, key);
  return tkey(key);
}

void erase_attach(State& eng, std::list<PendingAttach>::iterator it, const TupleKey& k) {
  unindex(eng.attaches_by_key, k, it);
  auto a = eng.attaches_per_ch.find(it->ch);
  if (a != eng.attaches_per_ch.end() && --a->second == 0) eng.attaches_per_ch.erase(a);
  auto f = eng.attaches_per_addr.find(it->from);
  if (f != eng.attaches_per_addr.end() && --f->second == 0) eng.attaches_per_addr.erase(f);
  eng.attaches.erase(it);
}

// Answer what waits for key k, if it can be now.
void answer_key(State& eng, const TupleKey& k) {
  std::vector<std::list<PendingReq>::iterator> rs;
  auto rr = eng.reqs_by_key.equal_range(k);
  for (auto i = rr.first; i != rr.second; ++i)
    rs.push_back(i->second);
  for (auto it : rs)
    if (answer_request(eng, it->req, it->share, it->key, it->sid, it->nonce_c, it->reattach))
      erase_req(eng, it);
  std::vector<std::list<PendingAttach>::iterator> as;
  auto ar = eng.attaches_by_key.equal_range(k);
  for (auto i = ar.first; i != ar.second; ++i)
    as.push_back(i->second);
  for (auto it : as)
    if (it->ch->failed.load() || handle_attach(it->ch, it->rec, false)) erase_attach(eng, it, k);
}

// The keys something waits for that a sibling published in sh (each once:
// a multimap's equal keys are adjacent).
template <typename Map> void published_keys(State& eng, ListenShare* sh, const Map& m) {
  const TupleKey* last = nullptr;
  for (const auto& e : m) {
    if (last && *last == e.first) continue;
    last = &e.first;
    if (share_find(sh, e.first.b.data(), getpid(), nullptr)) key_ready(eng, e.first);
  }
}

// Sibling processes publish the connections they accepted in the shared
// table; when a share's table changed, the keys that something waits for
// and a sibling published there are answered (a redirect, or a NAK: not
// ours), each looked up (listen_share.h), not the table scanned.
void look_at_shares(State& eng) {
  auto& seen = eng.shares_seen;
  for (ListenShare* sh : eng.shares) {
    uint32_t gen = sh->slots_gen.load(std::memory_order_acquire);
    bool found = false;
    for (auto& e : seen) {
      if (e.first != sh) continue;
      found = true;
      if (e.second == gen) break;
      e.second = gen;
      if (eng.reqs.empty() && eng.attaches.empty()) break;
      published_keys(eng, sh, eng.reqs_by_key);
      published_keys(eng, sh, eng.attaches_by_key);
      break;
    }
    if (!found) seen.emplace_back(sh, gen);
  }
}

} // namespace

void index_server(State& eng, Conn* c) {
  XP_ASSERT_HELD(eng.mu);
  if (c->role != recover::Role::server) return;
  uint8_t key[recover::kTupleIdBytes];
  recover::tuple_id(c->tuple, key);
  eng.servers[tkey(key)] = c;
  key_ready(eng, tkey(key));
}

void unindex_server(State& eng, Conn* c) {
  XP_ASSERT_HELD(eng.mu);
  if (c->role != recover::Role::server) return;
  uint8_t key[recover::kTupleIdBytes];
  recover::tuple_id(c->tuple, key);
  auto it = eng.servers.find(tkey(key));
  if (it != eng.servers.end() && it->second == c) eng.servers.erase(it);
  key_ready(eng, tkey(key)); // recently closed: refused at once
}

Conn* find_by_key(State& eng, const uint8_t key[recover::kTupleIdBytes]) {
  XP_ASSERT_HELD(eng.mu);
  auto it = eng.servers.find(tkey(key));
  return it != eng.servers.end() && !it->second->closed.load() ? it->second : nullptr;
}

bool queue_request(State& eng, const PendingReq& p) {
  XP_ASSERT_HELD(eng.mu);
  uint32_t& n = eng.reqs_per_addr[p.from];
  if (eng.reqs.size() >= kMaxPendingReqs || n >= kMaxPendingReqsPerPeer) {
    if (n == 0) eng.reqs_per_addr.erase(p.from);
    return false;
  }
  ++n;
  eng.reqs.push_back(p);
  eng.reqs_by_key.emplace(tkey(p.key), std::prev(eng.reqs.end()));
  return true;
}

bool queue_attach(State& eng, Channel* ch, const ControlRecord& r,
                  const uint8_t key[recover::kTupleIdBytes]) {
  XP_ASSERT_HELD(eng.mu);
  const recover::IpAddr from = ch->peer_addr;
  uint32_t& n = eng.attaches_per_ch[ch];
  uint32_t& m = eng.attaches_per_addr[from];
  if (eng.attaches.size() >= kMaxPendingAttaches || n >= eng.p.streams_per_channel ||
      m >= kMaxPendingAttachesPerPeer) {
    if (n == 0) eng.attaches_per_ch.erase(ch);
    if (m == 0) eng.attaches_per_addr.erase(from);
    return false;
  }
  ++n;
  ++m;
  // At most the handshake timeout: an ATTACH naming a 4-tuple the program
  // never accepts (a forger's random tuple, docs/protocol.md §8) holds a
  // slot of the caps no longer than that.
  eng.attaches.push_back(PendingAttach{ch, from, r, now_ms() + eng.p.handshake_timeout_ms});
  eng.attaches_by_key.emplace(tkey(key), std::prev(eng.attaches.end()));
  return true;
}

bool unproven_room(State& eng, const recover::IpAddr& from) {
  uint64_t n = 0;
  for (const Channel* ch : eng.chans.live())
    if (!ch->client_side && !ch->failed.load() && ch->peer_addr == from)
      n += ch->mux->marked_count();
  return n < eng.p.server_unproven_per_peer;
}

void mark_unproven(Conn* c) {
  // A server stream bound and waiting, untimed, for the client's opening
  // SHARE (recover/upgrade.h untimed): the client's program decides when
  // it comes, so nothing but this count bounds how many a client holds.
  const bool on = c->role == recover::Role::server && c->sess.untimed();
  if (c->ch == nullptr || c->st == nullptr || c->st->marked() == on) return;
  std::lock_guard<std::mutex> l(c->ch->mu);
  c->ch->mux->set_marked(c->st, on);
}

size_t pending_attaches_of(State& eng, Channel* ch) {
  XP_ASSERT_HELD(eng.mu);
  auto it = eng.attaches_per_ch.find(ch);
  return it == eng.attaches_per_ch.end() ? 0 : it->second;
}

void drop_attaches(State& eng, Channel* ch) {
  XP_ASSERT_HELD(eng.mu);
  if (pending_attaches_of(eng, ch) == 0) return;
  for (auto it = eng.attaches.begin(); it != eng.attaches.end();) {
    auto next = std::next(it);
    if (it->ch == ch) erase_attach(eng, it, attach_key(*it));
    it = next;
  }
}

void clear_pending(State& eng) {
  eng.reqs.clear();
  eng.attaches.clear();
  eng.reqs_by_key.clear();
  eng.attaches_by_key.clear();
  eng.reqs_per_addr.clear();
  eng.attaches_per_ch.clear();
  eng.attaches_per_addr.clear();
  eng.ready_keys.clear();
  eng.shares_seen.clear();
  eng.servers.clear();
  eng.accepting.clear();
}

void retry_pending(State& eng, uint64_t now) {
  XP_ASSERT_HELD(eng.mu);
  look_at_shares(eng);
  std::vector<TupleKey> ready;
  ready.swap(eng.ready_keys);
  for (const TupleKey& k : ready)
    answer_key(eng, k);
  // Deadlines, oldest first (each list is in arrival order, and every
  // entry waits the same handshake timeout).
  while (!eng.reqs.empty() && now >= eng.reqs.front().deadline_ms) {
    PendingReq& p = eng.reqs.front();
    if (!answer_request(eng, p.req, p.share, p.key, p.sid, p.nonce_c, p.reattach))
      send_reject_unknown(eng, p.req);
    erase_req(eng, eng.reqs.begin());
  }
  while (!eng.attaches.empty() && now >= eng.attaches.front().deadline_ms) {
    PendingAttach& a = eng.attaches.front();
    const TupleKey k = attach_key(a);
    if (!a.ch->failed.load()) (void)handle_attach(a.ch, a.rec, true); // NAK unknown at the latest
    erase_attach(eng, eng.attaches.begin(), k);
  }
}

} // namespace xp::stream::engine
