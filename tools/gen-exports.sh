#!/usr/bin/env bash
# Emits the linker version script from the interposition tables
# (preload/interpose_table.def, preload/alloc_table.def): exactly the
# wrapped functions are global, everything else is local.
set -euo pipefail
names=$(sed -n 's/^X[PA]([^,]*, *\([A-Za-z0-9_]*\),.*/\1/p' "$@")
echo "{"
echo "  global:"
for n in $names; do echo "    $n;"; done
echo "  local: *;"
echo "};"
