#!/usr/bin/env bash
# run_tjs_encoder.sh - an encoder golden case (tests/golden-encoders), a speech one
# (tests/golden-speech) or a vision one (tests/golden-vision: image classification, image feature
# extraction) built for transformers.js (the default layout of its task) and run by
# transformers.js itself (tjs_encoder.mjs: the task's Auto class on the folder, the case's
# inputs, its outputs compared).
#
#   run_tjs_encoder.sh CASE [f32|f16]      CASE: a case folder, or a case name of tests/golden-encoders
# Environment (meson sets both): MOBIUS_CLI (required), MOBIUS_SOURCE_ROOT.
# Exit status: 0 the outputs agree; 1 a step failed; 2 usage; 77 (skipped) when a package is missing.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: run_tjs_encoder.sh CASE [f32|f16]" >&2; exit 2; }
source_root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/../.." && pwd)"}
case_dir=$1
[ -d "$case_dir" ] || case_dir="$source_root/tests/golden-encoders/$case_dir"
dtype=${2:-f32}
: "${MOBIUS_CLI:?set MOBIUS_CLI to the built mobius executable}"
tolerance=()
[ "$dtype" = f16 ] && tolerance=(2e-2 1e-2)
work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-tjs-encoder.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "== build: $MOBIUS_CLI build --model $case_dir $work/model --dtype $dtype (the task's default layout)"
"$MOBIUS_CLI" build --model "$case_dir" "$work/model" --dtype "$dtype" 2>&1 || { echo "run_tjs_encoder: FAIL: mobius build"; exit 1; }
cd "$source_root"
node tests/runtime/tjs_encoder.mjs "$work/model" "$case_dir" "${tolerance[@]}"
