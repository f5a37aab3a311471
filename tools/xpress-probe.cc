// xpress-probe: can this host reach an xpress peer over RDMA, and if not,
// why?  Lists the local RDMA devices and ports, resolves the route and GIDs
// to HOST:PORT through rdma_cm, and asks whether an xpress listener answers
// there (verbs/probe/probe.h).  Exit status: 0 xpress answers, 1 RDMA
// reaches the host but no xpress listens at that port, 2 no RDMA path, 64
// usage.  --devices (what `xpress-run --probe` without a target runs): 0
// with an active port here, 2 without.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netdb.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs/probe/probe.h"

namespace {

int usage() {
  fprintf(stderr,
          "usage: xpress-probe [--timeout MS] [--source ADDR] HOST:PORT   (IPv6: [ADDR]:PORT)\n"
          "       xpress-probe --devices   (local devices and ports only)\n"
          "exit status: 0 xpress answers (--devices: an active port here), 1 no xpress "
          "listens there, 2 no RDMA path\n");
  return 64;
}

// The local address the kernel would give a TCP connection to dst (a UDP
// socket's connect routes without sending anything).
bool kernel_source(const addrinfo* dst, sockaddr_storage* src) {
  int fd = socket(dst->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  socklen_t len = sizeof *src;
  bool ok = connect(fd, dst->ai_addr, dst->ai_addrlen) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(src), &len) == 0;
  close(fd);
  return ok;
}

} // namespace

int main(int argc, char** argv) {
  using namespace xp::verbs::probe;
  int timeout_ms = 5000;
  const char* target = nullptr;
  const char* source = nullptr;
  bool devices_only = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
      char* end = nullptr;
      long v = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || v < 1 || v > 600000) return usage();
      timeout_ms = static_cast<int>(v);
    } else if (strcmp(argv[i], "--source") == 0 && i + 1 < argc) {
      source = argv[++i];
    } else if (strcmp(argv[i], "--devices") == 0) {
      devices_only = true;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage();
      return 0;
    } else if (argv[i][0] == '-' || target != nullptr) {
      return usage();
    } else {
      target = argv[i];
    }
  }
  if (devices_only) {
    const int active = list_devices(stdout);
    if (active > 0)
      printf("verdict: %d active RDMA port%s here\n", active, active == 1 ? "" : "s");
    else
      printf("verdict: no active RDMA port here\n");
    return active > 0 ? 0 : 2;
  }
  if (target == nullptr) return usage();
  std::string t(target), host, port;
  if (!t.empty() && t[0] == '[') {
    size_t close = t.find(']');
    if (close == std::string::npos || close + 1 >= t.size() || t[close + 1] != ':') return usage();
    host = t.substr(1, close - 1);
    port = t.substr(close + 2);
  } else {
    size_t colon = t.rfind(':');
    if (colon == std::string::npos || colon == 0) return usage();
    host = t.substr(0, colon);
    port = t.substr(colon + 1);
  }
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      atol(port.c_str()) < 1 || atol(port.c_str()) > 65535)
    return usage();
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    fprintf(stderr, "xpress-probe: %s: %s\n", host.c_str(), gai_strerror(rc));
    return 2;
  }
  sockaddr_storage src{};
  if (source != nullptr) {
    addrinfo sh{}, *sres = nullptr;
    sh.ai_family = res->ai_family;
    sh.ai_flags = AI_NUMERICHOST;
    if (getaddrinfo(source, nullptr, &sh, &sres) != 0 || sres == nullptr) {
      fprintf(stderr, "xpress-probe: --source %s: not a numeric address of the target's family\n",
              source);
      freeaddrinfo(res);
      return usage();
    }
    memcpy(&src, sres->ai_addr, sres->ai_addrlen);
    freeaddrinfo(sres);
  } else if (!kernel_source(res, &src)) {
    fprintf(stderr, "xpress-probe: no route to %s\n", host.c_str());
    freeaddrinfo(res);
    return 2;
  }
  // The address only: rdma_cm picks the port.
  if (src.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&src)->sin_port = 0;
  if (src.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&src)->sin6_port = 0;
  printf("xpress-probe %s\n", target);
  const int active = list_devices(stdout);
  Verdict v = Verdict::no_rdma_path;
  if (active == 0)
    printf("peer: not asked (no active RDMA port here)\n");
  else
    v = ask(reinterpret_cast<sockaddr*>(&src), res->ai_addr, timeout_ms, stdout);
  freeaddrinfo(res);
  static const char* const kWords[] = {"xpress answers", "no xpress listens there", "no RDMA path"};
  printf("verdict: %s\n", kWords[static_cast<int>(v)]);
  return static_cast<int>(v);
}
