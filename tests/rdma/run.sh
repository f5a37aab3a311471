#!/usr/bin/env bash
# `make test-rdma`: boots the Soft-RoCE VM once and runs sanity.sh inside.
# Always ends with a "N passed, M failed" line, also when the VM itself could
# not run (then the failure is counted and the reason printed above it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm=$here/../../tools/softroce/vm
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
rc=0
"$vm" run --timeout "${XP_TEST_RDMA_TIMEOUT:-300}" -- bash "$here/sanity.sh" | tee "$log" || rc=$?
echo "test-rdma: $((SECONDS - start)) s wall clock"
if ! grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$log"; then
  case $rc in
    77) echo "test-rdma: the Soft-RoCE kernel is not prepared (make deps)" ;;
    124) echo "test-rdma: the VM timed out" ;;
    *) echo "test-rdma: the VM did not run the suite to its end (exit $rc)" ;;
  esac
  echo "0 passed, 1 failed"
  exit 1
fi
exit "$rc"
