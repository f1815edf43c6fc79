#!/usr/bin/env bash
# run_tjs_seq2seq.sh - an encoder-decoder golden case (tests/golden-seq2seq) built with
# `mobius build --runtime transformers.js` and run by transformers.js itself
# (tjs_seq2seq.mjs: the case's logits through AutoModelForSeq2SeqLM / AutoModelForSpeechSeq2Seq,
# step by step on one cache as its generate feeds them, and its greedy generate against a plain
# ONNX Runtime loop over the same two graphs).
#
#   run_tjs_seq2seq.sh CASE [f32|f16]      CASE: a case folder, or a case name of tests/golden-seq2seq
# Environment (meson sets both): MOBIUS_CLI (required), MOBIUS_SOURCE_ROOT.
# Exit status: 0 every check passed; 1 a step failed; 2 usage; 77 (skipped) when node or a package
# is missing, or when transformers.js has no class for the model type (it must refuse it itself,
# or mobius must refuse the build for transformers.js, saying so).
set -euo pipefail
usage="usage: run_tjs_seq2seq.sh CASE [f32|f16]"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "run_tjs_seq2seq: $usage" >&2; exit 2; }
source_root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/../.." && pwd)"}
case_dir=$1
[ -d "$case_dir" ] || case_dir="$source_root/tests/golden-seq2seq/$case_dir"
[ -f "$case_dir/case.json" ] || { echo "run_tjs_seq2seq: no case.json in $case_dir" >&2; exit 2; }
dtype=${2:-f32}
case $dtype in
  f32) tolerance=() ;;
  f16) tolerance=(2e-2 1e-2) ;;
  *) echo "run_tjs_seq2seq: unknown dtype '$dtype'; $usage" >&2; exit 2 ;;
esac
: "${MOBIUS_CLI:?set MOBIUS_CLI to the built mobius executable}"
command -v node >/dev/null || { echo "SKIP node not found"; exit 77; }
for pkg in onnxruntime-node @huggingface/transformers; do
  [ -f "$source_root/node_modules/$pkg/package.json" ] ||
    { echo "SKIP $pkg is not installed in $source_root/node_modules"; exit 77; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-tjs-seq2seq.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "== build: $MOBIUS_CLI build --model $case_dir $work/model --runtime transformers.js --dtype $dtype"
if ! "$MOBIUS_CLI" build --model "$case_dir" "$work/model" --runtime transformers.js --dtype "$dtype" \
    </dev/null >"$work/build.log" 2>&1; then
  cat "$work/build.log"
  if refusal=$(grep -o "transformers.js cannot run model type '[^']*'[^;]*" "$work/build.log"); then
    echo "SKIP mobius refuses the build: $refusal"
    exit 77
  fi
  echo "run_tjs_seq2seq: FAIL: mobius build"
  exit 1
fi
cat "$work/build.log"
cd "$source_root"
node tests/runtime/tjs_seq2seq.mjs "$work/model" "$case_dir" "${tolerance[@]}"
