// pingpong: request/response latency of one message size.  Each connection has its own
// thread doing strictly one round trip at a time (write SIZE bytes, read SIZE bytes back),
// so the histogram is pure transport round-trip time with no queueing inside the client.
#include <unistd.h>

#include <cstring>
#include <thread>

#include "pattern.h"
#include "scenarios.h"

namespace xb {

void serve_pingpong(int fd, const Hello& h, Session& s) {
  if (h.msg_size == 0 || h.msg_size > kMaxMessage) {
    s.errors.fetch_add(1);
    return;
  }
  // A pure echo: the client checks what comes back against what it sent, so the server adds
  // no work beyond the transport's.
  std::vector<uint8_t> buf(h.msg_size);
  uint64_t n = 0;
  for (;;) {
    size_t got = 0;
    Io r = read_full(fd, buf.data(), buf.size(), &got);
    if (r == Io::kEof && got != 0) s.errors.fetch_add(1);
    if (r != Io::kOk) break;
    maybe_corrupt(buf.data(), buf.size(), n);
    if (write_full(fd, buf.data(), buf.size()) != Io::kOk) break;
    ++n;
  }
  s.ops.fetch_add(n);
  s.bytes_in.fetch_add(n * h.msg_size);
  s.bytes_out.fetch_add(n * h.msg_size);
}

bool run_pingpong(RunContext& ctx, Json* params, Json* results) {
  const Options& o = ctx.opt;
  params->set("size", o.size);
  params->set("conns", o.conns);
  params->set("duration_s", o.duration_s);
  params->set("warmup_s", o.warmup_s);
  params->set("iters", o.iters);
  if (!ctx.open_control()) return false;

  std::vector<int> fds;
  if (!ctx.open_data_all(o.conns, &fds)) return false;

  ctx.progress.start("pingpong", !o.quiet);
  const uint64_t start = now_ns();
  const uint64_t measure_from = start + static_cast<uint64_t>(o.warmup_s * 1e9);
  const uint64_t end = measure_from + static_cast<uint64_t>(o.duration_s * 1e9);
  std::vector<Histogram> hists(fds.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < fds.size(); ++i) {
    threads.emplace_back([&, i] {
      const size_t n = o.size;
      PatternBuffer tx(n);
      std::vector<uint8_t> rx(n);
      Histogram& h = hists[i];
      for (uint64_t seq = 0; !ctx.failed(); ++seq) {
        // The message is made before the clock starts, so the round trip
        // timed is the transport's alone, as perftest's: stamping a 64 B
        // message takes about 400 instructions, 0.5-1 us under TCG.
        const uint8_t* msg = tx.stamp(n, message_key(o.seed, i, seq));
        uint64_t t0 = now_ns();
        if (t0 >= end || (o.iters && h.count() >= o.iters)) break;
        Io r = write_full(fds[i], msg, n);
        if (r == Io::kOk) r = read_full(fds[i], rx.data(), n);
        uint64_t t1 = now_ns();
        if (r != Io::kOk) {
          ctx.error("pingpong: " + io_text(r));
          break;
        }
        if (t0 >= measure_from) h.record(t1 - t0);
        ctx.progress.add(2 * n);
        // The echo must be exactly what was sent: stamps only (sample) or every byte (full).
        if (o.verify == Verify::kFull) {
          ctx.count_check(std::memcmp(msg, rx.data(), n) == 0);
        } else if (o.verify == Verify::kSample) {
          ctx.count_check(
              verify_message(rx.data(), n, message_key(o.seed, i, seq), Verify::kSample, nullptr));
        }
      }
    });
  }
  // The measured window (and both sides' CPU) starts after the warm-up.
  while (now_ns() < measure_from && !ctx.failed())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ctx.mark();
  for (auto& t : threads)
    t.join();
  for (int fd : fds)
    close(fd);
  ctx.finish();

  Histogram all;
  for (const auto& h : hists)
    all.merge(h);
  double secs = ctx.window_s();
  results->set("round_trips", all.count());
  results->set("round_trips_per_s", secs > 0 ? all.count() / secs : 0.0);
  results->set("latency", latency_json(all));
  double ops = static_cast<double>(all.count());
  results->set("client_cpu_us_per_rt", ops > 0 ? ctx.client_cpu_s() * 1e6 / ops : 0.0);
  results->set("server_cpu_us_per_rt", ops > 0 ? ctx.server_cpu_s() * 1e6 / ops : 0.0);
  return true;
}

} // namespace xb
