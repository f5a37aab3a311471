# shellcheck shell=bash
# nginx (master + 2 workers, own config, daemon off) serving a 1 MiB file and a
# small one, with sendfile on and off, plus WebDAV PUT uploads; fetched by curl
# (keep-alive, range, upload; bodies checked by sha256) and loaded by wrk
# (no socket errors, no non-2xx responses).

prepare() {
  mkdir -p "$DATA/www"
  head -c 1048576 /dev/urandom >"$DATA/www/big.bin"
  for i in $(seq 1 20); do echo "xpress small file line $i"; done >"$DATA/www/small.txt"
  head -c 3000000 /dev/urandom >"$DATA/upload.bin"
}

# wrk_check NAME: wrk output must show >0 requests, no errors, no non-2xx.
wrk_check() {
  local out=$D/$1.out reqs
  reqs=$(grep -o '^ *[0-9]* requests in' "$out" | grep -o '[0-9]*' || echo 0)
  expect_range requests "$reqs" 1 100000000
  expect_eq "socket errors" "$(grep -c 'Socket errors' "$out" || true)" 0
  expect_eq "non-2xx/3xx responses" "$(grep -c 'Non-2xx' "$out" || true)" 0
}

run_mode() {
  local port tmp
  port=$(free_port)
  mktmp tmp
  cp -r "$DATA/www" "$tmp/www"
  mkdir -p "$tmp/upload"
  chmod -R a+rX "$tmp/www"
  chmod 777 "$tmp/upload"
  cat >"$tmp/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
pid $tmp/nginx.pid;
error_log $D/nginx-error.log info;
events { worker_connections 256; }
http {
  default_type application/octet-stream;
  access_log $D/nginx-access.log;
  client_body_temp_path $tmp/client_body;
  proxy_temp_path $tmp/proxy;
  fastcgi_temp_path $tmp/fastcgi;
  uwsgi_temp_path $tmp/uwsgi;
  scgi_temp_path $tmp/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 30;
  server {
    listen 127.0.0.1:$port;
    root $tmp/www;
    location /nosendfile/ { alias $tmp/www/; sendfile off; }
    location /upload/ {
      root $tmp;
      dav_methods PUT;
      create_full_put_path on;
      client_max_body_size 16m;
    }
  }
}
EOF
  cp "$tmp/nginx.conf" "$D/nginx.conf"
  start_server nginx 60 nginx -e "$D/nginx-early-error.log" -p "$tmp" -c "$tmp/nginx.conf"
  local srv=$SERVER_PID master workers=""
  wait_listen nginx "$port" "$srv"
  master=$(server_child "$srv")
  for _ in $(seq 1 100); do
    workers=$(ps -o pid= --ppid "$master" | tr -d ' ' | tr '\n' ' ' || true)
    [ "$(wc -w <<<"$workers")" -ge 2 ] && break
    sleep 0.05
  done
  check_eq "master has 2 worker processes" "$(wc -w <<<"$workers")" 2
  check_mapped "nginx master" "$master"
  local w
  for w in $workers; do check_mapped "nginx worker $w" "$w"; done

  local url=http://127.0.0.1:$port
  # One curl, one keep-alive connection, three files (sendfile on and off).
  xrun curl-get 20 curl -sS --fail -w '%{http_code} %{size_download} %{num_connects}\n' \
    -o "$D/big.bin" "$url/big.bin" -o "$D/big-nosendfile.bin" "$url/nosendfile/big.bin" \
    -o "$D/small.txt" "$url/small.txt"
  expect_file_eq "big.bin (sendfile)" "$D/big.bin" "$DATA/www/big.bin"
  expect_file_eq "big.bin (no sendfile)" "$D/big-nosendfile.bin" "$DATA/www/big.bin"
  expect_file_eq "small.txt" "$D/small.txt" "$DATA/www/small.txt"
  expect_eq "status/size/new connections per transfer" "$(tr '\n' ' ' <"$D/curl-get.out")" \
    "200 1048576 1 200 1048576 0 200 $(stat -c %s "$DATA/www/small.txt") 0 "
  verdict "curl GET 1 MiB (sendfile on, off) + small file over one keep-alive connection: sha256 match"
  record curl.get "$(sha256 "$D/big.bin") $(sha256 "$D/big-nosendfile.bin") $(sha256 "$D/small.txt") $(tr '\n' ' ' <"$D/curl-get.out")"

  xrun curl-range 20 curl -sS --fail -r 1000-100999 -o "$D/range.bin" "$url/big.bin"
  dd if="$DATA/www/big.bin" of="$D/range.want" bs=1000 skip=1 count=100 status=none
  check_file_eq "curl range request bytes 1000-100999" "$D/range.bin" "$D/range.want"
  record curl.range "$(sha256 "$D/range.bin")"

  xrun curl-put 20 curl -sS --fail -w '%{http_code}\n' -T "$DATA/upload.bin" "$url/upload/up.bin"
  xrun curl-get-upload 20 curl -sS --fail -o "$D/upload-back.bin" "$url/upload/up.bin"
  expect_eq "PUT status" "$(cat "$D/curl-put.out")" 201
  expect_file_eq "stored upload" "$tmp/upload/up.bin" "$DATA/upload.bin"
  expect_file_eq "upload fetched back" "$D/upload-back.bin" "$DATA/upload.bin"
  verdict "curl PUT 3 MB upload stored and fetched back byte-exact"
  record curl.put "$(cat "$D/curl-put.out") $(sha256 "$D/upload-back.bin")"

  xrun wrk-small 20 wrk -t2 -c8 -d1s "$url/small.txt"
  wrk_check wrk-small
  verdict "wrk small.txt (2 threads, 8 connections, 1s): $(grep -o '[0-9]* requests in' "$D/wrk-small.out"), 0 errors, 0 non-2xx"
  xrun wrk-big 20 wrk -t2 -c4 -d1s "$url/big.bin"
  wrk_check wrk-big
  verdict "wrk big.bin (2 threads, 4 connections, 1s): $(grep -o '[0-9]* requests in' "$D/wrk-big.out"), 0 errors, 0 non-2xx"
  record wrk "small: $(grep -c 'Socket errors\|Non-2xx' "$D/wrk-small.out" || true) error lines; big: $(grep -c 'Socket errors\|Non-2xx' "$D/wrk-big.out" || true) error lines"

  stop_server nginx "$srv"
  check_eq "nginx error log has no error/crit/alert/emerg lines" \
    "$(grep -E '\[(error|crit|alert|emerg)\]' "$D/nginx-error.log" "$D/nginx-early-error.log" 2>/dev/null | head -3)" ""
}
