// What an rdma_cm event on a connection we accepted means (verbs/cm.h
// passive_step): every way such a connection ends reaches the engine, which
// then stops counting it as an accept under way (docs/protocol.md §8
// "Bounded state").  A REJ after our accept was dropped: the accept stayed
// counted in the server channel caps forever, and a client that refused
// our ring (or a forger that sends REJ on purpose) filled them.
#include <doctest/doctest.h>

#include <initializer_list>
#include <rdma/rdma_cma.h>

#include "verbs/cm.h"

using xp::verbs::passive_step;
using xp::verbs::PassiveStep;

TEST_CASE("rdma_cm: every end of a connection we accepted reaches the engine") {
  CHECK(passive_step(RDMA_CM_EVENT_ESTABLISHED) == PassiveStep::established);
  for (int t : {RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_CONNECT_ERROR, RDMA_CM_EVENT_UNREACHABLE,
                RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_DISCONNECTED,
                RDMA_CM_EVENT_DEVICE_REMOVAL}) {
    CAPTURE(t);
    CHECK(passive_step(t) == PassiveStep::ended);
  }
  // Steps that end nothing (the id's time-wait, an address change).
  CHECK(passive_step(RDMA_CM_EVENT_TIMEWAIT_EXIT) == PassiveStep::ignore);
  CHECK(passive_step(RDMA_CM_EVENT_ADDR_CHANGE) == PassiveStep::ignore);
}
