// stream: bulk throughput of fixed-size messages over N parallel connections, and what it
// costs in CPU on both sides (CPU seconds per GB moved).
//
// Forward (default): the client sends for --duration, half-closes, and the server answers
// with a trailer (bytes and messages received, payload checks) so the client can confirm
// that every byte arrived; throughput is bytes / time until the last trailer.
// Reverse: the server sends for the duration carried in the Hello, then half-closes.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "pattern.h"
#include "scenarios.h"

namespace xb {

namespace {

constexpr uint64_t kSec = 1000000000ull;

// Sends messages until `end_ns`; returns messages sent (or stops on error).
Io send_stream(int fd, uint64_t size, uint64_t seed, uint32_t index, uint64_t end_ns,
               uint64_t* msgs, Progress* progress, const std::atomic<bool>* stop) {
  PatternBuffer tx(size);
  uint64_t seq = 0;
  while (now_ns() < end_ns && !(stop && stop->load(std::memory_order_relaxed))) {
    uint8_t* msg = tx.stamp(size, message_key(seed, index, seq));
    maybe_corrupt(msg, size, seq);
    Io r = write_full(fd, msg, size);
    if (r != Io::kOk) return r;
    ++seq;
    if (progress) progress->add(size);
  }
  *msgs = seq;
  return Io::kOk;
}

struct RecvResult {
  Io io = Io::kOk;
  uint64_t bytes = 0, msgs = 0, checked = 0, errors = 0;
  bool partial = false; // end of stream in the middle of a message
};

// Receives whole messages until end of stream, checking each.
RecvResult recv_stream(int fd, uint64_t size, uint64_t seed, uint32_t index, Verify mode,
                       Progress* progress) {
  RecvResult res;
  std::vector<uint8_t> rx(size);
  PatternBuffer scratch(mode == Verify::kFull ? size : 0);
  for (;;) {
    size_t got = 0;
    Io r = read_full(fd, rx.data(), size, &got);
    res.bytes += got;
    if (r == Io::kEof) {
      res.partial = got != 0;
      return res;
    }
    if (r != Io::kOk) {
      res.io = r;
      return res;
    }
    if (mode != Verify::kNone) {
      ++res.checked;
      if (!verify_message(rx.data(), size, message_key(seed, index, res.msgs), mode, &scratch))
        ++res.errors;
    }
    ++res.msgs;
    if (progress) progress->add(size);
  }
}

} // namespace

// ---------------------------------------------------------------------------- server

void serve_stream(int fd, const Hello& h, Session& s) {
  if (h.msg_size == 0 || h.msg_size > kMaxMessage) {
    s.errors.fetch_add(1);
    return;
  }
  if (h.flags & kFlagReverse) {
    uint64_t msgs = 0;
    Io r = send_stream(fd, h.msg_size, h.seed, h.conn_index, now_ns() + h.duration_ns, &msgs,
                       nullptr, nullptr);
    s.bytes_out.fetch_add(msgs * h.msg_size);
    s.ops.fetch_add(msgs);
    if (r != Io::kOk) return;
    shutdown(fd, SHUT_WR);
    // Wait for the client's close so the run's END sees this connection finished.
    char buf[64];
    while (read_until(fd, buf, sizeof buf, now_ns() + 10 * kSec) == Io::kOk) {
    }
    return;
  }
  RecvResult res = recv_stream(fd, h.msg_size, h.seed, h.conn_index, h.verify, nullptr);
  s.bytes_in.fetch_add(res.bytes);
  s.ops.fetch_add(res.msgs);
  s.checked.fetch_add(res.checked);
  s.errors.fetch_add(res.errors + (res.partial ? 1 : 0));
  if (res.io != Io::kOk) return;
  StreamTrailer t{res.bytes, res.msgs, res.checked, res.errors};
  (void)write_until(fd, &t, sizeof t, now_ns() + 10 * kSec);
}

// ---------------------------------------------------------------------------- client

bool run_stream(RunContext& ctx, Json* params, Json* results) {
  const Options& o = ctx.opt;
  params->set("size", o.size);
  params->set("conns", o.conns);
  params->set("duration_s", o.duration_s);
  params->set("direction", o.reverse ? "server_to_client" : "client_to_server");
  if (!ctx.open_control()) return false;

  const auto dur = static_cast<uint64_t>(o.duration_s * 1e9);
  std::vector<int> fds;
  if (!ctx.open_data_all(o.conns, &fds, [&](Hello& h) {
        h.duration_ns = dur;
        if (o.reverse) h.flags |= kFlagReverse;
      }))
    return false;

  ctx.progress.start("stream", !o.quiet);
  ctx.mark();
  const uint64_t start = now_ns(), end = start + dur;
  std::vector<uint64_t> bytes(fds.size(), 0), done_ns(fds.size(), 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < fds.size(); ++i) {
    threads.emplace_back([&, i] {
      int fd = fds[i];
      auto index = static_cast<uint32_t>(i);
      if (o.reverse) {
        RecvResult res = recv_stream(fd, o.size, o.seed, index, o.verify, &ctx.progress);
        done_ns[i] = now_ns();
        bytes[i] = res.bytes;
        ctx.checked.fetch_add(res.checked);
        ctx.corrupt.fetch_add(res.errors);
        if (res.io != Io::kOk) ctx.error("stream receive: " + io_text(res.io));
        if (res.partial) ctx.error("stream ended inside a message");
        return;
      }
      uint64_t msgs = 0;
      Io r = send_stream(fd, o.size, o.seed, index, end, &msgs, &ctx.progress, &stop);
      if (r != Io::kOk) {
        ctx.error("stream send: " + io_text(r));
        stop = true;
        return;
      }
      shutdown(fd, SHUT_WR);
      StreamTrailer t{};
      r = read_until(fd, &t, sizeof t, now_ns() + 30 * kSec);
      done_ns[i] = now_ns();
      if (r != Io::kOk) {
        ctx.error("waiting for the receiver's byte count: " + io_text(r));
        return;
      }
      bytes[i] = t.bytes;
      if (t.bytes != msgs * o.size || t.msgs != msgs)
        ctx.error("receiver got " + std::to_string(t.bytes) + " bytes, sender sent " +
                  std::to_string(msgs * o.size));
    });
  }
  for (auto& t : threads)
    t.join();
  for (int fd : fds)
    close(fd);
  ctx.finish();

  uint64_t total = 0, last = start;
  double min_g = 1e300, max_g = 0;
  for (size_t i = 0; i < fds.size(); ++i) {
    total += bytes[i];
    last = std::max(last, done_ns[i]);
    double g = done_ns[i] > start ? bytes[i] * 8.0 / (done_ns[i] - start) : 0;
    min_g = std::min(min_g, g);
    max_g = std::max(max_g, g);
  }
  double secs = static_cast<double>(last - start) / 1e9;
  double gb = static_cast<double>(total) / 1e9;
  results->set("gbps", secs > 0 ? gb * 8 / secs : 0.0);
  results->set("bytes", total);
  results->set("msgs", total / o.size);
  results->set("seconds", secs);
  results->set("conn_gbps_min", fds.empty() ? 0.0 : min_g);
  results->set("conn_gbps_max", max_g);
  results->set("client_cpu_s_per_gb", gb > 0 ? ctx.client_cpu_s() / gb : 0.0);
  results->set("server_cpu_s_per_gb", gb > 0 ? ctx.server_cpu_s() / gb : 0.0);
  return true;
}

} // namespace xb
