// ps: a parameter-server workload modelled on ByteExpress's setting.
//
// The server holds named parameter shards (--shards of each size class in --sizes).  Client
// threads (--clients, each with --conns connections used in turn) issue one operation at a
// time: a fetch (small request naming a shard, large response) with probability
// --fetch-ratio, else a push (large request, small ack).  Sizes follow the --sizes mix for
// both.  Reported: mean/P99 latency per operation type and per size, ops/s, and both
// sides' CPU, i.e. the metrics the ByteExpress results are stated in.
#include <unistd.h>

#include <thread>

#include "rpc.h"
#include "scenarios.h"

namespace xb {

namespace {

struct Rng { // xorshift64*: cheap and deterministic per thread
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

enum { kFetch = 0, kPush = 1 };
const char* const kOpNames[] = {"fetch", "push"};

struct ThreadStats {
  std::vector<Histogram> hist[2]; // per size class
  uint64_t bytes[2] = {0, 0};
};

} // namespace

bool run_ps(RunContext& ctx, Json* params, Json* results) {
  const Options& o = ctx.opt;
  const size_t classes = o.sizes.size();
  params->set("sizes", o.sizes_text);
  Json cls = Json::array();
  for (const auto& c : o.sizes)
    cls.push(c.bytes);
  params->set("size_classes", std::move(cls));
  params->set("fetch_ratio", o.fetch_ratio);
  params->set("clients", o.clients);
  params->set("conns_per_client", o.conns);
  params->set("shards_per_size", o.shards);
  params->set("duration_s", o.duration_s);
  params->set("warmup_s", o.warmup_s);

  PsSetup setup{};
  setup.classes = static_cast<uint32_t>(classes);
  setup.per_class = static_cast<uint32_t>(o.shards);
  for (size_t c = 0; c < classes; ++c)
    setup.sizes[c] = o.sizes[c].bytes;
  if (!ctx.open_control(&setup)) return false;

  // All connections first, so setup cost stays outside the measurement.
  std::vector<std::vector<int>> fds(o.clients);
  bool ok = true;
  for (int t = 0; t < o.clients && ok; ++t) {
    for (int k = 0; k < o.conns && ok; ++k) {
      int fd = ctx.open_data(ctx.data_hello(static_cast<uint32_t>(t * o.conns + k)));
      ok = fd >= 0;
      if (ok) fds[t].push_back(fd);
    }
  }
  if (!ok) {
    for (auto& v : fds)
      for (int fd : v)
        close(fd);
    return false;
  }

  ctx.progress.start("ps", !o.quiet);
  const uint64_t start = now_ns();
  const uint64_t measure_from = start + static_cast<uint64_t>(o.warmup_s * 1e9);
  const uint64_t end = measure_from + static_cast<uint64_t>(o.duration_s * 1e9);
  std::vector<ThreadStats> stats(o.clients);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.clients; ++t) {
    threads.emplace_back([&, t] {
      ThreadStats& st = stats[t];
      for (auto& h : st.hist)
        h.resize(classes);
      std::vector<RpcClient> conns;
      for (int fd : fds[t])
        conns.emplace_back(fd, o.verify);
      Rng rng{mix64(o.seed ^ (0xC0FFEEull + t)) | 1};
      for (uint64_t seq = 0; !ctx.failed(); ++seq) {
        uint64_t t0 = now_ns();
        if (t0 >= end) break;
        RpcClient& c = conns[seq % conns.size()];
        int op = rng.unit() < o.fetch_ratio ? kFetch : kPush;
        double u = rng.unit(), acc = 0;
        size_t k = 0;
        for (; k + 1 < classes; ++k) {
          acc += o.sizes[k].weight;
          if (u < acc) break;
        }
        const uint64_t len = o.sizes[k].bytes;
        RpcClient::Result r;
        if (op == kFetch) {
          auto shard = static_cast<uint32_t>(k * o.shards + rng.next() % o.shards);
          r = c.fetch(shard, len, shard_key(o.seed, shard));
          if (o.verify != Verify::kNone || r == RpcClient::Result::kCorrupt)
            ctx.count_check(r != RpcClient::Result::kCorrupt);
        } else {
          // A corrupt push is counted by the server, which checked it.
          r = c.push(len, message_key(o.seed, 0x10000ull + t, seq));
        }
        uint64_t t1 = now_ns();
        if (r == RpcClient::Result::kIoError) {
          ctx.error(std::string("ps ") + kOpNames[op] + ": " + c.error());
          break;
        }
        if (t0 >= measure_from) {
          st.hist[op][k].record(t1 - t0);
          st.bytes[op] += len;
        }
        ctx.progress.add(len);
      }
    });
  }
  while (now_ns() < measure_from && !ctx.failed())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ctx.mark();
  for (auto& th : threads)
    th.join();
  for (auto& v : fds)
    for (int fd : v)
      close(fd);
  ctx.finish();

  const double secs = ctx.window_s();
  uint64_t all_ops = 0, all_bytes = 0;
  Json by_size = Json::array();
  Json per_op[2];
  for (int op = 0; op < 2; ++op) {
    Histogram merged;
    uint64_t bytes = 0;
    for (size_t k = 0; k < classes; ++k) {
      Histogram h;
      for (const auto& st : stats)
        h.merge(st.hist[op][k]);
      merged.merge(h);
      Json row = Json::object();
      Json lat = latency_json(h);
      row.set("op", kOpNames[op]);
      row.set("size", o.sizes[k].bytes);
      for (const char* f : {"count", "mean_us", "p50_us", "p99_us", "p999_us", "max_us"})
        row.set(f, *lat.find(f));
      by_size.push(std::move(row));
    }
    for (const auto& st : stats)
      bytes += st.bytes[op];
    per_op[op] = Json::object();
    per_op[op].set("ops", merged.count());
    per_op[op].set("ops_per_s", secs > 0 ? merged.count() / secs : 0.0);
    per_op[op].set("gbps", secs > 0 ? bytes * 8 / secs / 1e9 : 0.0);
    per_op[op].set("latency", latency_json(merged));
    all_ops += merged.count();
    all_bytes += bytes;
  }
  results->set("ops", all_ops);
  results->set("ops_per_s", secs > 0 ? all_ops / secs : 0.0);
  results->set("gbps", secs > 0 ? all_bytes * 8 / secs / 1e9 : 0.0);
  double n = static_cast<double>(all_ops);
  results->set("client_cpu_us_per_op", n > 0 ? ctx.client_cpu_s() * 1e6 / n : 0.0);
  results->set("server_cpu_us_per_op", n > 0 ? ctx.server_cpu_s() * 1e6 / n : 0.0);
  results->set("fetch", std::move(per_op[kFetch]));
  results->set("push", std::move(per_op[kPush]));
  results->set("by_size", std::move(by_size));
  return true;
}

} // namespace xb
