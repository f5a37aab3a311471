// Client-side plumbing shared by every scenario: the control channel to the server, data
// connection setup, the measured window, error collection, progress line and the report
// envelope (client and server CPU, integrity).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "histogram.h"
#include "json.h"
#include "net.h"
#include "options.h"
#include "sysstat.h"
#include "wire.h"

namespace xb {

// Live progress on stderr: counters are bumped by workers, printed once a second.
class Progress {
public:
  ~Progress() { stop(); }
  void start(const std::string& label, bool enabled);
  void stop();
  void add(uint64_t bytes, uint64_t ops = 1) {
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    ops_.fetch_add(ops, std::memory_order_relaxed);
  }

private:
  void loop();
  std::string label_;
  std::atomic<uint64_t> bytes_{0}, ops_{0};
  std::atomic<bool> run_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_; // stop() ends the wait at once
};

struct LocalSample {
  uint64_t wall_ns = 0;
  CpuTimes cpu;
  uint64_t rss_kb = 0;
};
LocalSample local_sample();

class RunContext {
public:
  explicit RunContext(const Options& o);
  ~RunContext();

  const Options& opt;
  Endpoint ep;
  uint64_t session = 0;
  Progress progress;
  // Payload checks done by this client and how many failed.
  std::atomic<uint64_t> checked{0}, corrupt{0};

  // Opens the control connection (the server creates the run's state; ps passes its
  // shard table as `setup`).  The start of the measured window defaults to this moment.
  bool open_control(const PsSetup* setup = nullptr);
  // A Hello for data connection `index`, filled with the common fields.
  Hello data_hello(uint32_t index) const;
  // Connects and completes the Hello/ack handshake; -1 on failure (error recorded).
  int open_data(const Hello& h);
  // Opens data connections 0..n-1 (each Hello from data_hello, then `adjust`); on
  // any failure closes those already open and returns false.
  bool open_data_all(int n, std::vector<int>* fds,
                     const std::function<void(Hello&)>& adjust = nullptr);
  // The server's counters now.
  bool server_snapshot(ServerStats* out);
  // Starts the measured window on both sides.
  void mark();
  // Ends the window: the server replies once its connections for this run are closed.
  // Idempotent; run_client calls it for runners that stopped early.
  void finish();

  // Records an error; workers poll failed() to stop early.
  void error(const std::string& msg);
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void count_check(bool ok) {
    checked.fetch_add(1, std::memory_order_relaxed);
    if (!ok) corrupt.fetch_add(1, std::memory_order_relaxed);
  }

  // Seconds of the measured window (client side).
  double window_s() const;
  double client_cpu_s() const;
  double server_cpu_s() const;
  uint64_t server_bytes() const; // bytes in + out on the server during the window

  // The complete report: scenario, params, results, client, server, integrity, errors.
  Json report(Json params, Json results) const;
  bool ok() const;

private:
  int ctrl_fd_ = -1;
  ServerStats srv_mark_{}, srv_end_{};
  LocalSample cli_mark_, cli_end_;
  bool have_end_ = false;
  bool finished_ = false;
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::vector<std::string> errors_;
  uint64_t errors_dropped_ = 0;
};

// Latency summary of a histogram of nanoseconds, in microseconds.
Json latency_json(const Histogram& h);

// Runs one client scenario and prints its report; returns the exit status.
int run_client(const Options& o);

// Kills the process with exit status 3 after `seconds`, so no run can hang.
void start_watchdog(double seconds);

} // namespace xb
