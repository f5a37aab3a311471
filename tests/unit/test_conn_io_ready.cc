// Readiness and wake-ups of an upgrading connection (stream/conn_io.cc,
// stream/wake.cc) over the fake transport of conn_io_pair.h: who is woken
// by a record, which changes are EPOLLET edges, and which locks the engine
// and a sender leave alone.
#include <doctest/doctest.h>

#include "conn_io_pair.h"

using namespace xp;
using namespace xp::stream;
using namespace xp::stream::conn_io_test;

// A second stream (id 7) on b's channel, beside b's own connection.
struct SecondStream {
  Pair& p;
  Conn* other = new Conn(-1, params(recover::Role::server, 3));
  explicit SecondStream(Pair& pair) : p(pair) {
    {
      std::lock_guard<std::mutex> l(p.b.ch->mu);
      other->st = p.b.ch->mux->open(7, 0, 0);
      REQUIRE(other->st != nullptr);
      other->st->owner = other;
      p.b.ch->conns.add(other);
      other->ref();
    }
    other->ch = p.b.ch;
    other->sid = 7;
    other->rx_rdma.store(true);
    other->tx_rdma.store(true);
  }
  ~SecondStream() {
    {
      std::lock_guard<std::mutex> l(p.b.ch->mu);
      p.b.ch->mux->close(other->st);
      p.b.ch->conns.remove(other);
      other->st = nullptr;
    }
    other->unref();
    other->unref();
  }
};

