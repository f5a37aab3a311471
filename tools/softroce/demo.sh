#!/usr/bin/env bash
# `make demo`: boots the Soft-RoCE VM and runs the same unmodified programs
# (sockperf, iperf3) between its two addresses over kernel TCP and with
# LD_PRELOAD=libxpress.so XPRESS_STATS=1, with rxe/veth counters per run
# (tools/softroce/demo-guest.sh does the work inside).
#
#   tools/softroce/demo.sh [LIB]      LIB defaults to build/libxpress.so
# Env: DEMO_SECONDS (default 3) per run; XP_VM_TIMEOUT (default 300).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
lib=${1:-$repo/build/libxpress.so}
why=""
if [ ! -f "$lib" ]; then
  why="$lib not built yet (make build/libxpress.so)"
  echo "demo: $why; showing the kernel TCP half only" >&2
  lib=""
else
  lib=$(readlink -f "$lib")
fi
exec "$here/vm" run --timeout "${XP_VM_TIMEOUT:-300}" -e "XPRESS_DEMO_LIB=$lib" -e "XPRESS_DEMO_WHY=$why" \
  -e "DEMO_SECONDS=${DEMO_SECONDS:-3}" -- bash "$here/demo-guest.sh"
