// Client plumbing: control channel, data connection handshake, measured window, report
// envelope, progress line and watchdog.
#include "client.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "pattern.h"
#include "report.h"
#include "scenarios.h"

namespace xb {

namespace {
constexpr uint64_t kSec = 1000000000ull;
constexpr size_t kMaxErrors = 20;

// What the watchdog prints on stdout if it fires (--json runs only); set before it starts.
std::string g_timeout_json;
// Set once the report is being printed: the watchdog then leaves stdout alone.
std::atomic<bool> g_reporting{false};

double secs(uint64_t ns) {
  return static_cast<double>(ns) / 1e9;
}
} // namespace

// ---------------------------------------------------------------------------- progress

void Progress::start(const std::string& label, bool enabled) {
  if (!enabled || run_) return;
  label_ = label;
  run_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Progress::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!run_.exchange(false)) return;
  }
  cv_.notify_all();
  thread_.join();
}

void Progress::loop() {
  const bool tty = isatty(2);
  // A terminal gets one line updated in place; a log file a line every 5 s.
  const int every = tty ? 1 : 5;
  uint64_t t0 = now_ns(), last_t = t0, last_b = 0, last_o = 0;
  while (true) {
    {
      // One wake-up per line, none in between (each is a CPU taken from
      // the measured threads on a small test bed).
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(every), [this] { return !run_.load(); })) break;
    }
    uint64_t t = now_ns(), b = bytes_.load(), o = ops_.load();
    double dt = secs(t - last_t);
    std::fprintf(stderr, "%sxpress-bench %s: %5.1fs  %10llu ops  %9.0f op/s  %8.3f Gb/s%s",
                 tty ? "\r" : "", label_.c_str(), secs(t - t0), static_cast<unsigned long long>(o),
                 static_cast<double>(o - last_o) / dt,
                 static_cast<double>(b - last_b) * 8 / dt / 1e9, tty ? "  " : "\n");
    last_t = t;
    last_b = b;
    last_o = o;
  }
  if (tty && last_t != t0) std::fprintf(stderr, "\r%78s\r", ""); // a line was printed
}

// ---------------------------------------------------------------------------- context

LocalSample local_sample() {
  LocalSample s;
  s.wall_ns = now_ns();
  s.cpu = process_cpu();
  s.rss_kb = rss_kb();
  return s;
}

RunContext::RunContext(const Options& o) : opt(o) {
  // Unique enough across concurrent clients of one server: time, pid and an address.
  session =
      mix64(now_ns() ^ (static_cast<uint64_t>(getpid()) << 32) ^ reinterpret_cast<uintptr_t>(this));
  // Until the control connection is up the window starts now, so a run that cannot reach
  // the server still reports sane numbers.
  cli_mark_ = local_sample();
}

RunContext::~RunContext() {
  progress.stop();
  if (ctrl_fd_ >= 0) close(ctrl_fd_);
}

void RunContext::error(const std::string& msg) {
  failed_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  if (errors_.size() >= kMaxErrors) {
    ++errors_dropped_;
    return;
  }
  // Several workers often fail the same way at once; report each message once.
  for (const auto& e : errors_)
    if (e == msg) return;
  errors_.push_back(msg);
  std::fprintf(stderr, "xpress-bench: error: %s\n", msg.c_str());
}

bool RunContext::open_control(const PsSetup* setup) {
  std::string err;
  if (!resolve(opt.host, opt.port, &ep, &err)) {
    error(err);
    return false;
  }
  ctrl_fd_ = connect_to(ep, &err);
  if (ctrl_fd_ < 0) {
    error(err);
    return false;
  }
  Hello h = data_hello(0);
  h.kind = ConnKind::kControl;
  uint64_t deadline = now_ns() + 30 * kSec;
  Io r = write_until(ctrl_fd_, &h, sizeof h, deadline);
  if (r == Io::kOk && setup) r = write_until(ctrl_fd_, setup, sizeof *setup, deadline);
  ServerStats st{};
  if (r == Io::kOk) r = read_until(ctrl_fd_, &st, sizeof st, deadline);
  if (r != Io::kOk) {
    error("control connection to " + ep.text + ": " + io_text(r));
    return false;
  }
  if (st.magic != kMagic) {
    error("the server at " + ep.text + " is not an xpress-bench server of this version");
    return false;
  }
  if (st.status != kAckOk) {
    error("the server refused the run (status " + std::to_string(st.status) + ")");
    return false;
  }
  srv_mark_ = st;
  cli_mark_ = local_sample();
  return true;
}

Hello RunContext::data_hello(uint32_t index) const {
  Hello h{};
  h.magic = kMagic;
  h.version = kWireVersion;
  h.kind = ConnKind::kData;
  h.scenario = opt.scenario;
  h.session = session;
  h.conn_index = index;
  h.msg_size = opt.size;
  h.seed = opt.seed;
  h.verify = opt.verify;
  return h;
}

