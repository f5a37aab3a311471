// stream/channel_table.h: the one owner that frees channels.
#include <doctest/doctest.h>
#include <memory>

#include "stream/channel_table.h"

using xp::stream::Channel;
using xp::stream::ChannelTable;

TEST_CASE("channel table: live and dying lists keep their counts, whichever list frees") {
  ChannelTable t;
  Channel* a = t.adopt(std::make_unique<Channel>());
  Channel* b = t.adopt(std::make_unique<Channel>());
  CHECK(t.live().size() == 2);
  t.retire(a, 1000);
  CHECK(t.live().size() == 1);
  CHECK(t.dying().size() == 1);
  // A retired channel freed at once leaves the dying list, not the live one
  // (a hook does not say which list holds it).
  t.free_now(a);
  CHECK(t.live().size() == 1);
  CHECK(t.dying().empty());
  CHECK(t.snapshot().size() == 1);
  t.free_now(b);
  CHECK(t.empty());
}

TEST_CASE("channel table: a dying channel is freed after its grace period, once nobody uses it") {
  ChannelTable t;
  Channel* a = t.adopt(std::make_unique<Channel>());
  t.retire(a, 1000);
  int freed = 0;
  auto count = [&](Channel*) { ++freed; };
  t.free_quiet(1000 + ChannelTable::kGraceMs - 1, count);
  CHECK(freed == 0);
  a->zc_users.store(1);
  t.free_quiet(1000 + ChannelTable::kGraceMs, count);
  CHECK(freed == 0);
  a->zc_users.store(0);
  a->sleep_refs.store(1);
  t.free_quiet(1000 + ChannelTable::kGraceMs, count);
  CHECK(freed == 0);
  a->sleep_refs.store(0);
  t.free_quiet(1000 + ChannelTable::kGraceMs, count);
  CHECK(freed == 1);
  CHECK(t.empty());
}
