#!/usr/bin/env bash
# run_case.sh - one parity test: build a golden case's checkpoint with the mobius CLI, compare it in
# ONNX Runtime with tests/parity/parity.mjs.
#
#   run_case.sh CASE [f32|f16|int4|int4-asym|int8] [ort|ort-slots|standard] [shared]
#
# The third argument is the operator set (--ops): ONNX Runtime's fused operators (the default) or
# standard ONNX only; both must match transformers at the same tolerance. The builds are laid out
# for ONNX Runtime, whose graphs take position_ids; ort-slots is the fused build with rotary at
# cache slots and no position_ids input (--position-ids slots, GenAI's default). With `shared`, the
# harness runs the model as ONNX Runtime GenAI does with past_present_share_buffer: one cache
# buffer of 64 positions per input, bound as its present output too (parity.mjs --shared-buffer).
#
# CASE is a folder, or a case name under tests/golden. Environment (meson sets both):
#   MOBIUS_CLI          the built mobius executable (required)
#   MOBIUS_SOURCE_ROOT  the project root, where node_modules/onnxruntime-node is (default: this script's ../..)
# Exit status: 0 only if the build succeeded and every step of the case passed; 77 (skipped) when
# onnxruntime-node is not installed; the build's and the harness's output are both printed, so a
# failing test's log says why.
set -euo pipefail

usage="usage: run_case.sh CASE [f32|f16|int4|int4-asym|int8] [ort|ort-slots|standard] [shared]"
[ $# -ge 1 ] && [ $# -le 4 ] || { echo "run_case: $usage" >&2; exit 2; }
case_dir=$1
dtype=${2:-f32}
ops=${3:-ort}
cache=${4:-}
positions=()
[ "$ops" = ort-slots ] && { ops=ort; positions=(--position-ids slots); }
case $ops in ort|standard) ;; *) echo "run_case: unknown operator set '$ops'; $usage" >&2; exit 2 ;; esac
case $cache in '') ;; shared) ;; *) echo "run_case: unknown cache mode '$cache'; $usage" >&2; exit 2 ;; esac

# shellcheck source=case_common.sh
. "$(dirname "$0")/case_common.sh"
resolve_case run_case golden
parity="$source_root/tests/parity/parity.mjs"

case $dtype in
  f32) build_args=(--runtime onnxruntime --ops "$ops" "${positions[@]}"); tolerance=() ;;
  # Looser tolerance for f16 weights: each weight rounds to 11 significant bits (relative error up
  # to 2^-11, about 5e-4), and those errors add up over the matmuls of every layer; the norms and
  # softmax still run in float32, so the error stays at this level instead of growing. The case's
  # own tolerance wins where it is already looser.
  f16) build_args=(--runtime onnxruntime --ops "$ops" "${positions[@]}" --dtype f16); tolerance=(--atol 2e-2 --rtol 2e-2) ;;
  # Block-quantized weights (RTN, block 32; symmetric by default, --asymmetric with zero points)
  # are judged by the next-token choice over all steps, not elementwise: top-1 agreement with
  # transformers' float32 logits at no less than QUANT_TOP1 of the 16 compared positions.
  # Measured on these cases: int8 94-100%; int4 symmetric 37-88%, asymmetric 44-100% (the tiny
  # random models have 64-wide rows, two blocks, and near-tied logits: int4 noise flips many
  # choices that a trained model's margins keep; weights from another checkpoint agree at about
  # 1/vocab). test_quant checks exactness on a grid instead.
  int4) build_args=(--runtime onnxruntime --ops "$ops" "${positions[@]}" --dtype int4); tolerance=(--top1 "${QUANT_TOP1:-0.3}") ;;
  int4-asym) build_args=(--runtime onnxruntime --ops "$ops" "${positions[@]}" --dtype int4 --asymmetric); tolerance=(--top1 "${QUANT_TOP1:-0.4}") ;;
  int8) build_args=(--runtime onnxruntime --ops "$ops" "${positions[@]}" --dtype int8); tolerance=(--top1 "${QUANT_TOP1:-0.9}") ;;
  *) echo "run_case: unknown dtype '$dtype'; $usage" >&2; exit 2 ;;
esac
[ "$cache" = shared ] && tolerance+=(--shared-buffer 64)

out="$work/model"
echo "== build: $MOBIUS_CLI build --model $case_dir $out ${build_args[*]}"
build_status=0
"$MOBIUS_CLI" build --model "$case_dir" "$out" "${build_args[@]}" 2>&1 || build_status=$?
if [ "$build_status" -ne 0 ]; then
  echo "run_case: FAIL: mobius build exited with status $build_status"
  exit 1  # not the CLI's own status: meson reads 77 as "skipped" and 99 as "error"
fi

cd "$source_root"  # parity.mjs finds node_modules/onnxruntime-node from here
echo "== parity: node $parity --model $out --case $case_dir ${tolerance[*]}"
parity_status=0
node "$parity" --model "$out" --case "$case_dir" "${tolerance[@]}" 2>&1 || parity_status=$?
if [ "$parity_status" -ne 0 ]; then
  echo "run_case: FAIL: parity.mjs exited with status $parity_status"
  exit 1
fi
