#!/usr/bin/env bash
# run_seq2seq.sh - one parity test of an encoder-decoder golden case (tests/golden-seq2seq): build
# it with the mobius CLI for a runtime (encoder_model and decoder_model_merged), run it in ONNX
# Runtime as transformers.js's generation loop does and compare it with
# tests/parity/seq2seq_parity.mjs (the encoder's output at real tokens, each decoder step's logits).
#
#   run_seq2seq.sh CASE [f32|f16] [ort|standard] [transformers.js|onnxruntime]
#   CASE: a case folder, or a case name of tests/golden-seq2seq
#
# Environment (meson sets both): MOBIUS_CLI, the built mobius executable (required);
# MOBIUS_SOURCE_ROOT, the project root, where node_modules/onnxruntime-node is.
# Exit status: 0 only if the build succeeded, wrote both graphs where the runtime looks for them
# and every comparison passed; 77 (skipped) when onnxruntime-node is not installed.
set -euo pipefail

usage="usage: run_seq2seq.sh CASE [f32|f16] [ort|standard] [transformers.js|onnxruntime]"
[ $# -ge 1 ] && [ $# -le 4 ] || { echo "run_seq2seq: $usage" >&2; exit 2; }
case_dir=$1
dtype=${2:-f32}
ops=${3:-ort}
runtime=${4:-transformers.js}
case $ops in ort|standard) ;; *) echo "run_seq2seq: unknown operator set '$ops'; $usage" >&2; exit 2 ;; esac
case $runtime in transformers.js|onnxruntime) ;; *) echo "run_seq2seq: unknown runtime '$runtime'; $usage" >&2; exit 2 ;; esac
# shellcheck source=case_common.sh
. "$(dirname "$0")/case_common.sh"
resolve_case run_seq2seq golden-seq2seq

component_tolerance run_seq2seq "$dtype" "$usage"

out="$work/model"
echo "== build: $MOBIUS_CLI build --model $case_dir $out --dtype $dtype --ops $ops --runtime $runtime"
status=0
"$MOBIUS_CLI" build --model "$case_dir" "$out" --dtype "$dtype" --ops "$ops" --runtime "$runtime" 2>&1 || status=$?
[ "$status" -eq 0 ] || { echo "run_seq2seq: FAIL: mobius build exited with status $status"; exit 1; }
# Where each runtime looks: transformers.js onnx/<graph>.onnx (onnx/<graph>_fp16.onnx for f16),
# ONNX Runtime <graph>.onnx.
for graph in encoder_model decoder_model_merged; do
  if [ "$runtime" = transformers.js ]; then
    file=onnx/$graph.onnx; [ "$dtype" = f16 ] && file=onnx/${graph}_fp16.onnx
  else
    file=$graph.onnx
  fi
  [ -f "$out/$file" ] || { echo "run_seq2seq: FAIL: no $file in the $runtime layout"; exit 1; }
done
cd "$source_root"
echo "== parity: node tests/parity/seq2seq_parity.mjs --model $out --case $case_dir ${tolerance[*]}"
status=0
node tests/parity/seq2seq_parity.mjs --model "$out" --case "$case_dir" "${tolerance[@]}" 2>&1 || status=$?
[ "$status" -eq 0 ] || { echo "run_seq2seq: FAIL: seq2seq_parity.mjs exited with status $status"; exit 1; }
