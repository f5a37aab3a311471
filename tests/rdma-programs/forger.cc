// forger: a hostile peer speaking the rdma_cm side of xpress's rendezvous
// (docs/protocol.md §1, §4, §8) against a preloaded server, for the VM case
// tests/rdma-programs/cases/forger.sh and the flood measurement of issue 24.
// It never holds the TCP connections it names (except its own, in
// attach-flood and hold), so it must never get a stream's byte.
//
//   forger req-flood SRC DST PORT N NAME [WINDOW]
//       N rdma_cm connection requests from SRC to DST:PORT, WINDOW (default
//       64) at a time, each naming NAME: "victim:IP:PORT" (a real client's
//       4-tuple), or "random" (SRC with a random port).  No queue pair: an
//       accept is answered with a reject.
//   forger big-ring SRC DST PORT NAME
//       one request announcing a 1 GiB receive ring (must be refused, §4).
//   forger hold SRC DST PORT N SECS
//       N TCP connections of its own from SRC, an rdma_cm request naming
//       each, never completed (no RTU); held SECS seconds.
//   forger attach-flood SRC DST PORT N NAME
//       one channel bound the protocol way (a TCP connection of its own from
//       SRC, named in the request), then N ATTACH records over it naming
//       NAME; counts the answers.
// Prints one line "forger MODE: key=value ..." (the case parses it); exit
// status 0 when the run completed (whatever the server answered), 1 when
// the forger itself could not run.
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <string>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "flow/record_channel.h"
#include "recover/rendezvous_wire.h"
#include "recover/upgrade.h"
#include "recover/upgrade_wire.h"
#include "verbs/rc_link.h"
#include "verbs/wire_ring.h"

using namespace xp;

namespace {

// The rendezvous' request private data (recover/rendezvous_wire.h).
using ReqWire = recover::CmRequestWire;
static_assert(sizeof(ReqWire) == verbs::kAppPrivateMax);
constexpr uint8_t kKindRequest = recover::kCmRequest;
const char* const kRejNames[] = {"rej_other", "rej_redirect", "rej_unknown", "rej_busy",
                                 "rej_version"};

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

sockaddr_in in4(const char* ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    fprintf(stderr, "forger: not an IPv4 address: %s\n", ip);
    exit(1);
  }
  return a;
}

void random_bytes(void* p, size_t n) {
  if (getrandom(p, n, 0) != static_cast<ssize_t>(n)) abort();
}

// The 4-tuple a request or ATTACH names.  "victim:IP:PORT" names a real
// client's connection to dst; "random" a random port of src.
struct Namer {
  bool random = true;
  sockaddr_in client{};
  recover::TcpTuple make(const sockaddr_in& src, const sockaddr_in& dst) const {
    sockaddr_in c = random ? src : client;
    if (random) {
      uint16_t p;
      random_bytes(&p, sizeof p);
      // Below the kernel's ephemeral range (32768 on): a random port never
      // names a live connection of another process on this host (the
      // case's accept-latency probe), which a process there may bind
      // (docs/protocol.md §8): requests naming tuples nobody holds.
      c.sin_port = htons(static_cast<uint16_t>(1024 + p % (32768 - 1024)));
    }
    recover::TcpTuple t;
    recover::tuple_from_sockaddrs(reinterpret_cast<const sockaddr*>(&c),
                                  reinterpret_cast<const sockaddr*>(&dst), &t);
    return t;
  }
};

Namer parse_name(const char* s) {
  Namer n;
  if (strcmp(s, "random") == 0) return n;
  std::string v(s);
  if (v.rfind("victim:", 0) != 0 || v.rfind(':') <= 7) {
    fprintf(stderr, "forger: NAME is random or victim:IP:PORT, not %s\n", s);
    exit(1);
  }
  size_t colon = v.rfind(':');
  n.random = false;
  n.client = in4(v.substr(7, colon - 7).c_str(), atoi(v.c_str() + colon + 1));
  return n;
}

// The rdma_cm private data of a request: ring descriptor, then ReqWire.
struct Priv {
  uint8_t b[56];
  uint8_t len;
};
Priv request_priv(const recover::TcpTuple& t, uint32_t ring_size) {
  verbs::WireRing w{};
  w.magic = verbs::kWireMagic;
  w.version = verbs::kWireVersion;
  w.app_len = sizeof(ReqWire);
  w.window_log2 = 18;
  w.addr = 0x1000;
  w.rkey = 1;
  w.size = ring_size;
  ReqWire r{};
  r.kind = kKindRequest;
  r.version = recover::kRendezvousVersion;
  recover::tuple_key(t, r.key);
  random_bytes(r.nonce, sizeof r.nonce);
  memcpy(w.app, &r, sizeof r);
  Priv p;
  memcpy(p.b, &w, sizeof w);
  p.len = sizeof w;
  return p;
}

