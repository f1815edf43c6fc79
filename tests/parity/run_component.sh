#!/usr/bin/env bash
# run_component.sh - one parity test of a diffusers pipeline graph: build one component of a
# golden pipeline (tests/golden-diffusers) with the mobius CLI (--component), compare it in ONNX
# Runtime with tests/parity/component_parity.mjs.
#
#   run_component.sh CASE GRAPH [f32|f16] [ort|standard]
#
# CASE is a folder, or a case name under tests/golden-diffusers; GRAPH is text_encoder, unet,
# vae_encoder or vae_decoder. Environment (meson sets both):
#   MOBIUS_CLI          the built mobius executable (required)
#   MOBIUS_SOURCE_ROOT  the project root, where node_modules/onnxruntime-node is
# Exit status: 0 only if the build succeeded and every output passed; 77 (skipped) when
# onnxruntime-node is not installed.
set -euo pipefail

usage="usage: run_component.sh CASE GRAPH [f32|f16] [ort|standard]"
[ $# -ge 2 ] && [ $# -le 4 ] || { echo "run_component: $usage" >&2; exit 2; }
case_dir=$1
graph=$2
dtype=${3:-f32}
ops=${4:-ort}
case $ops in ort|standard) ;; *) echo "run_component: unknown operator set '$ops'; $usage" >&2; exit 2 ;; esac
# shellcheck source=case_common.sh
. "$(dirname "$0")/case_common.sh"
resolve_case run_component golden-diffusers

component_tolerance run_component "$dtype" "$usage"

out="$work/pipeline"
echo "== build: $MOBIUS_CLI build --model $case_dir $out --component $graph --dtype $dtype --ops $ops"
status=0
"$MOBIUS_CLI" build --model "$case_dir" "$out" --component "$graph" --dtype "$dtype" --ops "$ops" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "run_component: FAIL: mobius build exited with status $status"
  exit 1
fi
cd "$source_root"
echo "== parity: node tests/parity/component_parity.mjs --model $out/$graph --case $case_dir --graph $graph ${tolerance[*]}"
status=0
node tests/parity/component_parity.mjs --model "$out/$graph" --case "$case_dir" --graph "$graph" "${tolerance[@]}" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "run_component: FAIL: component_parity.mjs exited with status $status"
  exit 1
fi
