# shellcheck shell=bash
# nginx (master + 4 workers, sendfile on) on $A1 serving a 50 MiB file and a
# 64 KiB one; from $A0 curl downloads the big one (sha256 compared), wrk
# loads the small one (20 connections, 3 s; no errors, no non-2xx).

run_case() {
  local port=18080 snap
  mkdir -p "$T/www"
  head -c $((50 * 1024 * 1024)) /dev/urandom >"$T/www/big.bin"
  head -c 65536 /dev/urandom >"$T/www/small.bin"
  local user="user root root;"
  [ "$(id -u)" = 0 ] || user=""
  cat >"$T/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes 4;
$user
pid $T/nginx.pid;
error_log $CD/nginx-error.log info;
events { worker_connections 256; }
http {
  default_type application/octet-stream;
  access_log off;
  client_body_temp_path $T/client_body;
  proxy_temp_path $T/proxy;
  fastcgi_temp_path $T/fastcgi;
  uwsgi_temp_path $T/uwsgi;
  scgi_temp_path $T/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 30;
  server {
    listen $A1:$port;
    root $T/www;
  }
}
CONF
  cp "$T/nginx.conf" "$CD/nginx.conf"
  start_server nginx 85 xp nginx -e "$CD/nginx-early-error.log" -p "$T" -c "$T/nginx.conf"
  local srv=$SERVER master workers=""
  wait_listen nginx "$port" "$srv" || return 1
  master=$(child_of "$srv")
  local t
  t=$(deadline 10)
  while until_t "$t"; do
    workers=$(ps -o pid= --ppid "$master" | tr -d ' ' | tr '\n' ' ')
    [ "$(wc -w <<<"$workers")" -ge 4 ] && break
    sleep 0.1
  done
  ok_if "master $master with 4 workers ($workers)" "master $master has $(wc -w <<<"$workers") workers, want 4" \
    [ "$(wc -w <<<"$workers")" = 4 ]
  local url=http://$A1:$port

  # ---- curl, 50 MiB
  snap=$T/snap-curl
  net_snap "$snap"
  if run_client curl 40 xp curl -sS --fail -o "$T/got.bin" -w '%{http_code} %{size_download}' "$url/big.bin"; then
    local want got
    want=$(sha "$T/www/big.bin")
    got=$(sha "$T/got.bin")
    if [ "$got" = "$want" ] && [ "$(cat "$CD/curl.out")" = "200 52428800" ]; then
      pass "curl GET 50 MiB in ${CLIENT_SECS} s: sha256 match ${want:0:16}"
    else
      fail "curl GET 50 MiB: '$(cat "$CD/curl.out")' (want '200 52428800'), sha256 ${got:0:16} (want ${want:0:16})"
    fi
    check_stats_rdma "curl" curl
    check_net "curl 50 MiB" "$snap" 52428800 "$(stats_conns curl)" "$(stats_before_switch curl)"
  else
    step_failed "$snap" curl
  fi
  rm -f "$T/got.bin"

  # ---- wrk
  snap=$T/snap-wrk
  net_snap "$snap"
  # --timeout 6s: 20 connections share the VM's Soft-RoCE bandwidth, so on
  # a loaded 2-core host a response may take longer than wrk's default 2 s
  # (docs/results/tuning.md).  A connection that stalls for good still
  # shows as a timeout.
  if run_client wrk 40 xp wrk -t 2 -c 20 -d 8s --timeout 6s "$url/small.bin"; then
    local out=$CD/wrk.out reqs
    reqs=$(grep -o '^ *[0-9]* requests in' "$out" | grep -o '[0-9]*')
    if [[ ${reqs:-} =~ ^[0-9]+$ ]] && [ "$reqs" -gt 0 ] && ! grep -q 'Socket errors\|Non-2xx' "$out"; then
      pass "wrk -c 20 -d 8s 64 KiB file: $(grep -o '[0-9]* requests in [0-9.]*s, [0-9.]*[KMG]*B read' "$out"), no socket errors, no non-2xx"
    else
      fail "wrk: requests '${reqs:-}'; $(grep 'Socket errors\|Non-2xx' "$out" | tr '\n' ' ')"
    fi
    check_stats_rdma "wrk" wrk
    # wrk's 20 connections start at once, to 4 worker processes: under TCG
    # their upgrades took up to ~3 s of the 8 s run (the engine threads get
    # little CPU while 2 vCPUs move responses over TCP at full speed; seen:
    # every connection switched 3.1 s in), so up to a third may go on TCP
    # before the switch: the statistics count those bytes, and the check
    # holds the rest to the usual shares.
    check_net "wrk" "$snap" "$(stats_bytes wrk)" "$(stats_conns wrk)" "$(stats_before_switch wrk)"
  else
    step_failed "$snap" wrk
  fi

  stop_server nginx "$srv" QUIT
  local errs
  errs=$(grep -hE '\[(error|crit|alert|emerg)\]' "$CD/nginx-error.log" "$CD/nginx-early-error.log" 2>/dev/null | head -3)
  ok_if "nginx error log clean" "nginx error log: $errs" [ -z "$errs" ]
  check_stats_rdma "server (master + workers)" nginx
}