// ------------------------------------------------------------ raw requests
struct Outcome {
  std::map<std::string, long> count;
  double lat_sum = 0, lat_max = 0;
  long answered = 0;
};

struct Attempt {
  rdma_cm_id* id;
  Priv priv;
  double t0;
  bool hold;
};

// Runs n requests, window at a time, each built by make(i); hold: accepted
// ones are left half-open (no RTU) instead of rejected.
template <typename Make>
int run_requests(const sockaddr_in& src, const sockaddr_in& dst, long n, int window, bool hold,
                 Make make, Outcome* out, std::vector<rdma_cm_id*>* held) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) {
    perror("forger: rdma_create_event_channel");
    return 1;
  }
  long started = 0, done = 0;
  auto start = [&](long i) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
      ++out->count["create_failed"];
      ++done;
      return;
    }
    auto* a = new Attempt{id, make(i), now_s(), hold};
    id->context = a;
    sockaddr_in s = src, d = dst;
    s.sin_port = 0;
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&s), reinterpret_cast<sockaddr*>(&d),
                          5000) != 0) {
      ++out->count["resolve_failed"];
      rdma_destroy_id(id);
      delete a;
      ++done;
    }
  };
  auto finish = [&](rdma_cm_id* id, const char* what, bool destroy = true) {
    auto* a = static_cast<Attempt*>(id->context);
    double l = now_s() - a->t0;
    out->lat_sum += l;
    if (l > out->lat_max) out->lat_max = l;
    ++out->answered;
    ++out->count[what];
    ++done;
    if (destroy) {
      delete a;
      rdma_destroy_id(id);
    }
  };
  double deadline = now_s() + 600;
  while (done < n && now_s() < deadline) {
    while (started < n && started - done < window)
      start(started++);
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) != 0) break;
    rdma_cm_id* id = ev->id;
    auto* a = static_cast<Attempt*>(id->context);
    rdma_cm_event_type type = ev->event;
    int status = ev->status;
    uint8_t rej[64] = {};
    uint8_t rej_len = 0;
    if (type == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data != nullptr) {
      rej_len = ev->param.conn.private_data_len < sizeof rej ? ev->param.conn.private_data_len
                                                             : sizeof rej;
      memcpy(rej, ev->param.conn.private_data, rej_len);
    }
    rdma_ack_cm_event(ev);
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(id, 5000) != 0) finish(id, "route_failed");
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      rdma_conn_param cp{};
      cp.private_data = a->priv.b;
      cp.private_data_len = a->priv.len;
      cp.responder_resources = 1;
      cp.initiator_depth = 1;
      cp.retry_count = 3;
      cp.rnr_retry_count = 3;
      // No queue pair: this end never moves a byte.  A distinct number per
      // request: the passive CM refuses a REQ from a QP number it already
      // has a connection for (stale connection).
      static uint32_t next_qpn = 0x100;
      cp.qp_num = ++next_qpn & 0xffffff;
      if (rdma_connect(id, &cp) != 0) finish(id, "connect_failed");
      break;
    }
    case RDMA_CM_EVENT_REJECTED: {
      uint32_t magic = 0;
      if (rej_len >= 4) memcpy(&magic, rej, 4);
      if (status == verbs::kRejConsumerDefined && rej_len >= 5 && magic == verbs::kRejectMagic)
        finish(id, kRejNames[rej[4] <= 4 ? rej[4] : 0]);
      else
        finish(id, ("cm_reject_" + std::to_string(status)).c_str());
      break;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      // The server accepted: it took the request as a binding.
      if (a->hold && held != nullptr) {
        finish(id, "accepted_held", false);
        held->push_back(id);
      } else {
        rdma_reject(id, nullptr, 0);
        finish(id, "accepted");
      }
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      finish(id, "established");
      break;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      finish(id, type == RDMA_CM_EVENT_UNREACHABLE ? "unreachable" : "error");
      break;
    default: // disconnected, timewait: ids still held
      break;
    }
  }
  if (done < n) out->count["no_answer"] += n - done;
  return 0;
}