bool RunContext::open_data_all(int n, std::vector<int>* fds,
                               const std::function<void(Hello&)>& adjust) {
  for (int i = 0; i < n; ++i) {
    Hello h = data_hello(static_cast<uint32_t>(i));
    if (adjust) adjust(h);
    int fd = open_data(h);
    if (fd < 0) {
      for (int f : *fds)
        close(f);
      fds->clear();
      return false;
    }
    fds->push_back(fd);
  }
  return true;
}

int RunContext::open_data(const Hello& h) {
  std::string err;
  int fd = connect_to(ep, &err);
  if (fd < 0) {
    error(err);
    return -1;
  }
  uint64_t deadline = now_ns() + 30 * kSec;
  HelloAck ack{};
  Io r = write_until(fd, &h, sizeof h, deadline);
  if (r == Io::kOk) r = read_until(fd, &ack, sizeof ack, deadline);
  if (r != Io::kOk || ack.magic != kMagic || ack.status != kAckOk) {
    error("data connection handshake with " + ep.text +
          " failed: " + (r != Io::kOk ? io_text(r) : "status " + std::to_string(ack.status)));
    close(fd);
    return -1;
  }
  return fd;
}

bool RunContext::server_snapshot(ServerStats* out) {
  if (ctrl_fd_ < 0) return false;
  CtrlReq req{kMagic, static_cast<uint32_t>(CtrlOp::kSnapshot)};
  uint64_t deadline = now_ns() + 30 * kSec;
  Io r = write_until(ctrl_fd_, &req, sizeof req, deadline);
  if (r == Io::kOk) r = read_until(ctrl_fd_, out, sizeof *out, deadline);
  if (r != Io::kOk || out->magic != kMagic) {
    error("control snapshot: " + io_text(r));
    return false;
  }
  return true;
}

void RunContext::mark() {
  ServerStats st{};
  if (server_snapshot(&st)) srv_mark_ = st;
  cli_mark_ = local_sample();
}

void RunContext::finish() {
  if (finished_) return;
  finished_ = true;
  cli_end_ = local_sample();
  progress.stop();
  if (ctrl_fd_ < 0) return;
  CtrlReq req{kMagic, static_cast<uint32_t>(CtrlOp::kEnd)};
  // The server waits up to 10 s for this run's connections to close before answering.
  uint64_t deadline = now_ns() + 30 * kSec;
  Io r = write_until(ctrl_fd_, &req, sizeof req, deadline);
  if (r == Io::kOk) r = read_until(ctrl_fd_, &srv_end_, sizeof srv_end_, deadline);
  if (r != Io::kOk || srv_end_.magic != kMagic) {
    error("control end of run: " + io_text(r));
    return;
  }
  have_end_ = true;
}

double RunContext::window_s() const {
  uint64_t end = cli_end_.wall_ns ? cli_end_.wall_ns : now_ns();
  return secs(end - cli_mark_.wall_ns);
}

double RunContext::client_cpu_s() const {
  return secs(cli_end_.cpu.total() - cli_mark_.cpu.total());
}

double RunContext::server_cpu_s() const {
  if (!have_end_) return 0;
  return secs(srv_end_.cpu_user_ns + srv_end_.cpu_sys_ns - srv_mark_.cpu_user_ns -
              srv_mark_.cpu_sys_ns);
}

uint64_t RunContext::server_bytes() const {
  if (!have_end_) return 0;
  return srv_end_.bytes_in + srv_end_.bytes_out - srv_mark_.bytes_in - srv_mark_.bytes_out;
}

bool RunContext::ok() const {
  return !failed() && corrupt == 0 && have_end_ && srv_end_.errors == 0;
}

