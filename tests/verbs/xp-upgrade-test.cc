// The upgrade, end to end, on real TCP and real RDMA (no preload yet): a TCP
// connection carries the first bytes of both directions; a channel is set
// up with rdma_cm; ATTACH binds the stream, both ends prove they hold the
// TCP connection (recover/upgrade), each direction switches at its own
// offset S, and the rest of the bytes go over RDMA.  The receiver reads
// exactly S bytes from TCP, then RDMA bytes from S on: every byte of both
// directions is checked against its position in the stream, so a byte lost,
// duplicated or reordered at the switch fails the test.
//
//   xp-upgrade-test server IP PORT       (TCP and rdma_cm on the same port number)
//   xp-upgrade-test client SRC DST PORT
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "flow/record_channel.h"
#include "recover/upgrade.h"
#include "stream/mux.h"
#include "verbs/rc_link.h"

using namespace xp;

namespace {

constexpr uint64_t kC2S = 4u << 20, kS2C = 2u << 20; // bytes per direction
constexpr uint64_t kC2STcp = 10000, kS2CTcp = 5000;  // sent on TCP before switching

uint8_t pat(int dir, uint64_t i) {
  return static_cast<uint8_t>(i * 29 + dir * 71 + (i >> 7));
}

sockaddr_in addr(const char* ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

struct End {
  const char* who;
  int dir; // our sending direction: 0 client->server, 1 server->client
  int fd;
  recover::UpgradeSession sess;
  stream::Mux* mux = nullptr;
  stream::Stream* st = nullptr;
  uint64_t tx_total, rx_total, tx_tcp;
  uint64_t sent = 0, got = 0, bad = 0, got_tcp = 0;
  bool tx_rdma = false;
  End(const char* w, int d, int f, const recover::SessionParams& p, uint64_t tt, uint64_t rt,
      uint64_t tcp)
      : who(w), dir(d), fd(f), sess(p), tx_total(tt), rx_total(rt), tx_tcp(tcp) {}

  void send_msg(const recover::Message& m) {
    Status s;
    while ((s = mux->channel().send_control(static_cast<flow::RecordType>(m.type), m.stream, m.seq,
                                            m.payload, m.len)) == Status::no_resource)
      mux->progress();
    if (s != Status::ok) fprintf(stderr, "%s: send_control: %s\n", who, status_name(s));
  }
  void flush() {
    recover::Message m;
    while (sess.pop_output(&m))
      send_msg(m);
  }
};

Status on_control(void* ctx, const flow::RecordHeader& h, const uint8_t* payload) {
  End* e = static_cast<End*>(ctx);
  if (h.type == static_cast<uint8_t>(flow::RecordType::attach)) {
    recover::Message reply;
    Status s = e->sess.on_attach(h.stream, h.seq, payload, h.len, &reply);
    e->send_msg(reply);
    if (s == Status::ok) e->st = e->mux->open(h.stream, 0, 0);
    e->flush();
    return Status::ok;
  }
  // The peer's data follows its SWITCH on the channel: accept it from S on
  // at once (it is delivered only once the switch is verified).
  if (h.type == static_cast<uint8_t>(flow::RecordType::switch_) && e->st)
    e->st->set_rx_start(h.seq);
  Status s = e->sess.on_message(h.type, h.stream, h.seq, payload, h.len);
  if (s != Status::ok)
    fprintf(stderr, "%s: session rejected record type %u: %s (%s)\n", e->who, h.type,
            status_name(s), reason_name(e->sess.fallback_reason()));
  e->flush();
  return Status::ok;
}

int run(End& e) {
  std::vector<uint8_t> buf(65536);
  int idle = 0;
  while (e.sent < e.tx_total || e.got < e.rx_total) {
    bool moved = false;
    if (e.mux->progress() != Status::ok) {
      fprintf(stderr, "%s: channel failed\n", e.who);
      return 1;
    }
    e.flush();
    // Send.
    if (e.sent < e.tx_total) {
      if (!e.tx_rdma && e.sent >= e.tx_tcp && e.sess.try_switch_tx() == Status::ok) {
        e.flush(); // the SWITCH goes before any RDMA data
        e.st->set_tx_start(e.sess.tx_offset());
        e.tx_rdma = true;
        printf("%s: switched sending to RDMA at S=%lu\n", e.who, e.sess.tx_offset());
      }
      uint64_t limit = e.tx_rdma ? e.tx_total : (e.sent < e.tx_tcp ? e.tx_tcp : e.sent);
      size_t n = static_cast<size_t>(std::min<uint64_t>(limit - e.sent, buf.size()));
      if (e.sess.state() == recover::State::failed && !e.tx_rdma)
        n = static_cast<size_t>(std::min<uint64_t>(e.tx_total - e.sent, buf.size())); // stay on TCP
      for (size_t k = 0; k < n; ++k)
        buf[k] = pat(e.dir, e.sent + k);
      if (n > 0 && e.tx_rdma) {
        size_t done = 0;
        if (e.st->write(buf.data(), n, &done) == Status::ok) e.sent += done, moved = done > 0;
      } else if (n > 0) {
        ssize_t w = ::send(e.fd, buf.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
          e.sess.on_tcp_sent(buf.data(), static_cast<size_t>(w)), e.sent += w, moved = true;
      }
    }
    // Receive: TCP until the peer's switch offset, then the stream.
    uint64_t tcp_room = e.sess.rx_tcp_remaining();
    if (e.sess.rx_mode() == Mode::tcp || tcp_room > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(tcp_room, buf.size()));
      ssize_t r = ::recv(e.fd, buf.data(), n, MSG_DONTWAIT);
      if (r > 0) {
        e.sess.on_tcp_received(buf.data(), static_cast<size_t>(r));
        for (ssize_t k = 0; k < r; ++k)
          e.bad += buf[k] != pat(1 - e.dir, e.got + k);
        e.got += r, e.got_tcp += r, moved = true;
      }
    } else if (e.st) {
      size_t r = 0;
      if (e.st->read(buf.data(), buf.size(), &r, false) == Status::ok && r > 0) {
        for (size_t k = 0; k < r; ++k)
          e.bad += buf[k] != pat(1 - e.dir, e.got + k);
        e.got += r, moved = true;
      }
    }
    idle = moved ? 0 : idle + 1;
    if (idle > 200000) {
      fprintf(stderr, "%s: stalled: sent %lu/%lu got %lu/%lu state %s\n", e.who, e.sent, e.tx_total,
              e.got, e.rx_total, recover::state_name(e.sess.state()));
      return 1;
    }
    if (idle > 1000) {
      pollfd p{e.fd, 0, 0};
      ::poll(&p, 1, 1);
    }
  }
  for (int i = 0; i < 300; ++i) { // let the last acks and credits out
    e.mux->progress();
    usleep(1000);
  }
  printf("%s: sent %lu (TCP first, then RDMA from S=%lu), received %lu (%lu over TCP up to the "
         "peer's S=%lu, then RDMA), %lu bad bytes, upgrade state %s, tx %s, rx %s\n",
         e.who, e.sent, e.sess.tx_offset(), e.got, e.got_tcp, e.sess.rx_offset(), e.bad,
         recover::state_name(e.sess.state()), mode_name(e.sess.tx_mode()),
         mode_name(e.sess.rx_mode()));
  bool upgraded = e.sess.tx_mode() == Mode::rdma && e.sess.rx_mode() == Mode::rdma;
  return e.bad == 0 && upgraded ? 0 : 1;
}

recover::Nonce nonce() {
  recover::Nonce n;
  if (getrandom(n.b, sizeof n.b, 0) != sizeof n.b) abort();
  return n;
}

int server(const char* ip, int port) {
  sockaddr_in a = addr(ip, port);
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 4) != 0) return 1;
  verbs::RcListener* rl = nullptr;
  if (verbs::RcListener::listen(reinterpret_cast<sockaddr*>(&a), 4, &rl) != Status::ok) return 1;
  printf("server: listening\n");
  fflush(stdout);
  int fd = accept(l, nullptr, nullptr);
  sockaddr_storage me{}, peer{};
  socklen_t ml = sizeof me, pl = sizeof peer;
  getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml);
  getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl);
  recover::SessionParams p;
  p.role = recover::Role::server;
  p.nonce = nonce();
  if (getrandom(p.seed, sizeof p.seed, 0) != sizeof p.seed) abort();
  p.timeout_ms = 10000;
  recover::tuple_from_sockaddrs(reinterpret_cast<sockaddr*>(&peer),
                                reinterpret_cast<sockaddr*>(&me), &p.tuple);
  verbs::Link* link = nullptr;
  if (rl->accept(verbs::RcLinkParams{}, 20000, &link, nullptr, nullptr) != Status::ok) return 1;
  stream::Mux mux(link, stream::MuxParams{});
  End e("server", 1, fd, p, kS2C, kC2S, kS2CTcp);
  e.mux = &mux;
  mux.set_control_handler(on_control, &e);
  int rc = run(e);
  close(fd);
  return rc;
}