void print_outcome(const char* mode, long n, double secs, const Outcome& o) {
  printf("forger %s: sent=%ld secs=%.2f rate=%.0f/s", mode, n, secs, secs > 0 ? n / secs : 0.0);
  for (auto& [k, v] : o.count)
    printf(" %s=%ld", k.c_str(), v);
  printf(" answer_ms_mean=%.1f answer_ms_max=%.1f\n",
         o.answered ? 1000 * o.lat_sum / o.answered : 0.0, 1000 * o.lat_max);
  fflush(stdout);
}

int req_flood(const sockaddr_in& src, const sockaddr_in& dst, long n, const Namer& name,
              int window) {
  Outcome o;
  double t0 = now_s();
  int rc = run_requests(
      src, dst, n, window, false, [&](long) { return request_priv(name.make(src, dst), 4096); }, &o,
      nullptr);
  print_outcome("req-flood", n, now_s() - t0, o);
  return rc;
}

int big_ring(const sockaddr_in& src, const sockaddr_in& dst, const Namer& name) {
  Outcome o;
  double t0 = now_s();
  int rc = run_requests(
      src, dst, 1, 1, false, [&](long) { return request_priv(name.make(src, dst), 1u << 30); }, &o,
      nullptr);
  print_outcome("big-ring", 1, now_s() - t0, o);
  return rc;
}

// A TCP connection of the forger's own from src to dst (plain kernel TCP:
// the forger is not preloaded); its 4-tuple, as the server holds it.
int own_connection(const sockaddr_in& src, const sockaddr_in& dst, recover::TcpTuple* t) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in s = src;
  s.sin_port = 0;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&s), sizeof s) != 0 ||
      connect(fd, reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0) {
    perror("forger: TCP connect");
    if (fd >= 0) close(fd);
    return -1;
  }
  socklen_t l = sizeof s;
  getsockname(fd, reinterpret_cast<sockaddr*>(&s), &l);
  recover::tuple_from_sockaddrs(reinterpret_cast<sockaddr*>(&s),
                                reinterpret_cast<const sockaddr*>(&dst), t);
  return fd;
}

int hold(const sockaddr_in& src, const sockaddr_in& dst, long n, int secs) {
  std::vector<int> fds;
  std::vector<recover::TcpTuple> tuples;
  for (long i = 0; i < n; ++i) {
    recover::TcpTuple t;
    int fd = own_connection(src, dst, &t);
    if (fd < 0) break;
    fds.push_back(fd);
    tuples.push_back(t);
  }
  usleep(1000 * 1000); // the server's accept loop takes them
  Outcome o;
  std::vector<rdma_cm_id*> held;
  double t0 = now_s();
  int rc = run_requests(
      src, dst, static_cast<long>(tuples.size()), 64, true,
      [&](long i) { return request_priv(tuples[i], 4096); }, &o, &held);
  print_outcome("hold", static_cast<long>(tuples.size()), now_s() - t0, o);
  sleep(static_cast<unsigned>(secs));
  for (int fd : fds)
    close(fd);
  return rc;
}

// ------------------------------------------------------------ attach flood
// A TCP connection of the forger's own and a channel for it, set up the
// protocol's way (its first upgrade request names its own 4-tuple).
// *named (if given): the channel's name as the server made it (§2 "The
// channel"), so that a binding the forger runs over its own channel fails
// only on what it guessed.
Status own_channel(const sockaddr_in& src, const sockaddr_in& dst, int* fd, verbs::Link** link,
                   recover::ChannelBinding* named = nullptr) {
  recover::TcpTuple own;
  *fd = own_connection(src, dst, &own);
  if (*fd < 0) return Status::io_error;
  usleep(300 * 1000);
  ReqWire r{};
  r.kind = kKindRequest;
  r.version = recover::kRendezvousVersion;
  recover::tuple_key(own, r.key);
  random_bytes(r.nonce, sizeof r.nonce);
  verbs::RcLinkParams lp;
  lp.ring_bytes = 64 * 1024;
  lp.timeout_ms = 5000;
  lp.stream_window = 256 * 1024;
  sockaddr_in s = src;
  s.sin_port = 0;
  verbs::RcConnected info;
  Status st =
      verbs::rc_connect(reinterpret_cast<sockaddr*>(&s), reinterpret_cast<const sockaddr*>(&dst),
                        lp, &r, sizeof r, link, &info);
  recover::Nonce nonce_s;
  uint8_t chan[recover::kChanNonceBytes];
  if (st == Status::ok && named != nullptr &&
      (!recover::parse_cm_accept(info.app, info.app_len, &nonce_s, chan) ||
       recover::channel_binding_from(reinterpret_cast<const sockaddr*>(&info.local),
                                     reinterpret_cast<const sockaddr*>(&info.peer), chan,
                                     named) != Status::ok))
    printf("forger: the server's accept names no channel\n");
  return st;
}