TEST_CASE("conn io: a record one stream's reader polls in wakes the other stream's sleeper") {
  // Two streams share b's channel.  A reader of the second one polls the
  // channel and finds data for the first: whoever sleeps waiting for the
  // first must be woken, although its readiness was recomputed by that
  // other thread (a change seen once is not seen again).
  Pair p(true);
  run(p, 3000, 5);
  settle(p, [&] { return p.b.c->rx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  SecondStream two(p);
  Conn* other = two.other;
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  REQUIRE(wake::add(efd));
  REQUIRE(put(p.a, 64) == 64); // for b's first stream, not for `other`
  char buf[8];
  iovec v{buf, sizeof buf};
  bool kernel = false;
  CHECK(xp::test::call_recv(other, &v, 1, MSG_DONTWAIT, &kernel) == -1); // nothing for it...
  pollfd pf{efd, POLLIN, 0};
  CHECK(poll(&pf, 1, 0) == 1); // ...but b's sleeper was told
  wake::remove(efd);
  CHECK(take(p.b, 64, 0) == 64);
}

TEST_CASE("conn io: a watcher that names its connections sleeps through the others' bytes") {
  // poll() and epoll_wait() over a few user-mode fds register under those
  // connections' keys (their ReadySource, where a Conn starts): a change of
  // another connection of the process does not wake them.  Registered for
  // anything, 4 threads each polling its own connection over one channel
  // were all woken by every answer.
  Pair p(true);
  run(p, 3000, 11);
  settle(p, [&] { return p.b.c->rx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  SecondStream two(p);
  const void* mine = static_cast<stream::ReadySource*>(two.other);
  CHECK(mine == static_cast<const void*>(two.other)); // the key notify() is given
  engine::progress(p.b.ch); // the new stream's first readiness (writable) is seen
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  REQUIRE(wake::add_watch(efd, &mine, 1));
  CHECK(wake::any_sleepers()); // the channel stays armed for it (channel_events.cc)
  pollfd pf{efd, POLLIN, 0};
  REQUIRE(put(p.a, 64) == 64); // for b's first stream
  engine::progress(p.b.ch);
  CHECK((p.b.c->ready_events() & EPOLLIN) != 0);
  CHECK(poll(&pf, 1, 0) == 0); // not ours: asleep still
  wake::notify();              // a change announced to all (a mode change)
  CHECK(poll(&pf, 1, 0) == 1);
  wake::drain(efd);
  wake::remove(efd);
  CHECK_FALSE(wake::any_sleepers());
  // Both keys: b's bytes wake it, once per change however many keys match.
  const void* both[2] = {mine, static_cast<stream::ReadySource*>(p.b.c)};
  REQUIRE(wake::add_watch(efd, both, 2));
  CHECK(take(p.b, 64, 0) == 64);
  REQUIRE(put(p.a, 64) == 64);
  engine::progress(p.b.ch);
  CHECK(poll(&pf, 1, 0) == 1);
  wake::remove(efd); // every registration of efd
  wake::drain(efd);
  wake::notify();
  CHECK(poll(&pf, 1, 0) == 0);
  CHECK_FALSE(wake::add_watch(efd, both, 0)); // no keys: not a watch
  CHECK(take(p.b, 64, 0) == 64);
  CHECK(p.a.bad + p.b.bad == 0);
}

TEST_CASE("conn io: readiness that only goes away wakes no sleeper") {
  // A sleeper for anything (an epoll or poll waiter of this process) is
  // woken by bytes arriving, but not by a reader taking them: nobody waits
  // for less readiness, and an epoll thread woken for every receive of
  // every other thread's connections is a wake-up per call.
  Pair p(true);
  run(p, 3000, 7);
  settle(p, [&] { return p.b.c->rx_rdma.load() && p.a.c->tx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  int efd = wake::thread_fd();
  REQUIRE(efd >= 0);
  wake::drain(efd);
  REQUIRE(wake::add(efd));
  pollfd pf{efd, POLLIN, 0};
  REQUIRE(put(p.a, 64) == 64);
  engine::progress(p.b.ch); // the bytes arrive: a change to wake for
  CHECK(poll(&pf, 1, 0) == 1);
  CHECK((p.b.c->ready_events() & EPOLLIN) != 0);
  wake::drain(efd);
  CHECK(take(p.b, 64, 0) == 64); // the reader takes them: readiness goes away
  CHECK((p.b.c->ready_events() & EPOLLIN) == 0);
  CHECK(poll(&pf, 1, 0) == 0);
  REQUIRE(put(p.a, 64) == 64); // and the next bytes wake again
  engine::progress(p.b.ch);
  CHECK(poll(&pf, 1, 0) == 1);
  wake::remove(efd);
  wake::drain(efd);
  CHECK(take(p.b, 64, 0) == 64);
  CHECK(p.a.bad + p.b.bad == 0);
}

TEST_CASE("conn io: a blocked read leaves a channel someone spins on to the spinner") {
  // Regression: xpress-bench's server had a thread blocked reading its idle
  // control connection while another thread ping-ponged over the same
  // channel.  The blocked read slept on the channel's completion fd, so it
  // armed the queue the spinner keeps unarmed and woke for every message
  // (ppoll, read, ioctl, two epoll_ctl and the channel lock each time, on
  // the spinner's CPU).  With a spinner at work it sleeps on its eventfd
  // alone: the spinner's polling wakes it when its own bytes come.
  Pair p(true);
  run(p, 3000, 5);
  settle(p, [&] { return p.b.c->rx_rdma.load(); });
  REQUIRE(p.b.c->rx_rdma.load());
  while (take(p.b, 4096, 0) > 0) { // nothing left to read: the call blocks
  }
  p.lb.event_fd = static_cast<int>(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  REQUIRE(p.lb.event_fd >= 0);
  std::atomic<ssize_t> got{-2};
  std::vector<char> buf(64);
  auto blocked_read = [&] {
    iovec v{buf.data(), buf.size()};
    bool kernel = false;
    got = xp::test::call_recv(p.b.c, &v, 1, 0, &kernel); // blocking
  };
  uint64_t one = 1;
  pollfd pf{p.lb.event_fd, POLLIN, 0};
  auto deliver = [&] { // bytes for the sleeper's stream, polled in by this thread
    REQUIRE(put(p.a, 64) == 64);
    for (int i = 0; i < 2000 && got.load() == -2; ++i) {
      engine::progress(p.b.ch);
      usleep(1000);
    }
  };
  SUBCASE("nobody else polls: the call that spun last sleeps on the completion fd") {
    std::thread sleeper(blocked_read);
    usleep(50 * 1000); // past its own spin: asleep
    REQUIRE(write(p.lb.event_fd, &one, sizeof one) == sizeof one);
    // It takes the event when it sleeps, or at once when asleep already: on
    // a loaded host (a sanitizer build, other processes on the CPUs) its
    // spin and its first sleep may come later than any fixed wait.
    for (int i = 0; i < 10000 && poll(&pf, 1, 0) == 1; ++i)
      usleep(1000);
    CHECK(poll(&pf, 1, 0) == 0); // it took the event
    deliver();
    sleeper.join();
    CHECK(got.load() == 64);
  }
  SUBCASE("another thread spins on the channel: the event is left to it") {
    engine::spin_enter(p.b.ch); // this thread: the other stream's spinner
    std::thread sleeper(blocked_read);
    usleep(50 * 1000);
    REQUIRE(write(p.lb.event_fd, &one, sizeof one) == sizeof one); // a message for the spinner
    usleep(50 * 1000);
    CHECK(poll(&pf, 1, 0) == 1); // the sleeper did not take it
    CHECK(got.load() == -2);
    deliver(); // the spinner's polling wakes it
    sleeper.join();
    CHECK(got.load() == 64);
    engine::spin_leave(p.b.ch);
  }
  close(p.lb.event_fd);
  p.lb.event_fd = -1;
}

TEST_CASE("conn io: the engine never waits for a channel lock a sender holds") {
  // Regression: the engine thread took a completion event while a sender
  // held the channel's lock, waited for it, was handed it and lost it to
  // the sender again, dozens of times per event (4 KiB stream on
  // Soft-RoCE: 600 futex waits a second, each a context switch on the
  // sender's CPU).  It now leaves the poll owed and does not block; the
  // sender pays it under the lock it holds, or the engine's retry does.
  Pair p(true);
  a_on_rdma_drained(p, 7);
  {
    std::unique_lock<std::mutex> held(p.a.ch->mu); // a sender at work
    CHECK(returns_while_held([&] { engine::take_event(p.a.ch, true); }, held));
  }
  CHECK(p.a.ch->poll_owed.load() == 1);
  CHECK(engine::polls_owed());
  // Bytes for a arrive; its sender, holding the lock, pays the owed poll.
  uint64_t before = p.a.c->st->received();
  REQUIRE(put(p.b, 64) == 64);
  REQUIRE(put(p.a, 64) == 64);
  CHECK(p.a.ch->poll_owed.load() == 0);
  CHECK(p.a.c->st->received() == before + 64);
  CHECK(take(p.a, 64, 1) == 64);
  // Owed again with nobody sending: the engine's retry pays it.
  engine::owe_poll(p.a.ch);
  REQUIRE(put(p.b, 32) == 32);
  engine::pay_owed_polls();
  CHECK(p.a.ch->poll_owed.load() == 0);
  CHECK_FALSE(engine::polls_owed());
  CHECK(p.a.c->st->received() == before + 96);
  CHECK(take(p.a, 32, 1) == 32);
  CHECK(p.a.bad == 0);
}

TEST_CASE("conn io: a sender polls an unarmed channel itself, and keeps it unarmed") {
  // 4 KiB stream on Soft-RoCE: every credit and acknowledgement raised a
  // completion event, and each woke the sender's engine thread on the
  // sender's CPU, which also does Soft-RoCE's work.  A thread that sends
  // now polls an unarmed channel on each send (what it needs, its credit
  // and acknowledgements, is among what arrives), and an event taken
  // while it sends leaves the channel unarmed: 0.19 -> 0.20 Gb/s, client
  // CPU per GB -12%.  Unless someone polled it since the previous send:
  // in a request/response loop the receive just did, and a poll per send
  // cost a provider call per message for nothing.
  Pair p(true);
  a_on_rdma_drained(p, 11);
  p.a.ch->armed.store(false); // an event was taken and not re-armed
  uint64_t before = p.a.c->st->received();
  REQUIRE(put(p.a, 16) == 16); // the first send after a's receive polled
  take(p.a, 64, 1);            // a's receive polls (nothing there)
  uint64_t polls = p.a.ch->polls;
  REQUIRE(put(p.a, 16) == 16); // ... so this send does not
  CHECK(p.a.ch->polls == polls);
  REQUIRE(put(p.b, 64) == 64); // arrives unannounced
  REQUIRE(put(p.a, 64) == 64); // nobody polled since a's last send: it looks
  CHECK(p.a.ch->polls == polls + 1);
  CHECK(p.a.c->st->received() == before + 64);
  CHECK(engine::sent_lately(p.a.ch));
  CHECK(take(p.a, 64, 1) == 64);
  // Armed: the event's taker polls, not the sender.
  p.a.ch->armed.store(true);
  REQUIRE(put(p.b, 32) == 32);
  REQUIRE(put(p.a, 32) == 32);
  CHECK(p.a.c->st->received() == before + 64);
  engine::progress(p.a.ch);
  CHECK(p.a.c->st->received() == before + 96);
  CHECK(take(p.a, 32, 1) == 32);
  CHECK(p.a.bad == 0);
  // Long after the last send, nobody keeps it unarmed.
  p.a.ch->last_send_ns.store(0);
  CHECK_FALSE(engine::sent_lately(p.a.ch));
}

TEST_CASE("conn io: the engine's tick leaves a busy stream's locks alone") {
  // Regression: every 10 ms tick (it ticks that often while a channel
  // stays unarmed for its spinner) locked each connection, each channel
  // for the keepalive, and polled each channel: a request/response loop's
  // thread then waited for the engine in the futex, or the engine for it.
  Pair p(true);
  run(p, 3000, 9);
  settle(p, [&] {
    return p.a.c->rx_rdma.load() && p.a.c->tx_rdma.load() && p.b.c->rx_rdma.load() &&
           p.b.c->tx_rdma.load();
  });
  REQUIRE(p.a.c->tx_rdma.load());
  REQUIRE(p.a.c->rx_rdma.load());
  uint32_t saved_ka = engine::g().p.keepalive_ms;
  engine::g().p.keepalive_ms = 3000;
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    p.a.c->ref(); // as the engine's table holds it
    engine::g().conns.add(p.a.c);
  }
  uint64_t now = engine::now_ms();
  engine::tick_conns(engine::g(), now); // the keepalive's look for this period
  engine::spin_enter(p.a.ch);
  engine::spin_enter(p.b.ch);
  {
    // The loop's thread at work on both ends.
    std::unique_lock<std::mutex> lc(p.a.c->mu), la(p.a.ch->mu), lb(p.b.ch->mu);
    CHECK(returns_while_held([&] { engine::tick_conns(engine::g(), now + 10); }, lb, la, lc));
  }
  {
    // The keepalive's next look is due, and the locks are still held: it
    // waits for a tick that finds them free instead of for the lock.
    const uint64_t due = now + 3000 / 6 + 1;
    const uint64_t checked_a = p.a.ch->ka_checked_ms;
    std::unique_lock<std::mutex> lc(p.a.c->mu), la(p.a.ch->mu), lb(p.b.ch->mu);
    CHECK(returns_while_held([&] { engine::tick_conns(engine::g(), due); }, lb, la, lc));
    CHECK(p.a.ch->ka_checked_ms == checked_a); // not looked at yet
    engine::tick_conns(engine::g(), due + 10); // free now: the look happens
    CHECK(p.a.ch->ka_checked_ms == due + 10);
    CHECK_FALSE(p.a.ch->failed.load());
  }
  engine::spin_leave(p.a.ch);
  engine::spin_leave(p.b.ch);
  {
    std::lock_guard<std::mutex> g(engine::g().mu);
    engine::g().conns.remove(p.a.c);
  }
  p.a.c->unref();
  engine::g().p.keepalive_ms = saved_ka;
}

TEST_CASE("conn io: the switches themselves are no EPOLLET edge") {
  // A reader with EPOLLET sees an edge for bytes and for conditions that
  // appear; the peer's SWITCH moving the stream's sequence to S, or our
  // own direction switching, changes neither.
  Pair p(true);
  REQUIRE(put(p.b, 64) == 64); // 64 bytes each way: what the proofs cover
  CHECK(take(p.a, 64, 1) == 64);
  REQUIRE(put(p.a, 64) == 64);
  CHECK(take(p.b, 64, 0) == 64); // the server read the TCP bytes: proofs can verify
  p.b.c->note_ready(false);      // as the engine's watch of the socket would
  const uint32_t gen0 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  settle(p, [&] { return (p.b.c->rx_rdma.load() && p.b.c->tx_rdma.load()); });
  REQUIRE(p.b.c->rx_rdma.load());
  REQUIRE(p.b.c->tx_rdma.load());
  CHECK((p.b.c->ready_events() & EPOLLIN) == 0);
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) == gen0);
  REQUIRE(put(p.a, 5) == 5); // new bytes over RDMA: an edge
  engine::progress(p.b.ch);
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) != gen0);
  CHECK(take(p.b, 5, 0) == 5);
}

TEST_CASE("conn io: room to write appearing is no EPOLLIN edge") {
  // The kernel wakes an EPOLLIN|EPOLLET registration only for read events;
  // our direction switching to RDMA (room appears on the stream) while TCP
  // bytes are still unread must not report them a second time (found by
  // the semantics suite over RDMA: epoll_edge_triggered).
  Pair p(true);
  REQUIRE(put(p.b, 64) == 64); // 64 bytes each way: what the proofs cover
  CHECK(take(p.a, 64, 1) == 64);
  REQUIRE(put(p.a, 64) == 64);
  CHECK(take(p.b, 64, 0) == 64);
  settle(p, [&] { return (p.b.c->rx_rdma.load() && p.b.c->tx_rdma.load()); });
  REQUIRE(put(p.a, 5) == 5);
  engine::progress(p.b.ch);
  REQUIRE((p.b.c->ready_events() & EPOLLIN) != 0);
  p.b.c->ready.last_ready.fetch_and(~static_cast<uint32_t>(EPOLLOUT)); // as after EAGAIN on a send
  const uint32_t in0 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  const uint32_t out0 = p.b.c->ready_gen(EPOLLOUT | EPOLLET);
  p.b.c->note_ready(false); // room again
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) == in0);
  CHECK(p.b.c->ready_gen(EPOLLOUT | EPOLLET) != out0);
  CHECK(take(p.b, 5, 0) == 5);
}

