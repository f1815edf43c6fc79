#!/usr/bin/env bash
# genai_state_alias.sh - one GenAI state-aliasing test: build a hybrid (Qwen3.5) golden case with
# the mobius CLI (--runtime onnxruntime), then run it with ONNX Runtime GenAI's recurrent-state
# binding (each past_key_values.N.conv_state / recurrent_state buffer is also the present.N.*
# output buffer) in tests/runtime/genai_state_alias.mjs, which compares every step's logits with
# a plain run and with the case's reference.
#
#   genai_state_alias.sh CASE
#
# CASE is a folder, or a case name under tests/golden. Environment (meson sets both):
#   MOBIUS_CLI          the built mobius executable (required)
#   MOBIUS_SOURCE_ROOT  the project root, where node_modules/onnxruntime-node is (default: this script's ../..)
# The harness is then run once more with --break stale (the state put back after every step),
# which must fail: a harness that cannot fail proves nothing.
# Exit status: 0 the aliased run agrees and the sabotaged run is caught; 1 otherwise (build,
# load, run, mismatch); 2 usage; 77 (skipped) when onnxruntime-node is not installed.
set -euo pipefail

usage="usage: genai_state_alias.sh CASE"
[ $# -eq 1 ] || { echo "genai_state_alias: $usage" >&2; exit 2; }
case_dir=$1

: "${MOBIUS_CLI:?genai_state_alias: set MOBIUS_CLI to the built mobius executable}"
source_root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/../.." && pwd)"}
harness="$source_root/tests/runtime/genai_state_alias.mjs"

if [ ! -d "$case_dir" ] && [ -d "$source_root/tests/golden/$case_dir" ]; then
  case_dir="$source_root/tests/golden/$case_dir"
fi
[ -x "$MOBIUS_CLI" ] || { echo "genai_state_alias: MOBIUS_CLI is not an executable: $MOBIUS_CLI" >&2; exit 2; }
[ -f "$case_dir/case.json" ] || { echo "genai_state_alias: no case.json in $case_dir" >&2; exit 2; }
if [ ! -f "$source_root/node_modules/onnxruntime-node/package.json" ]; then
  echo "genai_state_alias: SKIP: onnxruntime-node is not installed in $source_root/node_modules (scripts/setup.sh installs it)"
  exit 77
fi
case_dir=$(cd "$case_dir" && pwd)  # absolute: node runs from the source root below

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-genai-alias.XXXXXX")
trap 'rm -rf "$work"' EXIT

out="$work/model"
echo "== build: $MOBIUS_CLI build --model $case_dir $out --runtime onnxruntime"
build_status=0
"$MOBIUS_CLI" build --model "$case_dir" "$out" --runtime onnxruntime 2>&1 || build_status=$?
if [ "$build_status" -ne 0 ]; then
  echo "genai_state_alias: FAIL: mobius build exited with status $build_status"
  exit 1  # not the CLI's own status: meson reads 77 as "skipped" and 99 as "error"
fi

cd "$source_root"  # the harness finds node_modules/onnxruntime-node from here
echo "== aliased: node $harness $out $case_dir"
status=0
node "$harness" "$out" "$case_dir" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "genai_state_alias: FAIL: genai_state_alias.mjs exited with status $status"
  exit 1
fi

echo "== sabotaged (must fail): node $harness $out $case_dir --break stale"
status=0
node "$harness" "$out" "$case_dir" --break stale > "$work/break.log" 2>&1 || status=$?
tail -n 1 "$work/break.log"
if [ "$status" -ne 1 ]; then
  cat "$work/break.log"
  echo "genai_state_alias: FAIL: a stale state was not caught (status $status, expected 1)"
  exit 1
fi
echo "genai_state_alias: PASS"