int attach_flood(const sockaddr_in& src, const sockaddr_in& dst, long n, const Namer& name) {
  int fd = -1;
  verbs::Link* link = nullptr;
  double t0 = now_s();
  Status st = own_channel(src, dst, &fd, &link);
  if (fd < 0) return 1;
  if (st != Status::ok) {
    printf("forger attach-flood: sent=0 channel=refused (%s)\n", status_name(st));
    close(fd);
    return 0;
  }
  flow::RecordChannel rc(link, 16);
  std::map<std::string, long> got;
  long sent = 0, answered = 0, data_bytes = 0;
  double last = now_s();
  while ((sent < n || answered < sent) && now_s() - last < 10 && !rc.failed()) {
    bool moved = false;
    while (sent < n && sent - answered < 512 && rc.can_send(recover::kAttachBytes)) {
      recover::Nonce nc;
      random_bytes(nc.b, sizeof nc.b);
      uint8_t p[recover::kAttachBytes];
      recover::encode_attach(name.make(src, dst), nc, p);
      // Stream ids are never reused on a channel (§4): 1, 2, 3, ...
      if (rc.send_control(flow::RecordType::attach, static_cast<uint32_t>(sent + 1), 0, p,
                          sizeof p) != Status::ok)
        break;
      ++sent;
      moved = true;
    }
    flow::Record recs[64];
    int k = 0;
    if (rc.poll(recs, 64, &k) != Status::ok) break;
    for (int i = 0; i < k; ++i) {
      const flow::RecordHeader& h = recs[i].hdr;
      switch (static_cast<flow::RecordType>(h.type)) {
      case flow::RecordType::attach_ack:
        ++got["attach_ack"], ++answered;
        break;
      case flow::RecordType::attach_nak: {
        static const char* const kNak[] = {"nak_other",   "nak_unknown_stream", "nak_busy",
                                           "nak_version", "nak_failed",         "nak_timeout"};
        uint64_t code = h.seq & recover::kNakCodeMask;
        if (h.stream != 0) ++answered; // stream 0 is the forger's own connection
        ++got[kNak[code <= 5 ? code : 0]];
        break;
      }
      case flow::RecordType::data:
        data_bytes += h.len;
        break;
      default:
        ++got["type_" + std::to_string(h.type)];
      }
      rc.release(recs[i].slot);
      moved = true;
    }
    if (moved)
      last = now_s();
    else
      usleep(200);
  }
  double secs = now_s() - t0;
  printf("forger attach-flood: sent=%ld secs=%.2f rate=%.0f/s answered=%ld channel=%s", sent, secs,
         secs > 0 ? sent / secs : 0.0, answered, rc.failed() ? "failed" : "up");
  for (auto& [k, v] : got)
    printf(" %s=%ld", k.c_str(), v);
  printf(" data_bytes=%ld\n", data_bytes);
  fflush(stdout);
  delete link;
  close(fd);
  return 0;
}

