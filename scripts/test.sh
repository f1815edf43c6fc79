#!/usr/bin/env bash
# test.sh - sets up (scripts/setup.sh), then runs the whole test suite (arguments go to
# `meson test`: --suite NAME, a test's name, ...). Prints one summary line, counted from this
# run's own log: "N passed, N failed, N skipped". A selection that matches no test, or a run
# that leaves no log, is a failure, never a count of an earlier run.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
log=build/meson-logs/testlog.json
rm -f "$log"
meson test -C build --print-errorlogs --num-processes 2 "$@"
status=$?
# Count from this run's machine-readable log (scripts/count_results.mjs).
node scripts/count_results.mjs "$log"
counted=$?
[ "$status" -ne 0 ] && exit "$status"
exit "$counted"
