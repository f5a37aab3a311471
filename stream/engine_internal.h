// Engine internals shared by engine.cc (thread, tables, timers),
// engine_rendezvous.cc (rdma_cm: listeners, requests, channel set-up),
// engine_control.cc (upgrade control records, switching, fallback) and
// conn_io.cc (the data calls).  Not for other layers.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <sys/socket.h>
#include <unordered_map>
#include <vector>

#include "stream/bind_failures.h"
#include "stream/channel.h"
#include "stream/channel_table.h"
#include "stream/conn.h"
#include "stream/engine.h"
#include "stream/listen_share.h"
#include "stream/negative_cache.h"
#include "verbs/cm.h"

namespace xp::stream {

namespace engine {

// A 4-tuple's key (recover::tuple_id), the index of the tables a
// peer fills (pending requests and ATTACHes, server connections); hashed
// with a per-process random key (a peer chooses the tuples it names).
struct TupleKey {
  std::array<uint8_t, recover::kTupleIdBytes> b;
  bool operator==(const TupleKey& o) const { return b == o.b; }
};
struct TupleKeyHash {
  size_t operator()(const TupleKey& k) const;
};
inline TupleKey tkey(const uint8_t key[recover::kTupleIdBytes]) {
  TupleKey k;
  memcpy(k.b.data(), key, k.b.size());
  return k;
}

// Bounds on the state a peer can make a server keep (docs/protocol.md §8).
// Pending rdma_cm requests (for a connection the application has not
// accepted yet): the process's and one requester address's.  A request
// beyond them is rejected busy at once (the client stays on TCP or tries
// again); 64 per address covers a client host's burst of connects (each
// process's requests for the first connections to a server, the rest
// attach over their channels).
constexpr size_t kMaxPendingReqs = 1024;
constexpr uint32_t kMaxPendingReqsPerPeer = 64;
// Pending ATTACHes: the process's, one channel's (a channel carries at
// most XPRESS_STREAMS_PER_CHANNEL streams anyway) and one requester
// address's, so that one address cannot take them all (its
// XPRESS_SERVER_CHANNELS_PER_PEER channels could otherwise queue 32 x 256):
// it gets a sixteenth, as with requests.  Beyond them: NAK busy (the
// client then asks rdma_cm, bounded above).
constexpr size_t kMaxPendingAttaches = 4096;
constexpr uint32_t kMaxPendingAttachesPerPeer = 256;
// A client channel with no stream for this long is torn down.  It lingers
// to serve the program's next connection to the same peer, which then
// attaches at once instead of waiting for a new channel's rdma_cm set-up
// (docs/protocol.md §1): programs that connect again after a pause (a
// client run once a second, a pool that reconnects, iperf3's control and
// data connections) find it.  Shorter than kServerIdleMs, so that the
// client, which knows when it attaches, ends an idle channel first and
// never attaches over one its server is tearing down.
constexpr uint64_t kClientIdleMs = 20000;
// A server channel with no stream for this long is torn down (this is for
// a client that does not tear its idle channels down, or never attached
// anything).
constexpr uint64_t kServerIdleMs = 30000;

struct PendingReq {
  verbs::CmRequest* req;
  recover::IpAddr from; // the requester's address
  bool reattach;        // a channel only: the stream binds with REATTACH over it
  ListenShare* share;   // null: our private listener
  uint8_t key[recover::kTupleIdBytes];
  uint16_t sid;
  recover::Nonce nonce_c;
  uint64_t deadline_ms;
};
struct PendingAttach {
  Channel* ch;          // dropped with the channel (drop_attaches) before it is freed
  recover::IpAddr from; // the channel's requester address
  ControlRecord rec;
  uint64_t deadline_ms;
};
struct OwnedListener {
  ListenShare* share;
  verbs::CmListener* l; // null: its device went away, listening again (relisten)
  void* user;
};
// What the user pointer of an rdma_cm operation names.
struct CmUser {
  enum class Kind : uint8_t { client, server, listener_share, listener_private } kind;
  Conn* conn;
  ListenShare* share;
  uint16_t port;          // client: the port this attempt went to; server: the listener's
  bool reattach = false;  // a channel for a resumed stream going back (stream/reattach.cc)
  recover::IpAddr from{}; // server: the requester's address
  recover::ChannelBinding binding{}; // server: the channel's (Channel::binding)
  TableHook link{};                  // client: in State::inflight; server: in State::accepting
};
using CmUsers = PtrTable<CmUser, &CmUser::link>;
// A connection's rdma_cm operation (a client attempt, a server accept) owns
// its CmUser and one reference of the connection from its start to its
// last event (established, rejected, failed, or a disconnect before it
// was established); OwnedCmUser lets go of both.
struct CmUserDrop {
  void operator()(CmUser* u) const;
};
using OwnedCmUser = std::unique_ptr<CmUser, CmUserDrop>;
// The user of a new operation for c (a reference of c taken); null: out of memory.
OwnedCmUser conn_user(CmUser::Kind k, Conn* c, uint16_t port, bool reattach = false);
// A channel's nonce (recover::ChannelBinding) from the kernel's randomness;
// false when it has none to give at once.
bool fresh_chan_nonce(uint8_t out[recover::kChanNonceBytes]);

struct State {
  std::mutex mu; // tables below; ordered before Conn::mu
  EngineParams p;
  bool started = false;
  bool used_rdma = false; // librdmacm initialised in this process
  bool forked_child = false;
  // Fork child: streams inherited in user mode that this process's engine
  // does not know (resumed or moved ones), so sleepers must keep polling
  // them (wake::set_no_waker) even once a claim starts an engine here.
  bool inherited_user_mode = false;
  int epfd = -1, cmdfd = -1;
  verbs::Cm* cm = nullptr;
  AllConns conns; // live connections (one ref each)
  // Whether an upgrade that times something (Phase::upgrading, not
  // untimed) may be under way: wait_ms() ticks for it without walking
  // conns.  Set by whoever makes one (register_conn, advance); tick_conns
  // clears it before its walk and sets it again if the walk finds one, so
  // a change during the walk is never lost (both sides seq_cst).
  std::atomic<bool> maybe_timed{false};
  ChannelTable chans;               // live and dying channels (stream/channel_table.h)
  std::vector<ListenShare*> shares; // listening sockets this process accepted from
  // Requests and ATTACHes waiting for the application's accept, oldest
  // first (deadline order), indexed by 4-tuple: they are answered when
  // their connection appears (key_ready), not by rescanning them
  // (engine_pending.cc).
  std::list<PendingReq> reqs;
  std::list<PendingAttach> attaches;
  std::unordered_multimap<TupleKey, std::list<PendingReq>::iterator, TupleKeyHash> reqs_by_key;
  std::unordered_multimap<TupleKey, std::list<PendingAttach>::iterator, TupleKeyHash>
      attaches_by_key;
  std::map<recover::IpAddr, uint32_t> reqs_per_addr;
  std::unordered_map<Channel*, uint32_t> attaches_per_ch;
  std::map<recover::IpAddr, uint32_t> attaches_per_addr;
  std::vector<TupleKey> ready_keys; // a server connection appeared or closed
  std::vector<std::pair<ListenShare*, uint32_t>> shares_seen; // slots_gen last looked at
  // Server connections by 4-tuple (find_by_key), and rdma_cm accepts under
  // way (each will be a server channel).
  std::unordered_map<TupleKey, Conn*, TupleKeyHash> servers;
  CmUsers accepting;
  NegativeCache negative;     // servers without xpress (stream/negative_cache.h)
  BindFailures bind_failures; // requesters whose bindings failed (stream/bind_failures.h)
  std::vector<OwnedListener> listeners;
  std::mutex qmu;                 // the two queues (a leaf lock: taken under any other)
  std::vector<Conn*> start_queue; // client connections to start (ref'd)
  std::vector<ListenShare*> serve_queue;
  // Connections left unpublished because our private rdma_cm listener
  // could not be made: the next serve_share that makes it publishes them.
  bool publish_backlog = false;
  std::vector<Conn*> graveyard; // freed by the engine thread before its next wait
  // Client rdma_cm attempts under way, and connections waiting for one to
  // the same host to finish (they then attach over its channel instead of
  // each setting up a queue pair of their own).
  CmUsers inflight;
  std::vector<Conn*> parked;
  // 4-tuples of server connections closed lately: a request for one is
  // refused at once instead of waiting for an accept that cannot come.
  std::vector<std::array<uint8_t, recover::kTupleIdBytes>> closed_keys;
  verbs::CmListener* private_l = nullptr;
  uint16_t private_port = 0;
  bool private_lost = false; // its device went away: listen again (relisten)
  sockaddr_storage private_addr{};
  bool private_af_only = false;
  uint64_t relisten_ms = 0;
  CmUser private_user{CmUser::Kind::listener_private, nullptr, nullptr, 0};
  uint64_t now_ms = 0;
  std::atomic<bool> forking{false}; // between before_fork and after_fork_parent
  // A process-wide kernel feature keeps every new connection on TCP (stream/pin.h).
  std::atomic<Reason> pinned_reason{Reason::none};
};
State& g();
// The state if anything created it yet, else null (nothing to do then: the
// exit path of a process that never made a connection allocates nothing).
State* g_if_created();

// CLOCK_MONOTONIC: the one clock of the stream layer (waits, deadlines,
// statistics); now_ms() is the same clock in ms.
inline uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
inline uint64_t mono_us() {
  return mono_ns() / 1000;
}
uint64_t now_ms();
void kick(); // wake the engine thread (commands queued)

// ---- engine_control.cc (callers hold c->mu unless said otherwise)
void flush(Conn* c);
// ch->mu held: c's stream leaves ch (the mux forgets it, the channel's
// table drops c and its reference).
void detach(Conn* c, Channel* ch);
// detach's inverse, ch->mu held: c's stream st, with id `id`, is on ch.
void link_stream(Conn* c, Channel* ch, Stream* st, uint32_t id);
// ch->mu held: c's stream on ch at id, opened and linked (false: the id's
// slot taken, or no memory).
bool bind_stream(Conn* c, Channel* ch, uint32_t id);
void advance(Conn* c);
// The engine's edge-triggered watch of c's socket reported `events`.
void tcp_event(Conn* c, uint32_t events);
void fail(Conn* c, Reason why, const char* detail = nullptr); // detail: for the debug log
// fail() gives c up with a NAK, nothing switched either way; otherwise the
// stream resumes on TCP (docs/protocol.md §3).
inline bool fails_by_nak(const Conn* c) {
  return !c->tx_rdma.load() && !c->rx_rdma.load() && !c->sess.needs_resume();
}
// c->mu held, nothing moved over RDMA and c off every channel: the kernel
// serves c from now on (its watch dropped, readiness the kernel's, sleepers
// told).  fail()'s end, and the fork hand-over's.
void to_tcp(Conn* c, Reason why);
// ch->mu held: recompute c's stream readiness; true if something a sleeper
// may wait for happened (a condition appeared, bytes arrived, the window
// moved); false if nothing changed or readiness only went away.
bool refresh(Conn* c);
// c->mu held, our direction on the channel: its FIN record after our
// bytes (the stream's shutdown), the readiness that changes, and the
// wake-up once the channel's lock is let go.
void shut_write(Conn* c);
// The kernel's count of payload bytes received on c's socket (false: not
// TCP, e.g. a unit test's socketpair).
bool tcp_bytes_received(const Conn* c, uint64_t* n);
// Poll a channel, update its streams, handle control records.  No lock
// held by the caller.  Wakes sleepers when anything changed.
void progress(Channel* ch);
// The same unless the channel's lock is taken: false then, nothing done.
bool progress_if_free(Channel* ch);
// Connections whose readiness changed, to wake their sleepers once the
// channel lock is released (a change seen by refresh() is not seen again).
struct Changes {
  static constexpr int kMax = 16;
  Conn* list[kMax];
  int n = 0;
  bool all = false;
  void add(Conn* c) {
    if (n < kMax)
      list[n++] = c;
    else
      all = true;
  }
  void wake(); // no lock held
};
// ch->mu held: poll the channel and recompute the readiness of its streams
// other than `except`, recording which changed.
void progress_locked(Channel* ch, Conn* except, Changes* out);
void drain_inbox(Channel* ch); // no lock held
// Tests only: drain_inbox hands records to this instead of the engine's
// handler (null: the engine's).
using RecordHandler = void (*)(Channel* ch, const ControlRecord& r);
void set_record_handler_for_tests(RecordHandler h);
// The channel is lost: every stream on it resumes on TCP (stream/resume.h).
// No lock held.  `why` is recorded unless a cause was already.
void channel_failed(Channel* ch, ResumeCause why = ResumeCause::completion_error);
// Record why a channel failed (first cause wins) and mark it failed.
void mark_failed(Channel* ch, ResumeCause why);
// Keepalives and their timeout (engine tick, no lock held).
void keepalive(State& eng, uint64_t now);
// c's TCP socket became readable after every raw byte below the peer's S
// was read: when a frame waits there the peer resumed on TCP (its side of
// the channel failed), and c's channel is failed too.  true then.  No lock.
bool tcp_after_switch(Conn* c);
Status on_control_record(void* ctx, const flow::RecordHeader& h, const uint8_t* payload);
// c->mu held: the upgrade's handshake timer (recover/upgrade.h tick), which
// does not fire while the peer's SWITCH is in (docs/protocol.md §3).
void tick_handshake(Conn* c, uint64_t now);
void tick_conns(State& eng, uint64_t now);
// before_fork: the time the fork starts (a bound on the child's start).
void fork_prepare();
// before_fork, g().mu and c->mu held, last: a moved stream's byte counts, to tell
// once the socket is ours alone whether another process used it
// (stream/engine_fork.cc, stream/fork_bytes.h).
void mark_fork_bytes(Conn* c);
// after_fork_parent, no lock held: the sockets of streams that left RDMA
// are watched until no other process holds them (stream/engine_fork.cc).
void fork_shares();
// The engine's epoll tag of a fork's watched holders' pidfds (0 is the
// command eventfd, 2 the rdma_cm channel, others a Conn or Channel pointer).
constexpr uint64_t kTagForkWatch = 4;
// Engine tick, or a watched holder exited (no lock held): sockets a fork shared that are this
// process's alone again (stream/engine_fork.cc).
void tick_forks(uint64_t now);
// Moved streams whose use since a fork is still to be judged (engine thread).
bool fork_judgements_pending();
// In a fork child: the parent's watch of them is not the child's.
void forks_after_fork_child();
// g().mu held: the program closed a socket a fork shared (no longer watched).
void fork_closed(uint64_t ino);
bool handle_attach(Channel* ch, const ControlRecord& r, bool last_chance); // g().mu held
// g().mu held: ch is unlinked (freed after a grace period): the ATTACHes
// waiting on it go, so that no pending entry outlives the channel it names.
void drop_attaches(State& eng, Channel* ch);
void watch_channel(Channel* ch);              // g().mu held
void reap_channels(State& eng, uint64_t now); // eng.mu held: idle and failed channels go
void report(Conn* c, Mode m, Reason why);
// A direction switched at byte `at` (the preload layer's statistics).
void report_switch(Conn* c, bool tx, uint64_t at);

// ---- channel_events.cc: who takes completion events (no lock held)
// The engine's ticks while a channel's completion queue is unarmed (nobody
// gets an event for it).  Problem: a spinner keeps its channel unarmed, and
// every tick of the engine is a wake-up on a CPU that spinner wants; but a
// channel whose spinner left without arming hears of nothing until a tick
// re-arms and polls it.  Mechanism: tick fast only when something may wait
// on an unarmed channel, slowly while the channel is in use anyway
// (docs/results/tuning.md has the latencies behind each period).
//
// A channel nobody spun on for kIdleRearmNs is re-armed, checked every
// kUnarmedTickMs.  What waits for that re-arm is only work nobody is
// blocked on (an ATTACH, credit for the peer): every sleeper arms before
// it sleeps.
constexpr uint64_t kIdleRearmNs = 10000000;
constexpr int kUnarmedTickMs = 10;
// While every unarmed channel is still in use (spun on or sent on within
// kIdleRearmNs at the last check), the engine looks only every
// kBusyUnarmedTickMs: a request/response loop keeps its channel in use for
// good, and a faster tick only takes CPU from its spinner.  A channel whose
// spinner left without arming is then re-armed within about this period.
constexpr int kBusyUnarmedTickMs = 100;
// A blocked call that left the channel to its spinner (conn_io.cc) counts
// itself in Channel::left_sleepers while it sleeps on its eventfd, and looks
// again after kLeftToSpinnerMs at most: a safety net only, as each look is a
// wake-up on a CPU the spinner wants.  What wakes it is whoever polls the
// channel: the spinner, or, once the channel is uncovered (left sleepers,
// nobody spinning or sending for kLeftUncoveredNs), the engine, which
// re-arms and polls it and, while left sleepers wait on an unarmed
// channel, ticks every kLeftTickMs instead of kBusyUnarmedTickMs: threads
// that all left their channel to each other (a parameter server's) would
// otherwise wait for the slow tick.
constexpr int kLeftToSpinnerMs = 200;
constexpr uint64_t kLeftUncoveredNs = 2000000;
constexpr int kLeftTickMs = 10;
// A left call that has waited kLeftIdleNs already (an idle connection
// beside a ping-pong, e.g. xpress-bench's control connection) makes the
// engine look only every kIdleLeftTickMs: at kLeftTickMs each end would
// wake 100 times a second on the CPU the ping-pong's spinner wants.  The
// same period as the busy unarmed channel's tick, which the engine keeps
// anyway while the spinner is there, so an idle call adds no wake-up of its
// own; once the channel is uncovered, that tick re-arms and polls it
// (arm_idle_channels), so such a call learns of its bytes within one
// period.
constexpr uint64_t kLeftIdleNs = 1000000000;
constexpr int kIdleLeftTickMs = kBusyUnarmedTickMs;
// A blocked call sleeps on its eventfd only, leaving ch to its spinner /
// wakes up (the engine is kicked when it waits longer than this sleeper's
// tick allows).  idle: the call has waited kLeftIdleNs.
void left_enter(Channel* ch, bool idle = false);
void left_leave(Channel* ch, bool idle = false);
// The engine thread is about to wait `ms` (-1: no limit): the time it may
// wait given the left sleepers (kLeftTickMs, or kIdleLeftTickMs when they
// are all idle, at most while some channel may be unarmed).  Ends with
// engine_waited().
int engine_wait_ms(int ms);
void engine_waited();
// This thread saw ch's completion fd readable: take the event, re-arm
// unless someone spins on ch, and poll (leave_to_spinner, the engine
// thread: not while another thread spins on ch).
void take_event(Channel* ch, bool leave_to_spinner = false);
// Someone busy-polls ch, or did within kIdleRearmNs (now: 0 = read the clock).
bool spun_lately(Channel* ch, uint64_t now = 0);
// A send() left ch within kSentLatelyNs: the sending thread polls ch
// (while it is unarmed) on each send.
constexpr uint64_t kSentLatelyNs = 2000000;
bool sent_lately(Channel* ch, uint64_t now = 0);
// A blocked call busy-polls ch / stops doing so (returns when: the
// clock spun_lately reads).
void spin_enter(Channel* ch);
uint64_t spin_leave(Channel* ch);
// Another thread polls ch now, or did within kIdleRearmNs after `mine`
// (when this thread last stopped spinning on it; 0: never).
bool others_poll(Channel* ch, uint64_t mine);
// A blocked call sleeps on ch's completion fd itself / woke up: the engine
// stops / resumes watching that fd.
void sleep_enter(Channel* ch);
void sleep_leave(Channel* ch);
// sleep_enter unless another thread sleeps on ch's completion fd already
// (false then: that one passes ch's news on, stream/channel_sleep.h).
bool sleep_enter_alone(Channel* ch);
// Arm ch for every completion if it is unarmed (or widen an arm for
// solicited ones only); true if this call did (poll it then).
bool rearm(Channel* ch);
// As rearm, for the solicited completions only (the peer's records that
// change a stream's readiness, not its credits and acknowledgements:
// docs/protocol.md §4) while XPRESS_SOLICITED_EVENTS is on, no thread of the
// process may wait for room to send and ch holds no corked record (the
// peer's acknowledgement sends it).  True when this call armed ch (poll it
// then).
bool arm_for_news(Channel* ch);
// ch's arm, if for solicited completions only, now for every completion;
// true if so (poll ch then: what came meanwhile raised no event).
bool widen_arm(Channel* ch);
// A thread that may wait for room to send (POLLOUT, EPOLLOUT: credits and
// acknowledgements end its wait) sleeps / woke up: while one does, no
// channel is armed for solicited completions only, and the ones that are
// are widened.  enter: false when XPRESS_SOLICITED_EVENTS is off (nothing
// counted: do not leave).
bool room_wait_enter();
void room_wait_leave();
// In a fork child (on_fork_child): no room waiter, the lock free.
void room_waits_after_fork();
// ch, whose event was just taken (or found unarmed by the engine's tick),
// may stay unarmed: someone spins or sent on it lately, and either one
// spins now or no thread sleeps waiting for anything (poll, select,
// epoll_wait).  Publishes the unarmed state before it counts the sleepers.
bool may_stay_unarmed(Channel* ch, uint64_t now);
bool maybe_unarmed();
// The engine thread owes a poll to a channel whose lock was taken when it
// took its event (owe_poll): it tries again every kOwedPollMs
// (pay_owed_polls), and a sender that holds the lock pays it first.
constexpr int kOwedPollMs = 2;
void owe_poll(Channel* ch);
bool polls_owed();
void pay_owed_polls();
// A thread goes to sleep in the kernel: every channel armed (and polled once).
void arm_before_sleep();
// Engine tick: re-arm channels nobody spun on lately.
void arm_idle_channels();
// Autocorking's bound (flow/record_channel_cork.cc): a record held on a
// channel where no send() took bytes for kHeldIdleNs is posted by the engine,
// which looks every kHeldTickMs while some channel may hold one.  A held
// record normally leaves with the next write or the peer's ACK; this is
// for a writer that stops and then waits outside xpress (a futex, a
// sleep) while its peer waits for those bytes without reading (MSG_PEEK,
// FIONREAD): without it the hold would last until the channel is next
// polled.  note_held: a send left a record held on ch.
constexpr uint64_t kHeldIdleNs = 1000000;
constexpr int kHeldTickMs = 1;
void note_held(Channel* ch);
bool maybe_held();
void post_idle_held();
// The last arm_idle_channels() left only channels still in use unarmed.
bool unarmed_in_use();
// How long the engine thread may sleep now (engine.cc).
int wait_ms();
// The engine's tick while something is timed (wait_ms, tick_conns).
constexpr int kTickMs = 10;

// g().mu held, in a fork child (stream/fork_handover.h): the engine
// started for a connection it may claim, whose socket it now watches.
bool start_for_claim(Conn* c);

// ---- engine_rendezvous.cc (engine thread, eng.mu held; eng: the engine state, passed down)
void start_client(State& eng, Conn* c);
// Rendezvous of the listening socket s (owner election, our private
// listener) and publication of c, the connection just accepted or claimed
// from it (null: none); O(1) in the number of connections.
void serve_share(State& eng, ListenShare* s, Conn* c);
void on_cm_event(State& eng, const verbs::CmEvent& ev);
void retry_pending(State& eng, uint64_t now);
// Listeners whose device went away listen again once it is back (a
// resumed stream's client then finds us for its return to RDMA).
void relisten(State& eng, uint64_t now);
Channel* make_channel(State& eng, verbs::Link* link, bool client_side);
Conn* find_by_key(State& eng, const uint8_t key[recover::kTupleIdBytes]);
// A server channel may carry a stream only when the channel's requester is
// the stream's TCP client (the address check of every binding path).
bool channel_serves(const Channel* ch, const Conn* c);
// The rdma_cm request req answered for c (false: it waits, or was refused).
bool answer_request(State& eng, verbs::CmRequest* req, ListenShare* sh,
                    const uint8_t key[recover::kTupleIdBytes], uint16_t sid,
                    const recover::Nonce& nonce, bool reattach);
void send_reject_unknown(State& eng, verbs::CmRequest* req);
void send_reject_busy(State& eng, verbs::CmRequest* req);

// ---- engine_pending.cc (eng.mu held): the pending tables and their caps
// A server connection enters / leaves the table find_by_key reads; its
// key's pending requests and ATTACHes are answered at the next tick.
void index_server(State& eng, Conn* c);
void unindex_server(State& eng, Conn* c);
// Queue a request / an ATTACH; false when a cap is reached (the caller
// refuses it: reject / NAK busy).
bool queue_request(State& eng, const PendingReq& p);
bool queue_attach(State& eng, Channel* ch, const ControlRecord& r,
                  const uint8_t key[recover::kTupleIdBytes]);
size_t pending_attaches_of(State& eng, Channel* ch);
// Room for one more server stream from `from` waiting for its client's
// first proof (XPRESS_SERVER_UNPROVEN_PER_PEER, docs/protocol.md §8): the
// marked streams (Mux::marked_count) of the live server channels from
// that address, an IPv6 one counted per full address.
bool unproven_room(State& eng, const recover::IpAddr& from);
// c->mu held: mark or unmark c's stream as one such (advance()).
void mark_unproven(Conn* c);
// Forget every pending entry (fork child).
void clear_pending(State& eng);
bool recently_closed(State& eng, const uint8_t key[recover::kTupleIdBytes]);
// A client connection closed: stop waiting behind its attempt.
void forget_attempts(State& eng, Conn* c);
// A channel for a resumed stream going back (stream/reattach.cc): rdma_cm to
// the server at port, the request naming the stream's 4-tuple only so that
// the right process answers; false when it could not even start.
bool cm_reattach(State& eng, Conn* c, uint16_t port);

} // namespace engine
} // namespace xp::stream
