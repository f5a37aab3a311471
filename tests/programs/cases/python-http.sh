# shellcheck shell=bash
# python3 -m http.server (threading server) fetched by curl: a 1 MiB file, a
# small file, the directory listing, a 404, and 4 parallel downloads.

prepare() {
  mkdir -p "$DATA/www"
  head -c 1048576 /dev/urandom >"$DATA/www/big.bin"
  for i in $(seq 1 20); do echo "xpress small file line $i"; done >"$DATA/www/small.txt"
}

run_mode() {
  local port tmp
  port=$(free_port)
  mktmp tmp
  cp -r "$DATA/www" "$tmp/www"
  start_server http-server 60 "$PY" -u -m http.server --bind 127.0.0.1 --directory "$tmp/www" "$port"
  local srv=$SERVER_PID
  wait_listen http-server "$port" "$srv"
  check_mapped http-server "$(server_child "$srv")"
  local url=http://127.0.0.1:$port

  xrun curl-get 20 curl -sS --fail -w '%{http_code} %{size_download}\n' \
    -o "$D/big.bin" "$url/big.bin" -o "$D/small.txt" "$url/small.txt" -o "$D/listing.html" "$url/"
  expect_file_eq big.bin "$D/big.bin" "$DATA/www/big.bin"
  expect_file_eq small.txt "$D/small.txt" "$DATA/www/small.txt"
  expect_eq "listing names both files" "$(grep -o 'href="[^"]*"' "$D/listing.html" | tr '\n' ' ')" 'href="big.bin" href="small.txt" '
  expect_eq "status/size per transfer" "$(tr '\n' ' ' <"$D/curl-get.out")" \
    "200 1048576 200 $(stat -c %s "$DATA/www/small.txt") 200 $(stat -c %s "$D/listing.html") "
  verdict "curl GET 1 MiB, small file, directory listing: sha256 match"
  record curl.get "$(sha256 "$D/big.bin") $(sha256 "$D/small.txt") $(sha256 "$D/listing.html") $(tr '\n' ' ' <"$D/curl-get.out")"

  xrun curl-404 20 curl -sS -o /dev/null -w '%{http_code}\n' "$url/missing"
  check_eq "curl GET of a missing file: 404" "$(cat "$D/curl-404.out")" 404
  record curl.404 "$(cat "$D/curl-404.out")"

  xrun curl-parallel 30 curl -sS --fail --parallel --parallel-max 4 \
    -o "$D/p1.bin" "$url/big.bin" -o "$D/p2.bin" "$url/big.bin" \
    -o "$D/p3.bin" "$url/big.bin" -o "$D/p4.bin" "$url/big.bin"
  local i
  for i in 1 2 3 4; do expect_file_eq "parallel download $i" "$D/p$i.bin" "$DATA/www/big.bin"; done
  verdict "curl 4 parallel downloads of 1 MiB: sha256 match"
  record curl.parallel "$(for i in 1 2 3 4; do sha256 "$D/p$i.bin"; done | sort -u | tr '\n' ' ')"

  stop_server http-server "$srv" INT
  check_eq "server log: every request answered (7 x 200, 1 x 404)" \
    "$(grep -o '" [0-9][0-9][0-9] ' "$D/http-server.err" | sort | uniq -c | tr -s ' ' | tr '\n' ',')" ' 7 " 200 , 1 " 404 ,'
}
