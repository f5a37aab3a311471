# shellcheck shell=bash
# Node.js (libuv: non-blocking writev, level-triggered epoll, a zero-length
# write after each response): an HTTP server on $A1 and a client from $A0
# making NODE_N requests on one keep-alive connection, NODE_MIB MiB per
# response (sha256 of every body compared with the served file).  First both
# plain (kernel TCP, the reference time in the same boot), then both
# preloaded: the connection in mode rdma on both ends and the bytes across
# rxe.

NODE_N=20
NODE_MIB=1

# node_step LABEL MODE PORT
node_step() {
  local label=$1 mode=$2 port=$3 snap want line
  start_server "node-server-$label" 80 "$mode" node "$HERE/node_http.js" server "$A1" "$port" "$T/body.bin"
  local srv=$SERVER
  wait_listen "node-server-$label" "$port" "$srv" || return 1
  snap=$T/snap-$label
  net_snap "$snap"
  want=$(sha "$T/body.bin")
  if ! run_client "node-client-$label" 60 "$mode" node "$HERE/node_http.js" client "$A1" "$port" "$NODE_N"; then
    [ "$mode" = plain ] || step_failed "$snap" "node-client-$label"
    stop_server "node-server-$label" "$srv" TERM
    return 1
  fi
  line=$(cat "$CD/node-client-$label.out")
  if [ "$line" != "${line#"responses $NODE_N bytes $((NODE_N * NODE_MIB * 1048576)) sha256 $want sockets 1 "}" ]; then
    pass "$label: $NODE_N keep-alive responses of $NODE_MIB MiB on one connection, sha256 match ${want:0:16}: $line"
  else
    fail "$label: want $NODE_N responses of $NODE_MIB MiB on 1 socket, sha256 ${want:0:16}; got: $line"
  fi
  stop_server "node-server-$label" "$srv" TERM
  if [ "$mode" = xp ]; then
    check_stats_rdma "node $label" "node-client-$label" "node-server-$label"
    check_net "node $label" "$snap" "$(stats_bytes "node-client-$label")" "$(stats_conns "node-client-$label")" \
      "$(stats_before_switch "node-client-$label")"
  fi
}

run_case() {
  if ! command -v node >/dev/null; then
    fail "node is not installed (make deps: nodejs)"
    return
  fi
  head -c $((NODE_MIB * 1048576)) /dev/urandom >"$T/body.bin"
  node_step tcp plain 18091
  local tcp_ms=${CLIENT_SECS}
  node_step rdma xp 18092
  note "round trips: kernel TCP $(grep -o 'per_response_ms [0-9.]*' "$CD/node-client-tcp.out" 2>/dev/null) (client ${tcp_ms} s), RDMA $(grep -o 'per_response_ms [0-9.]*' "$CD/node-client-rdma.out" 2>/dev/null) (client ${CLIENT_SECS} s)"
  rm -f "$T/body.bin"
}