// ------------------------------------------------------------ guess
// Items 1 and 4 of issue 24: bind a connection of the victim (a plain
// client on src's address) by ATTACH, then run the binding with what the
// forger can guess.  KIND short: a key exchange over one predictable byte
// (SHARE counts (1, 0)); wrong: the protocol's form over a guess of the
// covered bytes.  The server must answer short with nothing but a NAK, and
// wrong with one exchange whose PROOF the forger cannot match: nothing
// switches, no byte of the victim's comes to the forger.
int guess(const sockaddr_in& src, const sockaddr_in& dst, int victim_port, const std::string& kind,
          const std::string& guessed) {
  int fd = -1;
  verbs::Link* link = nullptr;
  recover::ChannelBinding named;
  Status st = own_channel(src, dst, &fd, &link, &named);
  if (st != Status::ok) {
    printf("forger guess %s: channel=refused (%s)\n", kind.c_str(), status_name(st));
    if (fd >= 0) close(fd);
    return 0;
  }
  recover::SessionParams sp;
  sp.role = recover::Role::client;
  sockaddr_in v = src;
  v.sin_port = htons(static_cast<uint16_t>(victim_port));
  recover::tuple_from_sockaddrs(reinterpret_cast<const sockaddr*>(&v),
                                reinterpret_cast<const sockaddr*>(&dst), &sp.tuple);
  random_bytes(sp.nonce.b, sizeof sp.nonce.b);
  random_bytes(sp.seed, sizeof sp.seed);
  sp.timeout_ms = 5000;
  recover::UpgradeSession fs(sp);
  fs.set_channel(named);
  // The echo server returns what the victim sent: the guess covers both.
  fs.on_tcp_sent(guessed.data(), guessed.size());
  fs.on_tcp_received(guessed.data(), guessed.size());
  flow::RecordChannel rc(link, 16);
  std::map<std::string, long> got;
  long data_bytes = 0;
  auto send_out = [&] {
    recover::Message m;
    while (fs.pop_output(&m)) {
      if (kind == "short" && m.type == recover::msg::share) {
        const uint64_t one[2] = {1, 0};
        uint64_t ignored[2];
        uint8_t point[recover::kPointBytes];
        recover::decode_share(m.payload, ignored, point);
        recover::encode_share(one, point, m.payload);
      }
      rc.send_control(static_cast<flow::RecordType>(m.type), m.stream, m.seq, m.payload, m.len);
    }
  };
  recover::Message a;
  fs.start_attach(1, &a);
  rc.send_control(flow::RecordType::attach, a.stream, 0, a.payload, a.len);
  bool ended = false;
  for (double t0 = now_s(); !ended && now_s() - t0 < 8 && !rc.failed();) {
    flow::Record recs[16];
    int k = 0;
    if (rc.poll(recs, 16, &k) != Status::ok) break;
    for (int i = 0; i < k; ++i) {
      const flow::RecordHeader& h = recs[i].hdr;
      if (h.type == static_cast<uint8_t>(flow::RecordType::data)) {
        data_bytes += h.len;
      } else if (h.stream == 1) {
        uint8_t pl[recover::kMaxControlPayload];
        const size_t len = h.len < sizeof pl ? h.len : sizeof pl;
        memcpy(pl, recs[i].payload, len);
        ++got[h.type == 6    ? "attach"
              : h.type == 7  ? "attach_ack"
              : h.type == 8  ? "nak"
              : h.type == 11 ? "proof"
              : h.type == 15 ? "share"
                             : "type_" + std::to_string(h.type)];
        fs.on_message(h.type, h.stream, h.seq, pl, len);
        ended = h.type == static_cast<uint8_t>(flow::RecordType::attach_nak);
      }
      rc.release(recs[i].slot);
    }
    send_out();
    if (k == 0) usleep(500);
  }
  printf("forger guess %s: proven=%d switched=%d data=%ld", kind.c_str(), fs.peer_proven() ? 1 : 0,
         fs.tx_mode() == Mode::rdma ? 1 : 0, data_bytes);
  for (auto& [key, val] : got)
    printf(" %s=%ld", key.c_str(), val);
  printf("\n");
  close(fd);
  return 0;
}

int usage() {
  fprintf(stderr, "usage: forger req-flood SRC DST PORT N NAME [WINDOW]\n"
                  "       forger big-ring SRC DST PORT NAME\n"
                  "       forger hold SRC DST PORT N SECS\n"
                  "       forger attach-flood SRC DST PORT N NAME\n"
                  "       forger guess SRC DST PORT VICTIM_PORT short|wrong GUESS\n"
                  "NAME: random | victim:IP:PORT\n");
  return 64;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 5) return usage();
  std::string mode = argv[1];
  sockaddr_in src = in4(argv[2], 0), dst = in4(argv[3], atoi(argv[4]));
  if (mode == "req-flood" && (argc == 7 || argc == 8))
    return req_flood(src, dst, atol(argv[5]), parse_name(argv[6]), argc == 8 ? atoi(argv[7]) : 64);
  if (mode == "big-ring" && argc == 6) return big_ring(src, dst, parse_name(argv[5]));
  if (mode == "hold" && argc == 7) return hold(src, dst, atol(argv[5]), atoi(argv[6]));
  if (mode == "attach-flood" && argc == 7)
    return attach_flood(src, dst, atol(argv[5]), parse_name(argv[6]));
  if (mode == "guess" && argc == 8) return guess(src, dst, atoi(argv[5]), argv[6], argv[7]);
  return usage();
}
