#!/usr/bin/env bash
# Deterministic cost of the RDMA data path in user space: instructions
# (callgrind) per 64-byte request/response round trip over a bound stream
# (two sends, two receives) and per receive that finds nothing (one round
# of a blocked receiver's spin), measured on the unit tests' fake transport
# so no NIC is needed.  The fake link's own work (standing in for the
# provider's post and poll) is reported apart.  Under Soft-RoCE/TCG every
# instruction costs several ns, so this is the part of the latency above
# raw verbs that the library controls.
# Usage: make bench-hotpath, or bench/hotpath.sh [ROUNDS] with XPRESS_UNIT
# naming a unit-test binary (default: the LTO-linked one make builds).
# Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10000}
unit=${XPRESS_UNIT:-$PWD/build/tests/unit/xpress-unit-lto}
command -v valgrind >/dev/null || { echo "hotpath: valgrind not installed" >&2; exit 2; }
[ -x "$unit" ] || { echo "hotpath: $unit not built (make bench-hotpath builds it)" >&2; exit 2; }
tmp=$(mktemp -d); [ -n "${HOTPATH_DEBUG:-}" ] || trap 'rm -rf "$tmp"' EXIT
tc='*64-byte ping-pong over a bound stream*'
run() { # ROUNDS EMPTY OUT -> total instructions
  XPRESS_HOTPATH_ROUNDS=$1 XPRESS_HOTPATH_EMPTY=$2 valgrind --tool=callgrind \
    --callgrind-out-file="$3" "$unit" -tc="$tc" >"$3.log" 2>&1 ||
    { cat "$3.log" >&2; exit 1; }
  sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$3.log"
}
# inclusive instructions of the fake link's functions (post, poll, repost)
# (run outside the tree: there it also annotates our sources by relative
# path, and their lines would count twice)
fake() {
  cd "$tmp" && callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$1" 2>/dev/null |
    awk '/fake_link.h:xp::test::FakeLink::(post_write_imm|post_send|poll|post_recvs)\(/ { gsub(",","",$1); s += $1 } END { print s + 0 }'
}
base=$(run 100 100 "$tmp/base")
rt=$(run $((rounds + 100)) 100 "$tmp/rt")
em=$(run 100 $((rounds + 100)) "$tmp/em")
fb=$(fake "$tmp/base") fr=$(fake "$tmp/rt") fe=$(fake "$tmp/em")
[ -n "${HOTPATH_DEBUG:-}" ] && echo "base $base rt $rt em $em fake $fb $fr $fe" >&2
per() { echo $(((($1) + rounds / 2) / rounds)); }
echo "| per operation (instructions, $rounds repetitions) | library | fake link |"
echo "|---|---|---|"
echo "| 64 B round trip (2 send + 2 recv) | $(per "rt - base - (fr - fb)") | $(per "fr - fb") |"
echo "| empty receive (one spin round) | $(per "em - base - (fe - fb)") | $(per "fe - fb") |"
if [ -n "${HOTPATH_TOP:-}" ]; then
  echo
  echo "Largest self costs in the round-trip run (all of it, set-up included):"
  (cd "$tmp" && callgrind_annotate "$tmp/rt" 2>/dev/null) | grep -E '^ *[0-9,]+ ' | head -"$HOTPATH_TOP" | cut -c1-160
fi
