#!/usr/bin/env bash
# Runs one libFuzzer target for SECONDS from its committed seed corpus
# (tests/fuzz/corpus/NAME) plus the inputs earlier runs found (BUILD/fuzz/
# corpus/NAME); prints the executions reached and fails on a finding.
# Usage: tests/fuzz/run.sh NAME SECONDS BUILD
set -uo pipefail
name=$1 secs=$2 build=$3
mkdir -p "$build/fuzz/corpus/$name" "tests/fuzz/corpus/$name"
log="$build/fuzz/$name.log"
"$build/fuzz/fuzz_$name" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
  -artifact_prefix="$build/fuzz/$name-" "$build/fuzz/corpus/$name" "tests/fuzz/corpus/$name" \
  >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
echo "fuzz $name: ${secs}s, ${execs:-?} executions, exit $rc"
if [ "$rc" -ne 0 ]; then
  grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -20
  exit 1
fi
