#!/usr/bin/env bash
# test.sh - sets up (scripts/setup.sh), then runs the whole test suite. Prints one summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }
meson test -C build --print-errorlogs --num-processes 2 "$@"
status=$?
# Count from meson's machine-readable log (one JSON object per test).
node -e '
const fs = require("fs");
let passed = 0, failed = 0;
try {
  for (const line of fs.readFileSync(process.argv[1], "utf8").split("\n")) {
    if (!line.trim()) continue;
    const r = JSON.parse(line).result;
    if (["OK", "EXPECTEDFAIL", "SKIP"].includes(r)) passed++; else failed++;
  }
} catch (e) { failed++; }
console.log(`${passed} passed, ${failed} failed`);
' build/meson-logs/testlog.json
exit $status
