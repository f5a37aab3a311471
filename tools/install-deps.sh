#!/usr/bin/env bash
# Installs every Debian package xpress needs to build, test and benchmark.
# Idempotent and non-interactive; `make deps` calls it, and so does .ci/run.
set -euo pipefail
PKGS=(
  # build
  build-essential pkg-config clang-format
  libibverbs-dev librdmacm-dev libboost-dev doctest-dev
  # the binding's key exchange (recover/pake.h): headers to build, dlopen'd at run time
  libsodium-dev libsodium23
  # dlopen'd at run time: libunwind for XPRESS_BACKTRACE (tests/unit/tools.sh)
  libunwind8
  # RDMA user space (also used inside the Soft-RoCE VM through the 9p root share)
  rdma-core ibverbs-utils rdmacm-utils ibverbs-providers perftest
  # real programs for program tests and benchmarks
  iperf3 sockperf redis-server redis-tools nginx-light memcached libmemcached-tools postgresql
  wrk curl python3 jq procps psmisc
  # Node.js HTTP server and client (tests/rdma-programs/cases/node.sh)
  nodejs
  # a JVM HTTP server and client on dual-stack sockets (tests/rdma-programs/cases/java.sh)
  default-jdk-headless
  # a gRPC server and client (Python grpcio: gRPC's C core; tests/rdma-programs/cases/grpc.sh)
  python3-grpcio
  # libFuzzer targets of the parsers of peer-controlled bytes (tests/fuzz, make fuzz)
  clang
  # instruction counts of the preload and the data path (bench/instructions.sh, bench/hotpath.sh)
  valgrind
  # io_uring reader of the kernel-feature test (tests/rdma-programs/kfeat.c); bc sums ESP byte counts
  liburing-dev bc
  # stacks of a server that hangs in a VM test (tests/rdma-programs/lib.sh)
  gdb
  # what a preloaded process does at start-up and exit (tests/unit/startup.sh)
  strace
  # the Debian package and its checks (make deb, make test-install)
  dpkg-dev lintian man-db
  # Soft-RoCE VM test bed
  qemu-system-x86 busybox-static cpio kmod iproute2 xz-utils
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "deps: all ${#PKGS[@]} packages present"
fi
# Distribution services we use as test programs must not run system-wide.
for svc in redis-server memcached nginx postgresql; do
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; fi
done
# The Soft-RoCE VM needs a Debian kernel image with rdma_rxe; fetched into build/.
if [ -f tools/softroce/fetch-kernel.sh ]; then bash tools/softroce/fetch-kernel.sh; fi
