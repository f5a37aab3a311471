// The xpress-bench server: accepts connections for every scenario, one thread each.
//
// Threads (not epoll) keep it runnable under rsocket's preload, which has no epoll, and keep
// each connection's code a straight blocking loop, like the applications xpress targets.
#include "server.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "client.h"
#include "net.h"
#include "pattern.h"
#include "scenarios.h"
#include "sysstat.h"

namespace xb {

namespace {

constexpr uint64_t kSec = 1000000000ull;
// Connection threads need little stack (buffers live on the heap); a small stack keeps
// thousands of connections cheap.
constexpr size_t kThreadStack = 512 * 1024;

std::atomic<bool> g_stop{false};
std::atomic<int> g_threads{0};
bool g_once = false;
bool g_quiet = false;

std::mutex g_sessions_mu;
std::unordered_map<uint64_t, std::shared_ptr<Session>> g_sessions;

std::shared_ptr<Session> find_session(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_sessions_mu);
  auto it = g_sessions.find(id);
  return it == g_sessions.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------- parking

class ParkingLot {
public:
  void start() {
    thread_ = std::thread([this] { loop(); });
  }
  void add(int fd, std::shared_ptr<Session> s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.emplace_back(fd, std::move(s));
    }
    cv_.notify_one();
  }

private:
  void loop() {
    std::vector<pollfd> fds;
    std::vector<std::shared_ptr<Session>> owners;
    for (;;) {
      {
        // Nothing parked: sleep until something is (no periodic wake-up:
        // on a 2-vCPU test bed each one takes a CPU from the measured
        // threads, whatever the transport).
        std::unique_lock<std::mutex> lock(mu_);
        if (fds.empty()) cv_.wait(lock, [this] { return !pending_.empty(); });
        for (auto& [fd, s] : pending_) {
          fds.push_back(pollfd{fd, POLLIN, 0});
          owners.push_back(std::move(s));
        }
        pending_.clear();
      }
      // A short timeout so newly parked connections join the set quickly.
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (size_t i = 0; i < fds.size();) {
        bool gone = false;
        if (fds[i].revents) {
          char buf[256];
          ssize_t r = read(fds[i].fd, buf, sizeof buf);
          gone = r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN);
        }
        if (!gone) {
          ++i;
          continue;
        }
        close(fds[i].fd);
        owners[i]->conns_open.fetch_sub(1);
        fds[i] = fds.back();
        fds.pop_back();
        owners[i] = std::move(owners.back());
        owners.pop_back();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<int, std::shared_ptr<Session>>> pending_;
  std::thread thread_;
};

ParkingLot g_parking;

// ---------------------------------------------------------------------------- control

ServerStats make_stats(const Session& s, uint32_t status) {
  ServerStats st{};
  st.magic = kMagic;
  st.status = status;
  st.pid = static_cast<uint64_t>(getpid());
  st.wall_ns = now_ns() - s.start_ns;
  CpuTimes cpu = process_cpu();
  st.cpu_user_ns = cpu.user_ns;
  st.cpu_sys_ns = cpu.sys_ns;
  st.thread_cpu_ns = s.thread_cpu_ns.load();
  st.rss_kb = rss_kb();
  st.bytes_in = s.bytes_in.load();
  st.bytes_out = s.bytes_out.load();
  st.ops = s.ops.load();
  st.conns_accepted = s.conns_accepted.load();
  st.conns_open = s.conns_open.load();
  st.checked = s.checked.load();
  st.errors = s.errors.load();
  st.tcp_mem_pages = tcp_mem_pages();
  std::string pre = preload_env();
  std::strncpy(st.preload, pre.c_str(), sizeof st.preload - 1);
  return st;
}

bool build_shards(const PsSetup& p, uint64_t seed, ShardStore* store) {
  if (p.classes < 1 || p.classes > static_cast<uint32_t>(kMaxSizeClasses) || p.per_class < 1 ||
      p.per_class > 4096)
    return false;
  uint64_t total = 0;
  for (uint32_t c = 0; c < p.classes; ++c) {
    if (p.sizes[c] == 0 || p.sizes[c] > kMaxMessage) return false;
    total += p.sizes[c] * p.per_class;
  }
  if (total > (2ull << 30)) return false;
  for (uint32_t c = 0; c < p.classes; ++c) {
    for (uint32_t j = 0; j < p.per_class; ++j) {
      auto id = static_cast<uint32_t>(store->sizes.size());
      store->sizes.push_back(p.sizes[c]);
      store->keys.push_back(shard_key(seed, id));
      store->data.emplace_back(p.sizes[c]);
      fill_message(store->data.back().data(), p.sizes[c], store->keys.back());
    }
  }
  return true;
}

void serve_control(int fd, const Hello& h) {
  auto s = std::make_shared<Session>();
  s->id = h.session;
  s->hello = h;
  s->start_ns = now_ns();
  uint32_t status = kAckOk;
  if (h.scenario == Scenario::kPs) {
    PsSetup setup{};
    s->shards = std::make_unique<ShardStore>();
    if (read_until(fd, &setup, sizeof setup, now_ns() + 10 * kSec) != Io::kOk ||
        !build_shards(setup, h.seed, s->shards.get()))
      status = kAckSetupFailed;
  }
  bool registered = false;
  if (status == kAckOk) {
    std::lock_guard<std::mutex> lock(g_sessions_mu);
    registered = g_sessions.emplace(h.session, s).second;
    if (!registered) status = kAckSessionExists;
  }
  ServerStats st = make_stats(*s, status);
  bool alive = write_until(fd, &st, sizeof st, now_ns() + 10 * kSec) == Io::kOk;

  // The control connection lives as long as the client's run; a vanished client shows up
  // here as end of file.
  while (alive && registered) {
    CtrlReq req{};
    if (read_full(fd, &req, sizeof req) != Io::kOk || req.magic != kMagic) break;
    if (req.op == static_cast<uint32_t>(CtrlOp::kEnd)) {
      // Report only once every connection of the run has finished, so its bytes, checks
      // and threads' CPU are all counted.
      uint64_t deadline = now_ns() + 10 * kSec;
      while (s->conns_open.load() > 0 && now_ns() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = make_stats(*s, kAckOk);
      (void)write_until(fd, &st, sizeof st, now_ns() + 10 * kSec);
      break;
    }
    st = make_stats(*s, kAckOk);
    if (write_until(fd, &st, sizeof st, now_ns() + 10 * kSec) != Io::kOk) break;
  }
  if (registered) {
    std::lock_guard<std::mutex> lock(g_sessions_mu);
    g_sessions.erase(h.session);
  }
  if (!g_quiet) {
    CpuTimes cpu = process_cpu();
    std::printf(
        "xpress-bench server: run %016llx %s %s: %llu conns, in %.3f GB, out %.3f GB, %llu ops, "
        "process cpu %.2f s, checked %llu, errors %llu\n",
        static_cast<unsigned long long>(h.session), scenario_name(h.scenario),
        status == kAckOk ? "ended" : "refused",
        static_cast<unsigned long long>(s->conns_accepted.load()), s->bytes_in.load() / 1e9,
        s->bytes_out.load() / 1e9, static_cast<unsigned long long>(s->ops.load()),
        static_cast<double>(cpu.total()) / 1e9, static_cast<unsigned long long>(s->checked.load()),
        static_cast<unsigned long long>(s->errors.load()));
    std::fflush(stdout);
  }
  if (g_once) g_stop = true;
}

// ---------------------------------------------------------------------------- data

void handle_connection(int fd) {
  set_nodelay(fd);
  Hello h{};
  if (read_until(fd, &h, sizeof h, now_ns() + 10 * kSec) != Io::kOk) {
    close(fd);
    return;
  }
  HelloAck ack{kMagic, kAckOk};
  if (h.magic != kMagic || h.version != kWireVersion) {
    ack.status = kAckBadHello;
    (void)write_until(fd, &ack, sizeof ack, now_ns() + kSec);
    close(fd);
    return;
  }
  if (h.kind == ConnKind::kControl) {
    serve_control(fd, h);
    close(fd);
    return;
  }
  std::shared_ptr<Session> s = find_session(h.session);
  if (!s || s->hello.scenario != h.scenario) {
    ack.status = kAckUnknownSession;
    (void)write_until(fd, &ack, sizeof ack, now_ns() + kSec);
    close(fd);
    return;
  }
  s->conns_accepted.fetch_add(1);
  s->conns_open.fetch_add(1);
  bool parked = false;
  if (write_until(fd, &ack, sizeof ack, now_ns() + 10 * kSec) == Io::kOk) {
    switch (h.scenario) {
    case Scenario::kStream:
      serve_stream(fd, h, *s);
      break;
    case Scenario::kPingpong:
      serve_pingpong(fd, h, *s);
      break;
    case Scenario::kPs:
    case Scenario::kIncast:
      serve_rpc(fd, h, *s);
      break;
    case Scenario::kConnect:
      parked = serve_connect(fd, h, s);
      break;
    }
  }
  s->thread_cpu_ns.fetch_add(thread_cpu().total());
  if (!parked) {
    close(fd);
    s->conns_open.fetch_sub(1);
  }
}

void* connection_thread(void* arg) {
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  handle_connection(fd);
  g_threads.fetch_sub(1);
  return nullptr;
}

bool spawn(int fd) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kThreadStack);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  g_threads.fetch_add(1);
  int rc = pthread_create(&t, &attr, connection_thread,
                          reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  pthread_attr_destroy(&attr);
  if (rc != 0) g_threads.fetch_sub(1);
  return rc == 0;
}

void on_signal(int) {
  g_stop = true;
}

} // namespace

uint64_t shard_key(uint64_t seed, uint32_t shard) {
  return message_key(seed, 0xFFFF0000ull + shard, 0);
}

void park_connection(int fd, std::shared_ptr<Session> s) {
  g_parking.add(fd, std::move(s));
}

int run_server(const Options& o) {
  g_once = o.once;
  g_quiet = o.quiet;
  if (o.timeout_s > 0) start_watchdog(o.timeout_s);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::string err;
  uint16_t port = 0;
  int lfd = listen_on(o.bind, o.port, &port, &err);
  if (lfd < 0) {
    std::fprintf(stderr, "xpress-bench: %s\n", err.c_str());
    return 1;
  }
  std::printf("xpress-bench server: listening on %s port %u\n", o.bind.c_str(), port);
  std::fflush(stdout);
  g_parking.start();

  while (!g_stop) {
    // Poll with a timeout rather than block in accept, so SIGTERM and --once are noticed.
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (!spawn(fd)) close(fd);
  }
  close(lfd);
  // Give running connections a moment to finish; threads blocked on silent peers are
  // abandoned by exiting without running destructors.
  for (int i = 0; i < 300 && g_threads.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::printf("xpress-bench server: stopped\n");
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(0);
}

} // namespace xb