TEST_CASE("conn io: TCP bytes are one EPOLLET edge, whoever notices them first") {
  // A channel event (the peer's SWITCH) may look at readiness after TCP
  // bytes arrived but before the engine's watch of the socket reports
  // them: the bytes are that edge, and the socket's wake-up for the same
  // bytes is none (found by the semantics suite over RDMA:
  // epoll_edge_triggered told the reader of 'xyz' twice).
  Pair p(true, /*tcp=*/true);
  REQUIRE(!p.a.c->tx_rdma.load());
  REQUIRE(::send(p.a.c->fd, "xyz", 3, 0) == 3); // before a's switch: TCP
  pollfd pf{p.b.c->fd, POLLIN, 0};
  REQUIRE(poll(&pf, 1, 2000) == 1);
  const uint32_t gen0 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  p.b.c->note_ready(false); // a channel event's refresh
  const uint32_t gen1 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  CHECK(gen1 != gen0);
  engine::tcp_event(p.b.c, EPOLLIN); // the socket's wake-up for the same bytes
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) == gen1);
  REQUIRE(::send(p.a.c->fd, "q", 1, 0) == 1); // more bytes: an edge
  REQUIRE(poll(&pf, 1, 2000) == 1);
  engine::tcp_event(p.b.c, EPOLLIN);
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) != gen1);
}

