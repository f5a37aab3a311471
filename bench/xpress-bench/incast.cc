// incast: N senders to one receiver at once.  Every round, all sender threads are released
// together by a barrier and each moves --size bytes over its own connection (push to the
// server, or with --reverse the server sends to the client: the classic fan-in at the
// client's receiver).  A round completes when the last sender's transfer is acknowledged;
// the tail of that completion time is what incast congestion (and a transport's receive
// credit and send window management) shows up in.
#include <unistd.h>

#include <barrier>
#include <thread>

#include "rpc.h"
#include "scenarios.h"

namespace xb {

bool run_incast(RunContext& ctx, Json* params, Json* results) {
  const Options& o = ctx.opt;
  const int n = o.senders;
  params->set("senders", n);
  params->set("size", o.size);
  params->set("rounds", o.rounds);
  params->set("warmup_rounds", o.warmup_rounds);
  params->set("direction", o.reverse ? "server_to_client" : "client_to_server");
  if (!ctx.open_control()) return false;

  std::vector<int> fds;
  if (!ctx.open_data_all(n, &fds)) return false;

  const int total = o.warmup_rounds + o.rounds;
  std::vector<uint64_t> round_start(total, 0);
  std::vector<uint64_t> done(static_cast<size_t>(total) * n, 0);
  int phase = 0;
  // Runs once per round after every sender arrived and before any is released: the round's
  // start time, and the start of the measured window after the warm-up rounds.
  auto on_round = [&]() noexcept {
    if (phase >= total) return;
    if (phase == o.warmup_rounds) ctx.mark();
    round_start[phase++] = now_ns();
  };
  std::barrier sync(n, on_round);

  ctx.progress.start("incast", !o.quiet);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      RpcClient c(fds[i], o.verify);
      for (int r = 0; r < total; ++r) {
        sync.arrive_and_wait();
        uint64_t key = message_key(o.seed, static_cast<uint64_t>(i), static_cast<uint64_t>(r));
        RpcClient::Result res = o.reverse ? c.get(o.size, key) : c.push(o.size, key);
        done[static_cast<size_t>(r) * n + i] = now_ns();
        if (o.reverse && (o.verify != Verify::kNone || res == RpcClient::Result::kCorrupt))
          ctx.count_check(res != RpcClient::Result::kCorrupt);
        if (res == RpcClient::Result::kIoError) {
          ctx.error("incast sender " + std::to_string(i) + ": " + c.error());
          // Leave the barrier so the other senders are not left waiting for this one.
          sync.arrive_and_drop();
          return;
        }
        ctx.progress.add(o.size);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  for (int fd : fds)
    close(fd);
  ctx.finish();

  Histogram rounds, senders;
  uint64_t sum_ns = 0;
  for (int r = o.warmup_rounds; r < total; ++r) {
    uint64_t last = round_start[r];
    bool complete = round_start[r] != 0;
    for (int i = 0; i < n; ++i) {
      uint64_t d = done[static_cast<size_t>(r) * n + i];
      if (d == 0 || d < round_start[r]) {
        complete = false;
        continue;
      }
      senders.record(d - round_start[r]);
      last = std::max(last, d);
    }
    if (!complete) continue;
    rounds.record(last - round_start[r]);
    sum_ns += last - round_start[r];
  }
  double bytes = static_cast<double>(rounds.count()) * n * static_cast<double>(o.size);
  results->set("rounds_completed", rounds.count());
  results->set("gbps", sum_ns ? bytes * 8 / static_cast<double>(sum_ns) : 0.0);
  // Round: start to last sender done.  Sender: start to each sender done.
  results->set("round_latency", latency_json(rounds));
  results->set("sender_latency", latency_json(senders));
  double gb = bytes / 1e9;
  results->set("client_cpu_s_per_gb", gb > 0 ? ctx.client_cpu_s() / gb : 0.0);
  results->set("server_cpu_s_per_gb", gb > 0 ? ctx.server_cpu_s() / gb : 0.0);
  return true;
}

} // namespace xb
