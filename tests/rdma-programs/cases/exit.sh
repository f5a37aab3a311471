# shellcheck shell=bash
# A sender that ends without closing its socket (tests/rdma-programs/
# exit_unclosed.c): 8 MiB in 4 KiB writes over RDMA, then exit(), _exit() or
# _Exit() with the socket open (close() then exit() is the reference).  The
# kernel would close the socket and deliver every byte, then a clean end of
# stream; so must xpress: the receiver's count and checksum match the
# sender's and its last read returns 0 (not an error), with no channel
# failure logged.  Once with autocorking off (the default) and once with it
# on (a write may still be held when the program exits).  Before
# stream/exit.cc the receiver read every byte, then an error.
#
# The sender writes its first 16 KiB (on TCP; a one-way connection binds
# after those, protocol.md §2), then waits for a go file that
# this case creates once the sender's live statistics (xpress-stat) show its
# connection in mode rdma: the rest and the end go over RDMA however long
# the upgrade took, which is what the case checks.

EXIT_BYTES=$((8 * 1024 * 1024))
EXIT_SWITCH_SECS=15

# exit_go NAME WRAPPER (run_client's CLIENT_WHILE): until the sender's
# connection is in mode rdma (at most EXIT_SWITCH_SECS), then the go file
# $EXIT_GO; EXIT_SWITCHED says whether it switched.
exit_go() {
  local name=$1 w=$2 p="" t t0 out
  t0=$(usecs)
  t=$(deadline "$EXIT_SWITCH_SECS")
  EXIT_SWITCHED=0
  p=$(child_of "$w") || p=""
  while [ -n "$p" ] && until_t "$t" && kill -0 "$w" 2>/dev/null; do
    out=$(timeout 5 "$XSTAT" --json "$p" 2>/dev/null)
    case $out in *'"mode":"rdma"'*)
      EXIT_SWITCHED=1
      break
      ;;
    esac
    sleep 0.05
  done
  trace "$name: switched=$EXIT_SWITCHED after $(secs_since "$t0") s: go"
  : >"$EXIT_GO"
}

run_case() {
  local port=19600 bin=$REPO/build/tests/rdma-programs/exit-unclosed how cork name srv s r want
  # Each variant is a new process pair: as in dualstack, its one connection
  # waits for the server's rdma_cm port (opened at its first accept) and a
  # retry, under TCG up to 0.5 s (issue 28, connection start).  The sender
  # waits for the switch (exit_go), so only its first 16 KiB cross before
  # it, and the default SWITCH_MAX_PCT holds.
  [ -x "$bin" ] || { fail "exit: $bin missing (make $bin)"; return 1; }
  for cork in 0 64; do
    for how in close exit _exit _Exit; do
      port=$((port + 1))
      name="$how-cork$cork"
      start_server "recv-$name" 40 xp env XPRESS_AUTOCORK_KB=$cork "$bin" recv --bind "$A1" --port "$port"
      srv=$SERVER
      wait_listen "recv-$name" "$port" "$srv" || continue
      local ok=1
      EXIT_GO=$T/go-$name EXIT_SWITCHED=0
      rm -f "$EXIT_GO"
      CLIENT_WHILE=exit_go run_client "send-$name" 30 xp env XPRESS_AUTOCORK_KB=$cork "$bin" send --host "$A1" --port "$port" \
        --bytes "$EXIT_BYTES" --chunk 4096 --how "$how" --go-file "$EXIT_GO" || ok=0
      [ "$EXIT_SWITCHED" = 1 ] ||
        note "$how (autocork $cork KiB): the sender's connection was not in mode rdma within $EXIT_SWITCH_SECS s of its start: the upgrade did not finish (a defect, not the case's timing)"
      end_server "recv-$name" "$srv" $ok
      s=$(cat "$CD/send-$name.out" 2>/dev/null)
      r=$(cat "$CD/recv-$name.out" 2>/dev/null)
      want="received $EXIT_BYTES sum ${s##* } end eof"
      if [ $ok = 1 ] && [ "${s%% sum*}" = "sent $EXIT_BYTES" ] && [ "$r" = "$want" ] &&
        ! grep -q "warn" "$CD/recv-$name.err" 2>/dev/null; then
        pass "$how (autocork $cork KiB): the receiver got all $(hb "$EXIT_BYTES") (sum ${s##* }), then a clean end of stream"
      else
        fail "$how (autocork $cork KiB): sender '${s:-nothing}', receiver '${r:-nothing}' (want '$want') $(grep -m2 "warn" "$CD/recv-$name.err" 2>/dev/null | tr '\n' ' ')"
      fi
      check_stats_rdma "$how (autocork $cork KiB)" "recv-$name"
    done
  done
}
