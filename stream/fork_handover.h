// A fork child that holds an accepted connection alone upgrades it itself
// (docs/protocol.md §7 "A fork child that holds an accepted connection").
//
// Problem: a fork-per-connection server (PostgreSQL's postmaster, inetd)
// accepts, forks a child that serves the connection, and closes its own
// copy.  The upgrade had started in the parent, so at the fork both held
// the socket and it stayed on TCP.  Mechanism: at the fork the parent lets
// the upgrade go (a NAK moved tells a client that knew the stream to ask
// rdma_cm again) when no share crossed yet; the child restarts the session
// under new secrets and, from its first data call on the connection, asks
// the kernel's fd tables (stream/fork_share.h) until no other process holds
// the socket, checks that nobody else read or wrote it since the fork (the
// kernel's byte counts equal its own), and then publishes the connection
// as a sibling worker does (docs/protocol.md §1): the parent's rendezvous
// redirects the client to the child's own rdma_cm port.  A parent that
// keeps its copy keeps the connection on TCP in both (shared_by_fork).
#pragma once
#include <cstddef>
#include <cstdint>

namespace xp::stream {
struct Conn;
namespace engine {

// after_fork_parent, g().mu and c->mu held, c upgrading with nothing
// switched: let c's upgrade go to the fork child (true), or not (false:
// the caller fails it, shared_by_fork).
bool hand_over(Conn* c);
// before_fork, c->mu held: the kernel's and the session's byte counts of
// c's socket now (kernel_counts_match compares against them).
void note_fork_counts(Conn* c);
// on_fork_child, c upgrading with nothing switched: true when this child
// may claim c (its session restarted under new secrets: the caller keeps it).
bool keep_for_claim(Conn* c);
// In a fork child, at the program's first data call on a kept connection
// (no lock held): the child's engine starts and looks for the moment no
// other process holds the socket.
void claim_start(Conn* c);
// claim_start's end, once the child's engine runs (g().mu held): c joins
// the claims (one reference), its deadline counted from now.  The unit
// tests' way in without an engine.
void follow_claim(Conn* c, uint64_t now);
// Engine tick (no lock held): kept connections whose socket is this
// process's alone are published (or given up at their deadline).
void tick_claims(uint64_t now);
// on_fork_child, once g().conns holds only the connections the child
// keeps: the parent's list is not the child's.  No allocation.
void claims_after_fork_child();
// Whether the kernel's counts of c's socket (bytes written and read by
// anyone) equal what this process's session saw (c->mu held).  false when
// they differ or cannot be read.
bool kernel_counts_match(Conn* c);

} // namespace engine
} // namespace xp::stream
