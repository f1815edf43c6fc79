#!/usr/bin/env bash
# run_encoder.sh - one parity test of a single-graph golden case of format v2 (an encoder's,
# tests/golden-encoders, or a speech encoder's, tests/golden-speech): build it with the mobius CLI
# for a runtime, compare it in ONNX Runtime with tests/parity/component_parity.mjs --graph encode
# (per-token outputs at real tokens only).
#
#   run_encoder.sh CASE [f32|f16] [ort|standard] [transformers.js|onnxruntime]
#   CASE: a case folder, or a case name of tests/golden-encoders
#
# Environment (meson sets both): MOBIUS_CLI, the built mobius executable (required);
# MOBIUS_SOURCE_ROOT, the project root, where node_modules/onnxruntime-node is.
# Exit status: 0 only if the build succeeded and every output passed; 77 (skipped) when
# onnxruntime-node is not installed.
set -euo pipefail

usage="usage: run_encoder.sh CASE [f32|f16] [ort|standard] [transformers.js|onnxruntime]"
[ $# -ge 1 ] && [ $# -le 4 ] || { echo "run_encoder: $usage" >&2; exit 2; }
case_dir=$1
dtype=${2:-f32}
ops=${3:-ort}
runtime=${4:-transformers.js}
case $ops in ort|standard) ;; *) echo "run_encoder: unknown operator set '$ops'; $usage" >&2; exit 2 ;; esac
case $runtime in transformers.js|onnxruntime) ;; *) echo "run_encoder: unknown runtime '$runtime'; $usage" >&2; exit 2 ;; esac
# shellcheck source=case_common.sh
. "$(dirname "$0")/case_common.sh"
resolve_case run_encoder golden-encoders

component_tolerance run_encoder "$dtype" "$usage"

out="$work/model"
echo "== build: $MOBIUS_CLI build --model $case_dir $out --dtype $dtype --ops $ops --runtime $runtime"
status=0
"$MOBIUS_CLI" build --model "$case_dir" "$out" --dtype "$dtype" --ops "$ops" --runtime "$runtime" 2>&1 || status=$?
[ "$status" -eq 0 ] || { echo "run_encoder: FAIL: mobius build exited with status $status"; exit 1; }
if [ "$runtime" = transformers.js ]; then
  name=model; [ "$dtype" = f16 ] && name=model_fp16
  [ -f "$out/onnx/$name.onnx" ] || { echo "run_encoder: FAIL: no onnx/$name.onnx in the transformers.js layout"; exit 1; }
fi
cd "$source_root"
echo "== parity: node tests/parity/component_parity.mjs --model $out --case $case_dir --graph encode ${tolerance[*]}"
status=0
node tests/parity/component_parity.mjs --model "$out" --case "$case_dir" --graph encode "${tolerance[@]}" 2>&1 || status=$?
[ "$status" -eq 0 ] || { echo "run_encoder: FAIL: component_parity.mjs exited with status $status"; exit 1; }
