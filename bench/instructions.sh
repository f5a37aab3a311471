#!/usr/bin/env bash
# Deterministic pass-through cost of the preload: user-space instructions
# (callgrind) of a loopback ping-pong program, plain vs preloaded.  Kernel
# work is not counted, so the difference is exactly what xpress adds per
# call and at start-up; unlike timings it does not depend on machine load.
# Usage: bench/instructions.sh [ITERATIONS]   (prints a Markdown table)
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-20000}
lib=${XPRESS_LIB:-$PWD/build/libxpress.so}
command -v valgrind >/dev/null || { echo "instructions: valgrind not installed" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/pp.c" <<'C'
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 0;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  bind(l, (struct sockaddr*)&a, len); listen(l, 1); getsockname(l, (struct sockaddr*)&a, &len);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  connect(c, (struct sockaddr*)&a, len);
  int s = accept(l, 0, 0);
  char b[64] = {0};
  for (int i = 0; i < n; i++) {  /* 4 socket calls per iteration */
    send(c, b, 64, 0); recv(s, b, 64, 0); send(s, b, 64, 0); recv(c, b, 64, 0);
  }
  return 0;
}
C
cc -O2 -o "$tmp/pp" "$tmp/pp.c"
count() {  # ITER [preload]
  local out
  if [ -n "${2:-}" ]; then
    out=$(LD_PRELOAD=$2 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$tmp/pp" "$1" 2>&1)
  else
    out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$tmp/pp" "$1" 2>&1)
  fi
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out"
}
p0=$(count 0) pn=$(count "$iters") x0=$(count 0 "$lib") xn=$(count "$iters" "$lib")
calls=$((iters * 4))
awk -v p0="$p0" -v pn="$pn" -v x0="$x0" -v xn="$xn" -v calls="$calls" 'BEGIN {
  pc = (pn - p0) / calls; xc = (xn - x0) / calls
  print "| measure (callgrind, user-space instructions) | plain | xpress | added |"
  print "|---|---:|---:|---:|"
  printf "| start-up and set-up (0 iterations) | %d | %d | %d |\n", p0, x0, x0 - p0
  printf "| per send/recv call on a TCP socket | %.1f | %.1f | %.1f |\n", pc, xc, xc - pc
}'