TEST_CASE("conn io: an exclusive look's catch_up counts TCP bytes before the relay, once") {
  // Bytes readable in the kernel before the engine's relay: catch_up gives
  // them their EPOLLIN edge, and neither the relay nor a channel event's
  // refresh gives them a second one (two EPOLLEXCLUSIVE sets would each
  // claim one and both report the same byte).
  Pair p(true, /*tcp=*/true);
  REQUIRE(!p.a.c->tx_rdma.load());
  constexpr uint32_t kEx = EPOLLIN | EPOLLEXCLUSIVE;
  REQUIRE(::send(p.a.c->fd, "xyz", 3, 0) == 3);
  pollfd pf{p.b.c->fd, POLLIN, 0};
  REQUIRE(poll(&pf, 1, 2000) == 1);
  const uint32_t gen0 = p.b.c->ready_gen(kEx);
  p.b.c->catch_up();
  const uint32_t gen1 = p.b.c->ready_gen(kEx);
  CHECK(gen1 != gen0);
  p.b.c->catch_up(); // another set's look: nothing new
  CHECK(p.b.c->ready_gen(kEx) == gen1);
  p.b.c->ready.last_ready.fetch_and(~static_cast<uint32_t>(EPOLLIN)); // EPOLLIN looks new
  p.b.c->note_ready(false);                                           // a channel event's refresh
  CHECK(p.b.c->ready_gen(kEx) == gen1);
  p.b.c->ready.last_ready.fetch_and(~static_cast<uint32_t>(EPOLLIN));
  engine::tcp_event(p.b.c, EPOLLIN); // the relay of the same bytes
  CHECK(p.b.c->ready_gen(kEx) == gen1);
  char buf[8];
  REQUIRE(::recv(p.b.c->fd, buf, sizeof buf, 0) == 3);
  REQUIRE(::send(p.a.c->fd, "q", 1, 0) == 1); // a new byte: one new edge, whoever counts it
  REQUIRE(poll(&pf, 1, 2000) == 1);
  engine::tcp_event(p.b.c, EPOLLIN);
  const uint32_t gen2 = p.b.c->ready_gen(kEx);
  CHECK(gen2 != gen1);
  p.b.c->catch_up();
  CHECK(p.b.c->ready_gen(kEx) == gen2);
  // The count taken only grows: a late, smaller count takes nothing.
  const uint64_t seen = p.b.c->ready.tcp_rx_seen.load();
  CHECK_FALSE(p.b.c->ready.take_tcp_bytes(seen - 1));
  CHECK(p.b.c->ready.tcp_rx_seen.load() == seen);
  CHECK(p.b.c->ready.tcp_rx_edged.load() == seen);
  REQUIRE(::recv(p.b.c->fd, buf, sizeof buf, 0) == 1);
}