Json RunContext::report(Json params, Json results) const {
  Json r = Json::object();
  r.set("tool", "xpress-bench");
  r.set("version", 1);
  r.set("scenario", scenario_name(opt.scenario));
  r.set("label", opt.label);
  r.set("unix_time", static_cast<int64_t>(std::time(nullptr)));
  r.set("ok", ok());
  r.set("params", std::move(params));
  r.set("results", std::move(results));

  Json c = Json::object();
  c.set("cpu_user_s", secs(cli_end_.cpu.user_ns - cli_mark_.cpu.user_ns));
  c.set("cpu_sys_s", secs(cli_end_.cpu.sys_ns - cli_mark_.cpu.sys_ns));
  c.set("cpu_s", client_cpu_s());
  c.set("wall_s", window_s());
  c.set("rss_kb", cli_end_.rss_kb);
  c.set("preload", preload_env());
  r.set("client", std::move(c));

  if (have_end_) {
    const ServerStats &a = srv_mark_, &b = srv_end_;
    Json s = Json::object();
    s.set("cpu_user_s", secs(b.cpu_user_ns - a.cpu_user_ns));
    s.set("cpu_sys_s", secs(b.cpu_sys_ns - a.cpu_sys_ns));
    s.set("cpu_s", server_cpu_s());
    s.set("thread_cpu_s", secs(b.thread_cpu_ns));
    s.set("wall_s", secs(b.wall_ns - a.wall_ns));
    s.set("rss_kb", b.rss_kb);
    s.set("bytes_in", b.bytes_in - a.bytes_in);
    s.set("bytes_out", b.bytes_out - a.bytes_out);
    s.set("ops", b.ops - a.ops);
    s.set("conns", b.conns_accepted);
    s.set("pid", b.pid);
    s.set("preload", std::string(b.preload, strnlen(b.preload, sizeof b.preload)));
    r.set("server", std::move(s));
    r.set("cpu_total_s", client_cpu_s() + server_cpu_s());
  } else {
    r.set("server", Json());
    r.set("cpu_total_s", Json());
  }

  Json in = Json::object();
  in.set("mode", verify_name(opt.verify));
  in.set("client_checked", checked.load());
  in.set("client_errors", corrupt.load());
  in.set("server_checked", have_end_ ? Json(srv_end_.checked) : Json());
  in.set("server_errors", have_end_ ? Json(srv_end_.errors) : Json());
  in.set("ok", corrupt == 0 && have_end_ && srv_end_.errors == 0);
  r.set("integrity", std::move(in));

  Json errs = Json::array();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : errors_)
      errs.push(e);
    if (errors_dropped_) errs.push(std::to_string(errors_dropped_) + " more errors not shown");
  }
  r.set("errors", std::move(errs));
  return r;
}

Json latency_json(const Histogram& h) {
  auto us = [](double ns) { return static_cast<double>(static_cast<int64_t>(ns + 0.5)) / 1000.0; };
  Json j = Json::object();
  j.set("count", h.count());
  j.set("mean_us", us(h.mean()));
  j.set("min_us", us(static_cast<double>(h.min())));
  j.set("p50_us", us(static_cast<double>(h.percentile(50))));
  j.set("p90_us", us(static_cast<double>(h.percentile(90))));
  j.set("p99_us", us(static_cast<double>(h.percentile(99))));
  j.set("p999_us", us(static_cast<double>(h.percentile(99.9))));
  j.set("max_us", us(static_cast<double>(h.max())));
  return j;
}

// ---------------------------------------------------------------------------- run

void start_watchdog(double seconds) {
  std::thread([seconds] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    // Whatever is stuck (a transport that never delivers, a peer that vanished), a run ends:
    // a JSON consumer still gets one line saying what happened.
    if (g_reporting) { // the run finished just in time; let it print and exit
      std::this_thread::sleep_for(std::chrono::seconds(10));
      _exit(3);
    }
    if (!g_timeout_json.empty()) std::printf("%s\n", g_timeout_json.c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "xpress-bench: hard timeout after %.0f s, exiting\n", seconds);
    _exit(3);
  }).detach();
}

int run_client(const Options& o) {
  double limit = o.timeout_s;
  if (limit <= 0) {
    switch (o.scenario) {
    case Scenario::kStream:
      limit = o.duration_s + 60;
      break;
    case Scenario::kPingpong:
    case Scenario::kPs:
      limit = o.warmup_s + o.duration_s + 60;
      break;
    case Scenario::kIncast:
    case Scenario::kConnect:
      limit = 300 + o.hold_s;
      break;
    }
  }
  if (o.json) {
    Json t = Json::object();
    t.set("tool", "xpress-bench");
    t.set("version", 1);
    t.set("scenario", scenario_name(o.scenario));
    t.set("label", o.label);
    t.set("ok", false);
    char msg[64];
    std::snprintf(msg, sizeof msg, "hard timeout after %.0f s", limit);
    t.set("errors", Json::array()).push(msg);
    g_timeout_json = t.dump();
  }
  start_watchdog(limit);

  RunContext ctx(o);
  Json params = Json::object();
  params.set("host", o.host);
  params.set("port", o.port);
  params.set("verify", verify_name(o.verify));
  params.set("seed", o.seed);
  Json results = Json::object();
  switch (o.scenario) {
  case Scenario::kStream:
    run_stream(ctx, &params, &results);
    break;
  case Scenario::kPingpong:
    run_pingpong(ctx, &params, &results);
    break;
  case Scenario::kPs:
    run_ps(ctx, &params, &results);
    break;
  case Scenario::kIncast:
    run_incast(ctx, &params, &results);
    break;
  case Scenario::kConnect:
    run_connect(ctx, &params, &results);
    break;
  }
  ctx.finish();
  Json report = ctx.report(std::move(params), std::move(results));
  g_reporting = true;
  if (o.json)
    std::printf("%s\n", report.dump().c_str());
  else
    print_table(report, stdout);
  std::fflush(stdout);
  return ctx.ok() ? 0 : 1;
}

} // namespace xb
