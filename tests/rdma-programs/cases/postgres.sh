# shellcheck shell=bash
# PostgreSQL 15 under pgbench, both ends preloaded (issue 29; docs/protocol.md
# §7 "A fork child that holds an accepted connection").  The postmaster
# accepts and forks a backend per connection, then closes its own copy: the
# backend, alone with the socket, upgrades it itself.  initdb into the
# case's scratch directory, the server run as the unprivileged user
# postgres on the test bed address.  pgbench -i, then pgbench -S -c 4 -T 10
# preloaded: every transaction correct (pgbench reports none failed), all 4
# backends' connections in mode rdma (their statistics), RDMA on the rxe
# counters against TCP segments; then the same run with neither end
# preloaded, in the same boot, for the select-only TPS over plain TCP.
# PG_RUNS=N repeats the preloaded run N times in the one boot.

PG_BIN=/usr/lib/postgresql/15/bin
PG_PORT=15433

# pg_start NAME MODE: the server, as postgres, in the background
pg_start() {
  local name=$1 mode=$2
  start_server "$name" 150 "$mode" setpriv --reuid=postgres --regid=postgres --init-groups \
    "$PG_BIN/postgres" -D "$PGD/pgdata" -c listen_addresses="$A1" -p "$PG_PORT" \
    -c unix_socket_directories="$PGD/pgsock" -c fsync=off -c synchronous_commit=off \
    -c shared_buffers=16MB -c max_connections=20
  PG_SRV=$SERVER
  wait_listen "$name" "$PG_PORT" "$PG_SRV" || return 1
  # Listening is not ready: it refuses connections while it starts up.
  local t
  t=$(deadline 60)
  while until_t "$t"; do
    "$PG_BIN/pg_isready" -q -h "$A1" -p "$PG_PORT" -t 2 && return 0
    sleep 0.5
  done
  fail "$name: not ready within 60 s of listening"
  return 1
}

# pg_bench NAME MODE ARGS...: pgbench against the server (as root: a client)
pg_bench() {
  local name=$1 mode=$2
  shift 2
  prefix "$mode" "$name"
  timeout -k 3 60 "${PRE[@]}" "$PG_BIN/pgbench" -h "$A1" -p "$PG_PORT" -U postgres "$@" postgres \
    >"$CD/$name.out" 2>"$CD/$name.err" </dev/null
}