TEST_CASE("conn io: catch_up counts bytes another took before that one's edge") {
  // Another took the kernel's count (the relay, a refresh) and has not
  // counted the edge yet (descheduled, or a thread a fork left behind):
  // catch_up counts one at once instead of waiting for it.  A second edge
  // for the same bytes may make a duplicate report, never a lost one.
  Pair p(true, /*tcp=*/true);
  REQUIRE(!p.a.c->tx_rdma.load());
  REQUIRE(::send(p.a.c->fd, "xyz", 3, 0) == 3);
  pollfd pf{p.b.c->fd, POLLIN, 0};
  REQUIRE(poll(&pf, 1, 2000) == 1);
  uint64_t n = 0;
  REQUIRE(engine::tcp_bytes_received(p.b.c, &n));
  REQUIRE(p.b.c->ready.take_tcp_bytes(n)); // its edge never comes
  constexpr uint32_t kEx = EPOLLIN | EPOLLEXCLUSIVE;
  const uint32_t gen0 = p.b.c->ready_gen(kEx);
  p.b.c->catch_up();
  const uint32_t gen1 = p.b.c->ready_gen(kEx);
  CHECK(gen1 != gen0);
  CHECK(p.b.c->ready.tcp_rx_edged.load() == n);
  p.b.c->catch_up(); // counted now: nothing more
  CHECK(p.b.c->ready_gen(kEx) == gen1);
  char buf[8];
  REQUIRE(::recv(p.b.c->fd, buf, sizeof buf, 0) == 3);
}