int client(const char* src, const char* dst, int port) {
  sockaddr_in s = addr(src, 0), d = addr(dst, port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  bind(fd, reinterpret_cast<sockaddr*>(&s), sizeof s);
  int tries = 0;
  while (connect(fd, reinterpret_cast<sockaddr*>(&d), sizeof d) != 0) {
    if (++tries > 100) return 1;
    usleep(100000);
  }
  sockaddr_storage me{}, peer{};
  socklen_t ml = sizeof me, pl = sizeof peer;
  getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml);
  getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl);
  recover::SessionParams p;
  p.role = recover::Role::client;
  p.nonce = nonce();
  if (getrandom(p.seed, sizeof p.seed, 0) != sizeof p.seed) abort();
  p.timeout_ms = 10000;
  recover::tuple_from_sockaddrs(reinterpret_cast<sockaddr*>(&me),
                                reinterpret_cast<sockaddr*>(&peer), &p.tuple);
  verbs::Link* link = nullptr;
  Status st = Status::io_error;
  for (int i = 0; i < 50 && st != Status::ok; ++i) {
    st = verbs::rc_connect(reinterpret_cast<sockaddr*>(&s), reinterpret_cast<sockaddr*>(&d),
                           verbs::RcLinkParams{}, nullptr, 0, &link);
    if (st != Status::ok) usleep(100000);
  }
  if (st != Status::ok) return 1;
  stream::Mux mux(link, stream::MuxParams{});
  End e("client", 0, fd, p, kC2S, kS2C, kC2STcp);
  e.mux = &mux;
  mux.set_control_handler(on_control, &e);
  e.st = mux.open(0, 0, 0);
  recover::Message m;
  if (e.sess.start_attach(0, &m) != Status::ok) return 1;
  e.send_msg(m);
  int rc = run(e);
  close(fd);
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "server") == 0) return server(argv[2], atoi(argv[3]));
  if (argc == 5 && strcmp(argv[1], "client") == 0) return client(argv[2], argv[3], atoi(argv[4]));
  fprintf(stderr, "usage: xp-upgrade-test server IP PORT | client SRC DST PORT\n");
  return 2;
}
