// The per-process engine: the thread that sets channels up (rdma_cm), waits
// for completions and TCP readiness while nobody else polls, times the
// handshakes, and the tables that find a connection by its TCP 4-tuple.
// Started on first use; nothing here runs in a process that never makes an
// eligible connection.  The preload layer calls these from the socket
// wrappers; the data calls themselves are in conn_io.h.
#pragma once
#include <sys/socket.h>

#include "common/reasons.h"
#include "stream/conn.h"
#include "stream/engine_params.h"

namespace xp::stream {

struct ListenShare; // rendezvous state of one listening socket, shared with fork children

namespace engine {

void configure(const EngineParams& p);
const EngineParams& params();

// Why this process cannot upgrade at all (none if it can): no device,
// a fork child of a process that already used RDMA, ...
Reason unavailable();

// A listening socket: its rendezvous state, inherited by fork children
// (MAP_SHARED).  null when not possible.
ListenShare* on_listen(int fd);
void release_share(ListenShare* s); // the listening socket was closed in this process

// A new connection to upgrade (client after connect, server after accept
// from a listener with share); returns it referenced once for the caller,
// or null (then *why says why it stays on TCP).
Conn* on_connect(int fd, const sockaddr* local, const sockaddr* peer, Reason* why);
Conn* on_accept(int fd, ListenShare* share, const sockaddr* local, const sockaddr* peer,
                Reason* why);

// The application closes the connection's fd (called before the real close).
void on_close(Conn* c);
// Just before that, when the close counts an undecided upgrade's outcome
// (preload/track.cc): from here our direction never switches (a SWITCH
// after the program closed would make the peer count the connection on
// RDMA while this end counted it on TCP), and the answer is whether the
// connection was still short of the bytes a proof covers (too_few_bytes).
bool stop_switching(Conn* c);
// The program closes the number the connection goes by while newfd (a dup)
// keeps the socket open (called before the real close).
void renumber(Conn* c, int newfd);

// fork(): before it, no direction may switch; after it, in the parent,
// connections still upgrading stay on TCP (shared with the child); in the
// child, the parent's engine is forgotten (its thread is gone).
void before_fork();
void after_fork_parent();
void on_fork_child();
// After the fork, in the parent, the sockets of streams that left RDMA are
// watched until no other process holds them (the child and whatever
// inherited from it let go: stream/fork_share.h); a stream left framed at
// the fork may then go back onto RDMA (docs/protocol.md §7 "After a
// fork").  forked: fork() returned this child's pid, whose exit is then
// seen without waiting for the next re-check.
void forked(pid_t child);

// Busy-polling before a sleep (docs/design.md, "Completion events").  A
// blocked call spins spin_budget_ns(avg) first, avg being its recent waits
// in us (wait_avg folds one in): XPRESS_SPIN_US while that is within it (a
// request/response loop spins until each answer comes, its slower answers
// included), the minimum (20 us) when waits are longer (an idle server
// sleeps at once and uses no CPU).
uint64_t spin_budget_ns(uint32_t avg_us);
uint32_t wait_avg(uint32_t avg_us, uint64_t waited_ns);
// One busy-poll round for poll/select/epoll_wait, which wait on many
// connections: every channel of the process (up to 16 a round, in turn)
// is polled, so what arrived is processed and its readiness published
// without the engine thread's completion event.  False when there is
// nothing to poll (no channel).
bool spin_poll_channels();

// Outcome hook: the preload layer records the final mode of a connection
// (rdma once a direction switched; tcp with the reason when the upgrade gave up).
using OutcomeHook = void (*)(int fd, Mode m, Reason why);
void set_outcome_hook(OutcomeHook h);
// Switch hook: a direction of the connection moved to RDMA at byte `at`
// (its first `at` bytes crossed on TCP): the statistics count those under
// tcp before the switch.  Once per direction; a return to RDMA after a
// resume does not call it.
using SwitchHook = void (*)(int fd, bool tx, uint64_t at);
void set_switch_hook(SwitchHook h);
// Tick hook: called on the engine thread about every 100 ms while it has
// work (the live statistics' snapshot of the registered-memory counters).
using TickHook = void (*)();
void set_tick_hook(TickHook h);

// The process exits (exit, _exit) with connections open: end each stream as
// the kernel's close would (FIN after the bytes written, a reset with unread
// bytes), then wait up to budget_ms for the NIC to take everything posted
// (stream/exit.cc).  Nothing in a fork child, nothing without channels.
void before_exit(uint32_t budget_ms);

} // namespace engine
} // namespace xp::stream