TEST_CASE("conn io: a refresh that counts TCP bytes' edge asks for a wake-up") {
  // A channel event's refresh found EPOLLIN newly set and took the bytes:
  // the engine's relay of them finds them taken (and may have woken
  // everyone before this edge was counted), so the refresh wakes.
  Pair p(true, /*tcp=*/true);
  REQUIRE(!p.a.c->tx_rdma.load());
  {
    std::lock_guard<std::mutex> g(p.b.ch->mu);
    engine::refresh(p.b.c);
    p.b.c->note_ready(false);
    CHECK_FALSE(engine::refresh(p.b.c)); // nothing changed
  }
  REQUIRE((p.b.c->ready.last_ready.load() & EPOLLIN) == 0);
  REQUIRE(::send(p.a.c->fd, "xyz", 3, 0) == 3);
  pollfd pf{p.b.c->fd, POLLIN, 0};
  REQUIRE(poll(&pf, 1, 2000) == 1);
  const uint32_t gen0 = p.b.c->ready_gen(EPOLLIN | EPOLLET);
  {
    std::lock_guard<std::mutex> g(p.b.ch->mu);
    REQUIRE((p.b.c->ready.seen_bits & Conn::kFin) == 0);
    p.b.c->ready.seen_bits |=
        Conn::kFin; // the event: a condition that went away (no wake-up of its own)
    CHECK(engine::refresh(p.b.c));
  }
  CHECK(p.b.c->ready_gen(EPOLLIN | EPOLLET) != gen0);
  char buf[8];
  REQUIRE(::recv(p.b.c->fd, buf, sizeof buf, 0) == 3);
}

