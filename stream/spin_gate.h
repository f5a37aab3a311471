// Who may busy-poll (docs/design.md, "Completion events").  Problem: on a
// host with 2 CPUs, 4 threads of a client and 4 workers of its server that
// all spin before they sleep keep the thread whose answer just arrived off
// a CPU for a scheduler time slice, which is the round trip's tail.
// Mechanism (with XPRESS_SPIN_SHARE): spinning takes a ticket from a table shared by this user's
// xpress processes on the host (a small shared-memory file; without it,
// the table is this process's own), and only as many tickets are live as
// the host has CPUs; a spinner that sees a gap between its rounds was
// descheduled and stops (the CPU is wanted elsewhere).  A ticket whose
// holder vanished (a killed process) goes stale within kStaleNs.
#pragma once
#include <cstdint>

namespace xp::stream::spin_gate {

class Ticket {
public:
  Ticket() = default;
  ~Ticket() { release(); }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  // First round of a spin: false when the host's spinners are as many as
  // its CPUs (sleep at once, as with no spin budget).
  bool acquire(uint64_t now_ns);
  // Each later round: false when this thread was descheduled since the
  // previous round (or the ticket went stale): stop spinning.
  bool keep(uint64_t now_ns);
  void release();

private:
  bool off_ = false; // XPRESS_SPIN_SHARE=0: every spin may run
  int slot_ = -1;
  uint64_t last_ns_ = 0, beat_ns_ = 0;
};

// Tests: the table's size limit (0: the number of CPUs) and a private
// table, whatever XPRESS_SPIN_SHARE says (a limit of 0 gives the setting
// back).
void set_limit_for_tests(int limit);

} // namespace xp::stream::spin_gate
