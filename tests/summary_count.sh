#!/usr/bin/env bash
# summary_count.sh - the summary line cannot lie: scripts/count_results.mjs over synthetic meson
# logs (passes, expected failures, skips, failures, timeouts, an empty selection, a missing or
# broken log), and scripts/test.sh removes the previous run's log before it runs.
set -uo pipefail
root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/.." && pwd)"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
expect() {  # expect NAME STATUS LINE < LOG-CONTENT (or "absent")
  local name=$1 want_status=$2 want_line=$3 out status=0
  out=$(node "$root/scripts/count_results.mjs" "$work/$name.json" 2>/dev/null) || status=$?
  if [ "$status" -ne "$want_status" ] || [ "$out" != "$want_line" ]; then
    echo "FAIL $name: got '$out' (exit $status), expected '$want_line' (exit $want_status)"
    failed=$((failed + 1))
  else
    echo "ok   $name: $out"
  fi
}
line() { printf '{"name": "%s", "result": "%s"}\n' "$1" "$2"; }
{ line a OK; line b OK; line c EXPECTEDFAIL; } > "$work/all-ok.json"
expect all-ok 0 "3 passed, 0 failed, 0 skipped"
{ line a OK; line b SKIP; line c SKIP; } > "$work/skips.json"
expect skips 0 "1 passed, 0 failed, 2 skipped"
{ line a OK; line b FAIL; line c TIMEOUT; line d UNEXPECTEDPASS; line e ERROR; } > "$work/failures.json"
expect failures 1 "1 passed, 4 failed, 0 skipped"
: > "$work/empty.json"
expect empty 1 "0 passed, 1 failed, 0 skipped"
expect absent 1 "0 passed, 1 failed, 0 skipped"
printf 'not json\n' > "$work/broken.json"
expect broken 1 "0 passed, 1 failed, 0 skipped"
# test.sh: the old log goes before meson runs, and the count is this run's.
if grep -q 'rm -f "$log"' "$root/scripts/test.sh" && grep -q 'count_results.mjs "$log"' "$root/scripts/test.sh" &&
   [ "$(grep -n 'rm -f "$log"' "$root/scripts/test.sh" | cut -d: -f1)" -lt "$(grep -n '^meson test' "$root/scripts/test.sh" | cut -d: -f1)" ]; then
  echo "ok   test.sh removes the previous log before meson runs and counts this run's"
else
  echo "FAIL test.sh does not remove the previous log before meson runs, or counts another"
  failed=$((failed + 1))
fi
[ "$failed" -eq 0 ]
