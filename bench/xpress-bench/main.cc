// xpress-bench: the xpress project's measuring instrument.  A plain POSIX sockets program
// (no xpress headers) so the same binary measures kernel TCP, xpress's LD_PRELOAD library
// and rsocket's preload alike.  See README.md in this directory.
#include <signal.h>

#include <cstdio>
#include <string>

#include "client.h"
#include "options.h"
#include "server.h"
#include "sysstat.h"

int main(int argc, char** argv) {
  xb::Options o;
  std::string err;
  switch (xb::parse_options(argc, argv, &o, &err)) {
  case xb::ParseResult::kHelp:
    xb::print_usage(stdout);
    return 0;
  case xb::ParseResult::kError:
    std::fprintf(stderr, "xpress-bench: %s\n(see 'xpress-bench --help')\n", err.c_str());
    return 2;
  case xb::ParseResult::kOk:
    break;
  }
  // A peer that goes away must show up as EPIPE on write, not kill the process.
  signal(SIGPIPE, SIG_IGN);
  xb::raise_fd_limit();
  return o.server ? xb::run_server(o) : xb::run_client(o);
}
