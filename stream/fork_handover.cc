// A fork child that holds an accepted connection alone upgrades it itself
// (stream/fork_handover.h, docs/protocol.md §7).
#include "stream/fork_handover.h"

#include <algorithm>
#include <cstring>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/lock_check.h"
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/fork_bytes.h"
#include "stream/fork_share.h"

namespace xp::stream::engine {
namespace {

// The child's connections waiting to be its alone (g().mu; one ref each).
// Made at the first claim, never destroyed (the engine thread runs until
// the process ends); a fork child only looks at it when it exists, so its
// fork handler allocates nothing (claims_after_fork_child).  Entries leave
// it only on the engine thread (tick_claims).
std::vector<Conn*>* g_claims = nullptr;
std::vector<Conn*>& claims() {
  if (g_claims == nullptr) g_claims = new std::vector<Conn*>();
  return *g_claims;
}

// How often the child asks the kernel's fd tables while another process
// still holds the socket: first at once, then doubling up to this.
constexpr uint32_t kClaimMaxDelayMs = 200;

// The kernel's bytes written and read on fd, by any process
// (fork_bytes::kernel: false once a FIN crossed, or not TCP); read until two
// looks agree, so that a segment arriving between a counter and a queue
// size is counted neither twice nor not at all.
bool kernel_counts(int fd, uint64_t* sent, uint64_t* read) {
  for (int tries = 0; tries < 4; ++tries) {
    fork_bytes::Kernel a, b;
    if (!fork_bytes::kernel(fd, &a) || !fork_bytes::kernel(fd, &b)) return false;
    if (!(a == b)) continue;
    *sent = b.written;
    *read = b.read;
    return true;
  }
  return false;
}

void drop_claim(size_t i) {
  auto& v = claims();
  Conn* c = v[i];
  v[i] = v.back();
  v.pop_back();
  c->at_fork.claim.store(false);
  c->unref();
}

} // namespace

void note_fork_counts(Conn* c) {
  // Only an accepted connection whose upgrade can start over may be
  // claimed (keep_for_claim): no other costs the kernel's counts at a fork.
  c->at_fork.counts = c->role == recover::Role::server && c->rv.share != nullptr &&
                      c->phase.load() == Phase::upgrading && c->sess.can_hand_over() &&
                      kernel_counts(c->sock(), &c->at_fork.k_sent, &c->at_fork.k_read);
  c->at_fork.claim_since_ticks = fork_share::boot_ticks();
  c->at_fork.claim_parent = getpid(); // before_fork runs in the process that forks
  c->at_fork.s_sent = c->sess.tcp_sent();
  c->at_fork.s_read = c->sess.tcp_received();
}

bool kernel_counts_match(Conn* c) {
  uint64_t ks = 0, kr = 0;
  if (!c->at_fork.counts || !kernel_counts(c->sock(), &ks, &kr)) return false;
  return ks - c->at_fork.k_sent == c->sess.tcp_sent() - c->at_fork.s_sent &&
         kr - c->at_fork.k_read == c->sess.tcp_received() - c->at_fork.s_read;
}

bool hand_over(Conn* c) {
  if (c->role != recover::Role::server || c->rv.share == nullptr || !c->at_fork.counts ||
      !c->sess.can_hand_over())
    return false;
  if (Channel* ch = c->ch) {
    // As fail(): the NAK and the stream's leave are one step under the
    // channel's lock (no SWITCH can have come: nothing was shared yet).
    std::lock_guard<std::mutex> chl(ch->mu);
    if (c->st && c->st->rx_started()) return false;
    recover::Message nak;
    if (c->sess.hand_over(&nak))
      (void)ch->mux->channel().send_control(static_cast<flow::RecordType>(nak.type), nak.stream,
                                            nak.seq, nak.payload, nak.len);
    detach(c, ch);
    c->ch = nullptr;
  } else {
    recover::Message nak;
    (void)c->sess.hand_over(&nak); // nobody knows the stream yet: nothing to tell
  }
  c->at_fork.handed_over = true;
  // Requests for it wait for the child's publication (or their deadline);
  // an rdma_cm accept still under way gets the NAK when it completes
  // (engine_rendezvous.cc bind_new_channel).
  unindex_server(g(), c);
  if (c->rv.slot_written) {
    uint8_t key[recover::kTupleIdBytes];
    recover::tuple_id(c->tuple, key);
    (void)share_remove(c->rv.share, key, getpid());
    c->rv.slot_written = false;
  }
  to_tcp(c, Reason::shared_by_fork);
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: the fork child may upgrade this accepted connection", c->sock());
  return true;
}

bool keep_for_claim(Conn* c) {
  if (c->role != recover::Role::server || c->rv.share == nullptr || !c->at_fork.counts ||
      c->closed.load() || !c->sess.can_hand_over())
    return false;
  recover::Nonce n;
  uint8_t seed[recover::pake::kSeedBytes];
  uint8_t b[sizeof n.b + sizeof seed];
  if (getrandom(b, sizeof b, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof b)) return false;
  memcpy(n.b, b, sizeof n.b);
  memcpy(seed, b + sizeof n.b, sizeof seed);
  c->sess.restart(n, seed);
  c->rv.nonce = n;
  c->st = nullptr;
  c->sid = 0;
  c->rv.accepting = false;
  c->counted_mode = false;
  c->deadline_ms = 0;
  // Not published before it is ours alone (tick_claims clears it then).
  c->rv.slot_written = true;
  c->at_fork.claim_delay_ms = 0;
  c->at_fork.claim.store(true);
  return true;
}

void claims_after_fork_child() {
  if (g_claims == nullptr) return;
  // The parent's claims are not this child's: its own first data call
  // claims again (claim_start).  A kept connection (still in g().conns) is
  // the same object here, so the parent's claim reference on it is
  // dropped (its table's reference remains: never the last); the others
  // stay forgotten with their table references, as every connection of
  // the parent's this child does not keep.
  for (Conn* k : *g_claims)
    if (AllConns::linked(k)) k->unref();
  g_claims->clear();
}

void claim_start(Conn* c) {
  State& s = g();
  std::lock_guard<std::mutex> l(s.mu);
  if (!c->at_fork.claim.load() || c->closed.load()) return;
  for (Conn* k : claims())
    if (k == c) return;
  if (!start_for_claim(c)) {
    c->at_fork.claim.store(false);
    std::lock_guard<std::mutex> cl(c->mu);
    return fail(c, Reason::shared_by_fork, "no engine in the fork child");
  }
  follow_claim(c, now_ms());
  kick();
}

void follow_claim(Conn* c, uint64_t now) {
  XP_ASSERT_HELD(g().mu);
  c->ref();
  claims().push_back(c);
  // Started: the data calls stop asking (each took State::mu and scanned
  // the claims); the engine's tick follows it in claims() from here.
  c->at_fork.claim.store(false);
  // The client's own wait (its request at the parent's rendezvous) is
  // XPRESS_HANDSHAKE_TIMEOUT_MS: beyond twice that nobody asks any more.
  c->deadline_ms = now + 2 * g().p.handshake_timeout_ms;
  c->at_fork.claim_next_ms = 0;
}

void tick_claims(uint64_t now) {
  // No reference of its own on a due connection: only this thread takes
  // entries out of claims(), so each stays held by its claim meanwhile.  A
  // reference held across the scan of /proc would be copied into a child
  // this process forks meanwhile, where nothing drops it.
  std::vector<Conn*> due;
  {
    std::lock_guard<std::mutex> l(g().mu);
    auto& v = claims();
    for (size_t i = 0; i < v.size();) {
      Conn* c = v[i];
      if (c->closed.load() || c->phase.load() != Phase::upgrading) {
        drop_claim(i);
        continue;
      }
      if (now >= c->at_fork.claim_next_ms) due.push_back(c);
      ++i;
    }
  }
  for (Conn* c : due) {
    // The kernel's fd tables, without a lock (a pass over /proc).
    const uint64_t ino = fork_share::socket_inode(c->sock());
    bool alone = false;
    pid_t holder = -1; // for the debug log: who keeps the claim waiting
    if (ino != 0) {
      const fork_share::Held h = fork_share::holders({ino}, static_cast<pid_t>(syscall(SYS_getpid)),
                                                     c->at_fork.claim_since_ticks);
      const auto it = h.find(ino);
      if (it != h.end() && !it->second.empty())
        holder = it->second.front();
      else if (fork_share::parent_unseen(c->at_fork.claim_parent))
        holder = c->at_fork.claim_parent;
      else
        alone = true;
    }
    std::lock_guard<std::mutex> l(g().mu);
    auto& v = claims();
    size_t at = v.size();
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == c) at = i;
    if (at != v.size()) {
      std::lock_guard<std::mutex> cl(c->mu);
      if (c->closed.load() || c->phase.load() != Phase::upgrading) {
        drop_claim(at);
      } else if (alone) {
        drop_claim(at);
        if (!kernel_counts_match(c)) {
          fail(c, Reason::shared_by_fork,
               "another process read or wrote the socket since the fork");
        } else {
          XP_SLOG(XP_SLOG_DEBUG,
                  "fd %d: no other process holds the accepted connection: "
                  "upgrading it here",
                  c->sock());
          c->rv.slot_written = false;
          index_server(g(), c);
          serve_share(g(), c->rv.share, c); // published: the parent's rendezvous redirects here
        }
      } else if (now >= c->deadline_ms) {
        drop_claim(at);
        fail(c, Reason::shared_by_fork, "another process still holds the socket");
      } else {
        const uint32_t was = c->at_fork.claim_delay_ms;
        c->at_fork.claim_delay_ms = was == 0 ? 5 : std::min(was * 2, kClaimMaxDelayMs);
        if (c->at_fork.claim_delay_ms == kClaimMaxDelayMs && was != kClaimMaxDelayMs)
          XP_SLOG(XP_SLOG_DEBUG, "fd %d: process %d still holds the accepted connection", c->sock(),
                  static_cast<int>(holder));
        c->at_fork.claim_next_ms = now + c->at_fork.claim_delay_ms;
      }
    }
  }
}

} // namespace xp::stream::engine