TEST_CASE("conn io: room opening after a full window is an EPOLLET edge") {
  // A non-blocking writer that got EAGAIN waits for EPOLLOUT with EPOLLET
  // (nginx): the acknowledgements that open the window must be an edge,
  // although the stream was writable when readiness was last looked at.
  Pair p(true);
  run(p, 3000, 9);
  settle(p, [&] { return (p.a.c->tx_rdma.load() && p.b.c->rx_rdma.load()); });
  REQUIRE(p.a.c->tx_rdma.load());
  size_t n = 0;
  for (int i = 0; i < 1000; ++i) {
    size_t w = put(p.a, 60000);
    n += w;
    if (w < 60000) break; // EAGAIN: the window is full
  }
  CHECK((p.a.c->ready_events() & EPOLLOUT) == 0);
  const uint32_t gen0 = p.a.c->ready_gen(EPOLLOUT | EPOLLET);
  while (take(p.b, 65536, 0) > 0) { // the reader drains: acks go back
    engine::progress(p.b.ch);
    engine::progress(p.a.ch);
  }
  engine::progress(p.a.ch);
  CHECK((p.a.c->ready_events() & EPOLLOUT) != 0);
  CHECK(p.a.c->ready_gen(EPOLLOUT | EPOLLET) != gen0);
  CHECK(p.b.bad == 0);
}
