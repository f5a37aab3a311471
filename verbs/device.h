// The verbs layer's device service.  This folder is the only code that
// includes <infiniband/verbs.h> or <rdma/rdma_cma.h>; upper layers see only
// these small interfaces, so unit tests can run them without a device.
#pragma once

namespace xp::verbs {

// Whether at least one RDMA device with an active port exists.  Enumerates
// devices once (sysfs reads; no device is opened) on first call; cached.
bool device_present();
// device_present()'s answer if it was asked already, else false; never
// loads rdma-core (for the exit hint).
bool device_found();

// Every port of every device, for the engine's start-up line, into out
// (size n): "rxe0 port 1 active Ethernet 2 GIDs, mlx5_0 port 1 down
// InfiniBand 1 GID"; "" when none.  Opens each device for its queries:
// called only when the line is logged.
void describe_devices(char* out, unsigned n);

// One port's entry as describe_devices writes it, appended at out + *at
// (size n; *at advanced, stops at the end of out).  state and link_layer are
// rdma-core's values (enum ibv_port_state: 1 down .. 4 active;
// IBV_LINK_LAYER_*: 2 Ethernet, else InfiniBand); gids < 0:
// unknown (an rdma-core without ibv_query_gid_table).  Pure, for the tests.
void format_port(char* out, unsigned n, unsigned* at, const char* dev, unsigned port, int state,
                 int link_layer, int gids);

// For tests and the fork child: forget the cached answer.
void reset_device_cache();

// In a fork child that will set up RDMA of its own (stream/fork_handover.h):
// the next rdma_cm start loads a private copy of librdmacm, whose device
// table, locks and device contexts are this process's, not the parent's
// (a lock a parent's thread held at the fork stays held in the child's copy).
void fresh_cm_for_fork_child();

} // namespace xp::verbs
