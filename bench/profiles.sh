#!/usr/bin/env bash
# What each profile (common/settings.def, README "Profiles") changes, in one
# Soft-RoCE VM boot: sockperf over RDMA (server 10.77.0.2, client from
# 10.77.0.1, both preloaded with the same profile), per profile
#   pp     ping-pong 64 B as fast as it goes: average latency (us)
#   sparse ping-pong 64 B at 100 messages/s (a request every 10 ms):
#          average latency, the CPU seconds both ends used, and the
#          server's alone (sockperf's client paces by busy-waiting; the
#          server only waits, so its CPU is what a profile's spinning costs)
#   tp     throughput of 16 KiB messages: MB/s
# plus the connections that went over RDMA (client statistics).
# usage: tools/softroce/vm run --timeout 600 -- bash bench/profiles.sh
#        (-e PROFILES="default latency" -e SECS=3 to change the runs)
set -u
cd "$(dirname "$0")/.."
lib=${XPRESS_LIB:-$PWD/build/libxpress.so}
secs=${SECS:-3}
export TMPDIR=${TMPDIR:-/tmp}
t=$(mktemp -d)
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

printf '%-11s %9s %11s %11s %9s %9s %5s\n' profile pp_us sparse_us sparse_cpu srv_cpu tp_MBps rdma
port=$((20000 + RANDOM % 20000)) # each run its own ports
for prof in ${PROFILES:-default latency low-cpu throughput}; do
  port=$((port + 1)) # a fresh port: the last one may still be held
  penv=()
  [ "$prof" = default ] || penv=(XPRESS_PROFILE="$prof")
  env "${penv[@]}" LD_PRELOAD="$lib" sockperf server --tcp -i 10.77.0.2 -p $port >"$t/srv.$prof" 2>&1 &
  srv=$!
  for _ in $(seq 100); do ss -ltn | grep -q "10.77.0.2:$port " && break; sleep 0.1; done
  run() { # NAME ARGS...: a preloaded client; its CPU seconds into $t/NAME.cpu
    local name=$1
    shift
    /usr/bin/time -f '%U %S' -o "$t/$name.time" env "${penv[@]}" LD_PRELOAD="$lib" XPRESS_STATS=1 \
      sockperf "$@" --tcp -i 10.77.0.2 -p $port -t "$secs" >"$t/$name.out" 2>"$t/$name.err"
  }
  run "pp.$prof" ping-pong -m 64
  s0=$(ticks $srv)
  run "sparse.$prof" ping-pong -m 64 --mps 100
  s1=$(ticks $srv)
  run "tp.$prof" throughput -m 16384
  if ! kill -INT $srv 2>/dev/null; then
    echo "$prof: the server ended early:" >&2
    tail -5 "$t/srv.$prof" >&2
    tail -3 "$t/pp.$prof.err" >&2
  fi
  wait $srv 2>/dev/null
  lat() { grep -m1 -o 'avg-latency=[0-9.]*' "$t/$1.out" "$t/$1.err" | head -1 | cut -d= -f2; }
  ccpu=$(awk '{print $1 + $2}' "$t/sparse.$prof.time")
  scpu=$(awk -v a="$s0" -v b="$s1" -v hz="$hz" 'BEGIN {print (b - a) / hz}')
  mbps=$(grep -o 'BandWidth is [0-9.]*' "$t/tp.$prof.out" "$t/tp.$prof.err" | head -1 | awk '{print $3}')
  rdma=$(cat "$t"/*."$prof".err | grep -o 'connections *rdma [0-9]*' | awk '{s += $3} END {print s}')
  printf '%-11s %9s %11s %11s %9s %9s %5s\n' "$prof" "$(lat "pp.$prof")" "$(lat "sparse.$prof")" \
    "$(awk -v c="$ccpu" -v s="$scpu" 'BEGIN {print c + s}')" "$scpu" "${mbps:-?}" "${rdma:-0}"
done
rm -rf "$t"
