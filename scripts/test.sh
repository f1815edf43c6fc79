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
# Count from meson's machine-readable log (one JSON object per test). A test that exits 77 (a tool
# it needs is missing) is skipped: never counted as passed.
node -e '
const fs = require("fs");
let passed = 0, failed = 0, skipped = 0;
try {
  for (const line of fs.readFileSync(process.argv[1], "utf8").split("\n")) {
    if (!line.trim()) continue;
    const r = JSON.parse(line).result;
    if (r === "OK" || r === "EXPECTEDFAIL") passed++;
    else if (r === "SKIP") skipped++;
    else failed++;
  }
} catch (e) {
  console.error("test.sh: no test log from this run (" + process.argv[1] + "): " + e.message);
  failed++;
}
if (passed + failed + skipped === 0) {
  console.error("test.sh: no test ran (the selection matched none)");
  failed++;
}
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
' "$log"
counted=$?
[ "$status" -ne 0 ] && exit "$status"
exit "$counted"
