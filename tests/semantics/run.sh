#!/usr/bin/env bash
# Socket semantics suite: runs each suite binary twice, without and with
# LD_PRELOAD=<lib>, and compares the transcripts case by case.
#
# Usage: tests/semantics/run.sh BIN_DIR LIB [CASE...]
#   BIN_DIR  holds `semantics` and `semantics-fortify` (build/tests/semantics)
#   LIB      the preload library (absolute path), e.g. $PWD/build/libxpress.so
#   CASE     run only these cases (names from `BIN_DIR/semantics --list`)
#
# A case passes when it passed its own checks (what the kernel does) in both
# runs AND both runs printed the same transcript.  Each binary's exit code must
# also be the same in both runs, and `nm` must show that the fortified binary
# calls __recv_chk and __read_chk.  Transcripts: BIN_DIR/{plain,xpress}.<bin>.txt.
# The last line is "N passed, M failed"; the exit status is 1 on any failure.
#
# SEM_XPRESS_ENV="VAR=VALUE ..." is added to the environment of the preloaded
# run only, and SEM_TAG (default "xpress") names its transcripts, e.g.
#   SEM_TAG=usermode SEM_XPRESS_ENV=XPRESS_TEST_USER_MODE=1 run.sh ...
# runs the preloaded side with every connected socket in user mode
# (BIN_DIR/usermode.<bin>.txt), still compared with the plain run.
set -uo pipefail

BIN_DIR=${1:?usage: run.sh BIN_DIR LIB [CASE...]}
LIB=${2:?usage: run.sh BIN_DIR LIB [CASE...]}
shift 2
SELECT=("$@")
RUN_TIMEOUT=${SEM_RUN_TIMEOUT:-300}
TAG=${SEM_TAG:-xpress}
read -r -a XENV <<<"${SEM_XPRESS_ENV:-}"

passed=0
failed=0
skipped=0
failures=()

fail() { # name, reason
  failed=$((failed + 1))
  failures+=("$1")
  echo "FAIL $1: $2"
}

if [ ! -f "$LIB" ]; then
  echo "semantics: $LIB does not exist"
  echo "0 passed, 1 failed"
  exit 1
fi

# ---- the fortified binary must really call the _chk entry points
fort=$BIN_DIR/semantics-fortify
if [ ${#SELECT[@]} -eq 0 ]; then
  syms=$(nm -u "$fort" 2>/dev/null | awk '{print $NF}' | sed 's/@.*//' | grep '_chk$' | sort -u | tr '\n' ' ')
  missing=""
  for s in __recv_chk __read_chk; do
    grep -qw -- "$s" <<<"$syms" || missing+=" $s"
  done
  if [ -z "$missing" ]; then
    passed=$((passed + 1))
    echo "PASS fortify_symbols (nm: $syms)"
  else
    fail fortify_symbols "nm shows no$missing in $fort (has: $syms)"
  fi
fi

# split_cases FILE DIR: one file per case ("=== name" .. "--- verdict name").
split_cases() {
  mkdir -p "$2"
  awk -v dir="$2" '
    /^=== / { name = $2; print > (dir "/" name); next }
    name != "" { print > (dir "/" name) }
    /^--- (ok|FAIL|skip) / { close(dir "/" name); name = "" }
  ' "$1"
}

verdict() { # case file -> ok | FAIL | skip | missing
  [ -f "$1" ] || { echo missing; return; }
  local v
  v=$(awk '/^--- (ok|FAIL|skip) / { print $2 }' "$1" | tail -1)
  echo "${v:-missing}"
}

for bin in semantics semantics-fortify; do
  exe=$BIN_DIR/$bin
  if [ ! -x "$exe" ]; then
    fail "$bin" "$exe not built"
    continue
  fi
  args=()
  if [ ${#SELECT[@]} -gt 0 ]; then
    for c in "${SELECT[@]}"; do
      "$exe" --list | grep -qx -- "$c" && args+=("$c")
    done
    [ ${#args[@]} -gt 0 ] || continue
  fi
  tmp=$(mktemp -d)
  env -u LD_PRELOAD timeout -k 5 "$RUN_TIMEOUT" "$exe" "${args[@]}" \
    >"$BIN_DIR/plain.$bin.txt" 2>"$BIN_DIR/plain.$bin.err"
  rc_plain=$?
  env "${XENV[@]}" LD_PRELOAD="$LIB" timeout -k 5 "$RUN_TIMEOUT" "$exe" "${args[@]}" \
    >"$BIN_DIR/$TAG.$bin.txt" 2>"$BIN_DIR/$TAG.$bin.err"
  rc_xpress=$?
  split_cases "$BIN_DIR/plain.$bin.txt" "$tmp/plain"
  split_cases "$BIN_DIR/$TAG.$bin.txt" "$tmp/xpress"
  names=$( (grep '^=== ' "$BIN_DIR/plain.$bin.txt"; grep '^=== ' "$BIN_DIR/$TAG.$bin.txt") |
    awk '!seen[$2]++ { print $2 }')
  for name in $names; do
    p=$tmp/plain/$name
    x=$tmp/xpress/$name
    vp=$(verdict "$p")
    vx=$(verdict "$x")
    same=1
    cmp -s "$p" "$x" 2>/dev/null || same=0
    if [ $same = 1 ] && [ "$vp" = ok ]; then
      passed=$((passed + 1))
      echo "PASS $name"
    elif [ $same = 1 ] && [ "$vp" = skip ]; then
      skipped=$((skipped + 1))
      echo "SKIP $name: $(grep -m1 '^SKIP: ' "$p" | cut -c7-)"
    elif [ $same = 1 ]; then
      fail "$name" "fails its own checks in both runs (kernel expectation wrong or environment):"
      grep -E '^FAIL|^--- FAIL' "$p" | sed 's/^/    /'
    else
      fail "$name" "transcripts differ (plain: $vp, with LD_PRELOAD: $vx):"
      diff -u --label "plain/$name" --label "$TAG/$name" "$p" "$x" 2>&1 | sed 's/^/    /'
    fi
  done
  if [ "$rc_plain" != "$rc_xpress" ]; then
    fail "$bin-exit-code" "exit code $rc_plain without the library, $rc_xpress with it"
    for r in plain "$TAG"; do
      if [ -s "$BIN_DIR/$r.$bin.err" ]; then
        echo "    stderr ($r):"
        head -20 "$BIN_DIR/$r.$bin.err" | sed 's/^/      /'
      fi
    done
  fi
  [ "$rc_plain" = 124 ] || [ "$rc_plain" = 137 ] && fail "$bin-plain" "timed out after $RUN_TIMEOUT s"
  [ "$rc_xpress" = 124 ] || [ "$rc_xpress" = 137 ] && fail "$bin-xpress" "timed out after $RUN_TIMEOUT s"
  rm -rf "$tmp"
done

if [ $skipped -gt 0 ]; then
  echo "$skipped skipped: the environment cannot provide what they need (see SKIP lines)"
fi
[ $failed -gt 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
