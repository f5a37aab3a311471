// Sleepers on epoll sets with several threads or many members: a thread that
// leaves a shared set must leave the others' wake-ups in place, and a set with
// more members than xpress keys a sleeper by reports exactly the one that
// became ready, edge-triggered ones once per edge.
#include "sem.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { kMembers = 12 }; // more than xpress keys a sleeper by (stream/wake.h)

struct sleeper {
  pthread_t thread;
  int ep;
  volatile pid_t tid;
  int result;
  uint64_t data;
  volatile int done;
};

static void* sleeper_main(void* arg) {
  struct sleeper* s = arg;
  s->tid = gettid();
  struct epoll_event ev = {0};
  s->result = epoll_wait(s->ep, &ev, 1, 5000);
  s->data = ev.data.u64;
  __atomic_store_n(&s->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

// Two threads asleep on one set; a one-shot pipe event wakes one of them,
// which leaves.  A byte for a socket member then wakes the other (the
// set's wake-up is shared: the first to leave must not unregister it).
// Many socket members, so that xpress's sleepers wait for any change
// rather than by key.
static void epoll_shared_set_one_leaves(void) {
  int as[kMembers], bs[kMembers], pp[2];
  REQUIRE(pipe(pp) == 0);
  int ep = OK(epoll_create1(0));
  RC(0, ep_add(ep, pp[0], EPOLLIN | EPOLLONESHOT, 1));
  for (int i = 0; i < kMembers; i++) {
    tcp_pair(&as[i], &bs[i]);
    REQUIRE(ep_add(ep, bs[i], EPOLLIN, i == 4 ? 2 : 10 + i) == 0);
  }
  int a = as[4];
  struct sleeper s[2];
  memset(s, 0, sizeof s);
  for (int i = 0; i < 2; i++) {
    s[i].ep = ep;
    REQUIRE(pthread_create(&s[i].thread, NULL, sleeper_main, &s[i]) == 0);
  }
  long end = now_ms() + 3000;
  while (!(s[0].tid && s[1].tid && thread_sleeping(s[0].tid) && thread_sleeping(s[1].tid))) {
    REQUIRE(now_ms() < end);
    msleep(1);
  }
  msleep(50);
  RC(1, write(pp[1], "p", 1));
  end = now_ms() + 3000;
  while (!s[0].done && !s[1].done && now_ms() < end)
    msleep(1);
  msleep(100);
  EQ("sleepers woken by the pipe", s[0].done + s[1].done, 1);
  int left = s[0].done ? 1 : 0;
  EQ("the pipe's event", s[1 - left].data, 1);
  long t0 = now_ms();
  RC(1, send(a, "!", 1, 0));
  REQUIRE(pthread_join(s[left].thread, NULL) == 0);
  REQUIRE(pthread_join(s[1 - left].thread, NULL) == 0);
  EQ("the other sleeper's result", s[left].result, 1);
  EQ("the other sleeper's event", s[left].data, 2);
  EQ("woken within 2 s", now_ms() - t0 < 2000, 1);
  RC(0, close(ep));
  RC(0, close(pp[0]));
  RC(0, close(pp[1]));
  for (int i = 0; i < kMembers; i++) {
    RC(0, close(as[i]));
    RC(0, close(bs[i]));
  }
}

// One member of many becomes ready while a thread sleeps: it alone is
// reported; edge-triggered, a second byte is a second edge and nothing is
// reported between; a member that the peer closes reports its hang-up.
static void epoll_many_members_one_ready(void) {
  int a[kMembers], b[kMembers];
  int ep = OK(epoll_create1(0));
  for (int i = 0; i < kMembers; i++) {
    tcp_pair(&a[i], &b[i]);
    REQUIRE(ep_add(ep, b[i], EPOLLIN | EPOLLRDHUP | EPOLLET, 100 + i) == 0);
  }
  struct epoll_event ev[kMembers];
  RC(0, epoll_wait(ep, ev, kMembers, 0));
  for (int round = 0; round < 3; round++) {
    int who = (round * 5 + 3) % kMembers;
    struct sleeper s = {.ep = ep};
    REQUIRE(pthread_create(&s.thread, NULL, sleeper_main, &s) == 0);
    long end = now_ms() + 3000;
    while (!(s.tid && thread_sleeping(s.tid))) {
      REQUIRE(now_ms() < end);
      msleep(1);
    }
    msleep(50);
    long t0 = now_ms();
    if (round < 2)
      RC(1, send(a[who], "!", 1, 0));
    else
      RC(0, shutdown(a[who], SHUT_WR));
    REQUIRE(pthread_join(s.thread, NULL) == 0);
    EQ("result", s.result, 1);
    EQ("member", s.data, 100 + who);
    EQ("woken within 2 s", now_ms() - t0 < 2000, 1);
    RC(0, epoll_wait(ep, ev, kMembers, 0)); // the edge was taken
  }
  for (int i = 0; i < kMembers; i++) {
    RC(0, close(a[i]));
    RC(0, close(b[i]));
  }
  RC(0, close(ep));
}

const struct sem_case sem_wait_sets_cases[] = {
    {"epoll_shared_set_one_leaves", epoll_shared_set_one_leaves},
    {"epoll_many_members_one_ready", epoll_many_members_one_ready},
    {NULL, NULL},
};
