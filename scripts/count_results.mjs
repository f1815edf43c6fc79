// count_results.mjs - the summary line of a test run from meson's machine-readable log (one JSON
// object per test): "N passed, N failed, N skipped". OK and EXPECTEDFAIL pass; SKIP (a test that
// exited 77: a tool it needs is missing) is skipped, never passed; anything else fails. A missing
// or unreadable log, or one with no test in it (a selection that matched none), is a failure.
//
//   node scripts/count_results.mjs LOG     exit 0 when nothing failed, 1 otherwise
import { readFileSync } from "node:fs";

const file = process.argv[2];
let passed = 0, failed = 0, skipped = 0;
try {
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.trim()) continue;
    const r = JSON.parse(line).result;
    if (r === "OK" || r === "EXPECTEDFAIL") passed++;
    else if (r === "SKIP") skipped++;
    else failed++;
  }
} catch (e) {
  console.error(`count_results: no test log from this run (${file}): ${e.message}`);
  failed++;
}
if (passed + failed + skipped === 0) {
  console.error("count_results: no test ran (the selection matched none)");
  failed++;
}
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
