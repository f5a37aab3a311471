// xpress-probe's questions to rdma-core (tools/xpress-probe.cc): can this
// host reach an xpress peer at HOST:PORT over RDMA, and if not, why?  Built
// into the probe tool only, never into the library.
#pragma once
#include <cstdio>
#include <sys/socket.h>

namespace xp::verbs::probe {

// What the probe concluded; the tool's exit status.
enum class Verdict : int {
  xpress_answers = 0, // an xpress listener answered at the address and port
  no_xpress = 1,      // RDMA reaches the host, but no xpress listens at that port
  no_rdma_path = 2,   // no device, no active port, no route, or no answer in time
};

// Local devices, their ports and GIDs, one line each, to out.  Returns how
// many ports are active.
int list_devices(FILE* out);

// Resolves the route from src (the local address a TCP connection would
// use) to dst over rdma_cm, prints it (device, port, GIDs), then asks the
// port with an xpress request that any xpress version refuses at once with
// its own reject, and prints what answered.
Verdict ask(const sockaddr* src, const sockaddr* dst, int timeout_ms, FILE* out);

} // namespace xp::verbs::probe
