#!/usr/bin/env bash
# run_genai_greedy.sh - every text-generation golden case with greedy tokens, built with
# `mobius build` (the default layout, ort-genai), generates transformers' tokens in ONNX Runtime
# GenAI's own generator (tests/runtime/genai_greedy.py). A model type GenAI has no runner for must
# be laid out for ONNX Runtime instead, with a warning saying why; it is listed, not run.
#
#   MOBIUS_CLI=build/mobius [MOBIUS_SOURCE_ROOT=.] [MOBIUS_GENAI_PYTHON=...] bash tests/runtime/run_genai_greedy.sh [--dtype DT --agreement FLOOR [--overall FLOOR]] [CASE...]
#
# --dtype builds with that weight dtype; --agreement FLOOR judges each folder by its top-1
# agreement along the reference's tokens (genai_greedy.py) instead of its exact tokens, and
# --overall FLOOR all cases' positions together. --except CASE (repeatable) leaves a case out,
# saying so (a quantized build whose agreement measures the model's noise, not the build).
# MOBIUS_GENAI_PYTHON: a python with onnxruntime_genai (default build/venv/bin/python, which
# scripts/setup.sh makes). Exit 0 every case passed, 1 a case failed, 77 (skipped) without it.
set -u
root=${MOBIUS_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cli=${MOBIUS_CLI:-}
py=${MOBIUS_GENAI_PYTHON:-$root/build/venv/bin/python}
[[ -n "$cli" && -x "$cli" ]] || { echo "run_genai_greedy: MOBIUS_CLI is not set; skipped"; exit 77; }
"$py" -c 'import onnxruntime_genai' 2>/dev/null || { echo "run_genai_greedy: no onnxruntime_genai in $py; skipped"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-genai-greedy-XXXXXX")
trap 'rm -rf "$work"' EXIT
build_args=()
check_args=()
excepted=()
while [[ "${1:-}" == --* ]]; do
  case $1 in
    --dtype) build_args+=(--dtype "$2"); shift 2 ;;
    --agreement|--overall) check_args+=("$1" "$2"); shift 2 ;;
    --except) excepted+=("$2"); shift 2 ;;
    *) echo "run_genai_greedy: unknown option $1" >&2; exit 2 ;;
  esac
done
export MOBIUS_PLUGIN_CACHE=${MOBIUS_PLUGIN_CACHE:-$work/plugin-scan.json}

# shellcheck source=greedy_cases.sh
. "$(dirname "${BASH_SOURCE[0]}")/greedy_cases.sh"
pairs=()
status=0
while IFS= read -r c; do
  dir=$root/tests/golden/$c
  if [[ " ${excepted[*]} " == *" $c "* ]]; then
    echo "--   $c: left out (--except)"
    continue
  fi
  if ! "$cli" build "${build_args[@]}" -m "$dir" "$work/$c" </dev/null >"$work/$c.log" 2>&1; then
    echo "FAIL $c: mobius build failed: $(tail -n 2 "$work/$c.log" | tr '\n' ' ')"
    status=1
  elif [ -f "$work/$c/genai_config.json" ]; then
    pairs+=("$dir" "$work/$c")
  elif grep -q "laid out for ONNX Runtime alone" "$work/$c.log"; then
    echo "n/a  $c: $(grep -o "model type '[^']*'[^;]*" "$work/$c.log" | head -1)"
  else
    echo "FAIL $c: no genai_config.json and no warning saying why"
    status=1
  fi
done < <(greedy_cases "$root" "$@")
[ ${#pairs[@]} -gt 0 ] || { echo "run_genai_greedy: no case to run"; exit "$status"; }
"$py" "$root/tests/runtime/genai_greedy.py" "${check_args[@]}" "${pairs[@]}" || status=1
exit "$status"
