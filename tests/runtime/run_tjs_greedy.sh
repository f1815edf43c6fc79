#!/usr/bin/env bash
# run_tjs_greedy.sh - every text-generation golden case with greedy tokens, built with
# `mobius build --runtime transformers.js` (f32), generates transformers' tokens in
# transformers.js's own greedy generate (tests/runtime/tjs_greedy.mjs). A model type that
# transformers.js cannot run must be refused for it, saying so; it is listed, not run.
#
#   MOBIUS_CLI=build/mobius [MOBIUS_SOURCE_ROOT=.] bash tests/runtime/run_tjs_greedy.sh [CASE...]
#
# Exit 0 every case passed, 1 a case failed, 77 (skipped) without node or the packages.
set -u
root=${MOBIUS_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cli=${MOBIUS_CLI:-}
[[ -n "$cli" && -x "$cli" ]] || { echo "run_tjs_greedy: MOBIUS_CLI is not set; skipped"; exit 77; }
command -v node >/dev/null || { echo "run_tjs_greedy: node not found; skipped"; exit 77; }
[[ -d "$root/node_modules/@huggingface/transformers" ]] || { echo "run_tjs_greedy: @huggingface/transformers not installed; skipped"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-tjs-greedy-XXXXXX")
trap 'rm -rf "$work"' EXIT
export MOBIUS_PLUGIN_CACHE=${MOBIUS_PLUGIN_CACHE:-$work/plugin-scan.json}

# shellcheck source=greedy_cases.sh
. "$(dirname "${BASH_SOURCE[0]}")/greedy_cases.sh"
pairs=()
status=0
while IFS= read -r c; do
  dir=$root/tests/golden/$c
  if "$cli" build -q --runtime transformers.js -m "$dir" "$work/$c" </dev/null >"$work/$c.log" 2>&1; then
    pairs+=("$dir" "$work/$c")
  elif grep -q "transformers.js cannot run model type" "$work/$c.log"; then
    echo "n/a  $c: $(grep -o "transformers.js cannot run model type '[^']*'" "$work/$c.log")"
  else
    echo "FAIL $c: mobius build failed: $(tail -n 2 "$work/$c.log" | tr '\n' ' ')"
    status=1
  fi
done < <(greedy_cases "$root" "$@")
[ ${#pairs[@]} -gt 0 ] || { echo "run_tjs_greedy: no case to run"; exit "$status"; }
(cd "$root" && node tests/runtime/tjs_greedy.mjs "${pairs[@]}") || status=1
exit "$status"
