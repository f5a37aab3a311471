#!/usr/bin/env bash
# Emits the linker version script from preload/interpose_table.def:
# exactly the wrapped functions are global, everything else is local.
set -euo pipefail
names=$(sed -n 's/^XP([^,]*, *\([A-Za-z0-9_]*\),.*/\1/p' "$1")
echo "{"
echo "  global:"
for n in $names; do echo "    $n;"; done
echo "  local: *;"
echo "};"
