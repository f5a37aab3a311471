// The MOVE payload (recover/move_wire.h): what is encoded parses back, and
// nothing outside the layout parses.
#include <doctest/doctest.h>

#include <cstring>

#include "recover/move_wire.h"

using namespace xp;
using namespace xp::recover;

TEST_CASE("move wire: round trip, and strict") {
  MoveInfo m;
  m.flags = kMoveTxSwitched;
  m.start = 123456789;
  m.received = 987654321;
  uint8_t b[kMoveBytes];
  encode_move(m, b);
  MoveInfo out;
  REQUIRE(parse_move(b, sizeof b, &out) == Status::ok);
  CHECK((out.flags == m.flags && out.start == m.start && out.received == m.received));
  CHECK(parse_move(b, sizeof b - 1, &out) == Status::invalid);
  uint8_t bad[kMoveBytes];
  memcpy(bad, b, sizeof b);
  bad[0] = 4; // an unknown flag
  CHECK(parse_move(bad, sizeof bad, &out) == Status::invalid);
  memcpy(bad, b, sizeof b);
  bad[5] = 1; // a reserved byte
  CHECK(parse_move(bad, sizeof bad, &out) == Status::invalid);
}
