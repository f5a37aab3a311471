// The verbs layer's device service.  This folder is the only code that
// includes <infiniband/verbs.h> or <rdma/rdma_cma.h>; upper layers see only
// these small interfaces, so unit tests can run them without a device.
#pragma once

namespace xp::verbs {

// Whether at least one RDMA device with an active port exists.  Enumerates
// devices once (sysfs reads; no device is opened) on first call; cached.
bool device_present();

// The devices' names, comma-separated, into out (size n; "" when none).
// For the start-up log line.
void device_names(char* out, unsigned n);

// For tests and the fork child: forget the cached answer.
void reset_device_cache();

// In a fork child that will set up RDMA of its own (stream/fork_handover.h):
// the next rdma_cm start loads a private copy of librdmacm, whose device
// table, locks and device contexts are this process's, not the parent's
// (a lock a parent's thread held at the fork stays held in the child's copy).
void fresh_cm_for_fork_child();

} // namespace xp::verbs