# tps_of NAME: pgbench's TPS (without the initial connection time)
tps_of() { sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' "$CD/$1.out" | head -n 1; }
# failed_of NAME: pgbench's failed transactions (empty: no such line)
failed_of() { sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$CD/$1.out" | head -n 1; }

# pg_run_xp SUFFIX: one preloaded run (server and pgbench, both ends
# preloaded) and its checks; PG_TPS: its select-only TPS.
pg_run_xp() {
  local sfx=$1
  RDMA_LOG_LEVEL=$(log_at info) pg_start "pg-srv$sfx" xp || return 1
  if [ ! -e "$PGD/initialised" ]; then
    pg_bench pg-init plain -i -s 1 -q || fail "pgbench -i failed: $(tail -c 300 "$CD/pg-init.err" | tr '\n' ' ')"
    touch "$PGD/initialised"
  fi
  net_snap "$T/snap-xp"
  local rc=0
  RDMA_LOG_LEVEL=$(log_at info) pg_bench "pg-bench$sfx" xp -S -c 4 -j 2 -T 10 -n || rc=$?
  net_delta "$T/snap-xp"
  local rxe=$((${ND[rxe0.sent_pkts]:-0} + ${ND[rxe1.sent_pkts]:-0}))
  local tcp=$((${ND[tc.veth0.tcp_pkts]:-0} + ${ND[tc.veth1.tcp_pkts]:-0}))
  local roce=$((${ND[tc.veth0.roce_bytes]:-0} + ${ND[tc.veth1.roce_bytes]:-0}))
  stop_server "pg-srv$sfx" "$PG_SRV" INT
  local failed
  PG_TPS=$(tps_of "pg-bench$sfx")
  failed=$(failed_of "pg-bench$sfx")
  ok_if "pgbench -S -c 4 preloaded$sfx: every transaction correct ($(grep -c . "$CD/pg-bench$sfx.err") stderr lines, failed ${failed:-?}, tps ${PG_TPS:-?})" \
    "pgbench -S -c 4 preloaded$sfx: exit $rc, failed transactions '${failed:-?}': $(tail -c 300 "$CD/pg-bench$sfx.err" | tr '\n' ' ')" \
    test "$rc" = 0 -a "${failed:-x}" = 0 -a -n "$PG_TPS"
  note "during the preloaded run$sfx: rxe sent $rxe packets (RoCE $(hb "$roce")), TCP $tcp segments on the veth"
  stats_load "pg-srv$sfx"
  local srv_rdma=$S_RDMA srv_desc=$S_DESC
  stats_load "pg-bench$sfx"
  local cli_rdma=$S_RDMA cli_desc=$S_DESC
  # Every one of pgbench's 4 connections on RDMA, at both ends.
  ok_if "pgbench's 4 connections on RDMA$sfx: server processes $srv_desc; pgbench $cli_desc" \
    "pgbench's connections not all on RDMA$sfx: server processes $srv_desc; pgbench $cli_desc" \
    test "${srv_rdma:-0}" -ge 4 -a "${cli_rdma:-0}" -ge 4
  ok_if "RDMA carried the preloaded run$sfx: rxe $rxe packets against $tcp TCP segments" \
    "the preloaded run$sfx was not on RDMA: rxe $rxe packets against $tcp TCP segments" \
    test "$rxe" -gt "$tcp"
}

run_case() {
  if [ ! -x "$PG_BIN/postgres" ] || ! id postgres >/dev/null 2>&1; then
    fail "PostgreSQL 15 not installed (tools/install-deps.sh: postgresql)"
    return 0
  fi
  # Everything the server writes (data, socket, its statistics and logs) is
  # the postgres user's: a directory it can reach ($T's parents are not; on tmpfs: a 9p share takes no Unix socket).
  PGD=$(mktemp -d /dev/shm/xp-pg.XXXXXX)
  mkdir -p "$PGD/pgdata" "$PGD/pgsock"
  chown -R postgres:postgres "$PGD"
  chmod 755 "$PGD"
  chmod 1777 "$CD" "$CD/stats"
  if ! timeout 120 setpriv --reuid=postgres --regid=postgres --init-groups \
    "$PG_BIN/initdb" -D "$PGD/pgdata" -U postgres --auth=trust --no-sync >"$CD/initdb.out" 2>&1; then
    fail "initdb failed: $(tail -c 300 "$CD/initdb.out" | tr '\n' ' ')"
    return 0
  fi
  echo "host all all 10.77.0.0/24 trust" >>"$PGD/pgdata/pg_hba.conf"

  # Preloaded, both ends (PG_RUNS times: the hand-over's races show in
  # some runs only).
  local run runs=${PG_RUNS:-1} tps_xp="" tps_all=() sfx
  for ((run = 1; run <= runs; run++)); do
    sfx=""
    [ "$runs" = 1 ] || sfx=-$run
    pg_run_xp "$sfx" || return 1
    tps_all+=("${PG_TPS:-?}")
    [ -n "$tps_xp" ] || tps_xp=$PG_TPS
  done
  [ "$runs" = 1 ] || note "select-only TPS of the $runs preloaded runs: ${tps_all[*]}"

  # The same, neither end preloaded.
  pg_start pg-plain plain || return 1
  local rc=0
  pg_bench pg-bench-plain plain -S -c 4 -j 2 -T 10 -n || rc=$?
  stop_server pg-plain "$PG_SRV" INT
  local tps_tcp
  tps_tcp=$(tps_of pg-bench-plain)
  note "select-only TPS (pgbench -S -c 4 -T 10): preloaded ${tps_xp:-?}, plain TCP ${tps_tcp:-?} (rc $rc, failed $(failed_of pg-bench-plain))"
  echo "postgres tps_xp=${tps_xp:-} tps_tcp=${tps_tcp:-}" >>"$CD/summary"
  rm -rf "$PGD"
}
