#!/usr/bin/env bash
# test.sh - sets up (scripts/setup.sh), then runs the whole test suite. Prints one summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
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
} catch (e) { failed++; }
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
' build/meson-logs/testlog.json
exit $status
