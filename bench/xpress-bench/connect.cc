// connect: what connections cost.
//
// Short connections (--count, over --parallel threads): connect, send the Hello, read the
// server's first byte (its ack), close.  Reports the rate and the connect, time-to-first-
// byte and total latency: an RDMA transport's connection manager exchange, QP creation
// and memory registration all land here, and setup cost is where such transports lose to
// TCP for short-lived connections.
//
// Long-lived connections (--long M): M connections opened and held idle for --hold
// seconds; the RSS growth of both processes divided by M is the memory per connection
// (the server parks idle connections in one poll thread, so the figure is the
// transport's, not our thread stacks').  Kernel TCP buffers are not in any RSS, so the
// host-wide /proc/net/sockstat TCP memory growth is reported beside it.
#include <unistd.h>

#include <chrono>
#include <thread>

#include "scenarios.h"

namespace xb {

namespace {
constexpr uint64_t kSec = 1000000000ull;
double secs(uint64_t ns) {
  return static_cast<double>(ns) / 1e9;
}
} // namespace

bool serve_connect(int fd, const Hello& h, const std::shared_ptr<Session>& s) {
  s->ops.fetch_add(1, std::memory_order_relaxed);
  if (h.flags & kFlagPark) {
    park_connection(fd, s);
    return true;
  }
  // Short connection: the ack was the first byte; wait for the client to close first so
  // TIME_WAIT stays on the client, as with a typical request/response client.
  char buf[64];
  while (read_until(fd, buf, sizeof buf, now_ns() + 10 * kSec) == Io::kOk) {
  }
  return false;
}

bool run_connect(RunContext& ctx, Json* params, Json* results) {
  const Options& o = ctx.opt;
  params->set("count", o.count);
  params->set("parallel", o.parallel);
  params->set("long", o.long_conns);
  params->set("hold_s", o.hold_s);
  if (!ctx.open_control()) return false;
  ctx.progress.start("connect", !o.quiet);
  ctx.mark();

  if (o.count > 0) {
    ServerStats s0{}, s1{};
    ctx.server_snapshot(&s0);
    CpuTimes c0 = process_cpu();
    const uint64_t t0 = now_ns();
    struct PerThread {
      Histogram connect, ttfb, total;
    };
    std::vector<PerThread> per(o.parallel);
    std::vector<std::thread> threads;
    for (int t = 0; t < o.parallel; ++t) {
      threads.emplace_back([&, t] {
        int mine = o.count / o.parallel + (t < o.count % o.parallel ? 1 : 0);
        for (int k = 0; k < mine && !ctx.failed(); ++k) {
          Hello h = ctx.data_hello(static_cast<uint32_t>(t));
          HelloAck ack{};
          std::string err;
          uint64_t a = now_ns();
          int fd = connect_to(ctx.ep, &err);
          if (fd < 0) {
            ctx.error(err);
            return;
          }
          uint64_t b = now_ns();
          Io r = write_full(fd, &h, sizeof h);
          if (r == Io::kOk) r = read_full(fd, &ack, sizeof ack);
          uint64_t c = now_ns();
          close(fd);
          uint64_t d = now_ns();
          if (r != Io::kOk || ack.status != kAckOk) {
            ctx.error("short connection: " + (r != Io::kOk ? io_text(r) : "refused"));
            return;
          }
          per[t].connect.record(b - a);
          per[t].ttfb.record(c - a);
          per[t].total.record(d - a);
          ctx.progress.add(0);
        }
      });
    }
    for (auto& th : threads)
      th.join();
    const uint64_t t1 = now_ns();
    CpuTimes c1 = process_cpu();
    // The server's counters settle once it saw the closes; a short pause keeps the
    // last connections' teardown inside the server CPU figure.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ctx.server_snapshot(&s1);
    Histogram hc, ht, hx;
    for (auto& p : per) {
      hc.merge(p.connect);
      ht.merge(p.ttfb);
      hx.merge(p.total);
    }
    double n = static_cast<double>(hx.count());
    Json sh = Json::object();
    sh.set("conns", hx.count());
    sh.set("conns_per_s", t1 > t0 ? n / secs(t1 - t0) : 0.0);
    sh.set("client_cpu_us_per_conn", n > 0 ? (c1.total() - c0.total()) / 1e3 / n : 0.0);
    sh.set("server_cpu_us_per_conn",
           n > 0 ? (s1.cpu_user_ns + s1.cpu_sys_ns - s0.cpu_user_ns - s0.cpu_sys_ns) / 1e3 / n
                 : 0.0);
    sh.set("connect_latency", latency_json(hc));
    sh.set("ttfb_latency", latency_json(ht));
    sh.set("total_latency", latency_json(hx));
    results->set("short", std::move(sh));
  }

  if (o.long_conns > 0 && !ctx.failed()) {
    ServerStats s0{}, s1{};
    ctx.server_snapshot(&s0);
    const uint64_t rss0 = rss_kb(), tcp0 = tcp_mem_pages();
    Histogram setup;
    std::vector<int> fds;
    for (int m = 0; m < o.long_conns && !ctx.failed(); ++m) {
      Hello h = ctx.data_hello(static_cast<uint32_t>(m));
      h.flags |= kFlagPark;
      uint64_t a = now_ns();
      int fd = ctx.open_data(h);
      if (fd < 0) break;
      setup.record(now_ns() - a);
      fds.push_back(fd);
      ctx.progress.add(0);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.hold_s));
    const uint64_t rss1 = rss_kb(), tcp1 = tcp_mem_pages();
    ctx.server_snapshot(&s1);
    for (int fd : fds)
      close(fd);
    const double m = static_cast<double>(fds.size());
    auto per = [&](double kb) { return m > 0 ? kb / m : 0.0; };
    const double cli_kb = static_cast<double>(rss1) - static_cast<double>(rss0);
    const double srv_kb = static_cast<double>(s1.rss_kb) - static_cast<double>(s0.rss_kb);
    const double tcp_kb = (static_cast<double>(tcp1) - static_cast<double>(tcp0)) *
                          static_cast<double>(sysconf(_SC_PAGESIZE)) / 1024;
    Json lg = Json::object();
    lg.set("conns", fds.size());
    lg.set("client_kb_per_conn", per(cli_kb));
    lg.set("server_kb_per_conn", per(srv_kb));
    lg.set("kernel_tcp_kb_per_conn", per(tcp_kb));
    lg.set("client_rss_delta_kb", cli_kb);
    lg.set("server_rss_delta_kb", srv_kb);
    lg.set("server_conns_open", s1.conns_open);
    lg.set("setup_latency", latency_json(setup));
    results->set("long", std::move(lg));
  }
  ctx.finish();
  return true;
}

} // namespace xb
