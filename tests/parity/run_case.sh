#!/usr/bin/env bash
# run_case.sh - one parity test: build a golden case's checkpoint with the mobius CLI, compare it in ONNX Runtime.
#
#   run_case.sh CASE_DIR [f32|f16]
#
# Environment (meson sets all three; see tests/parity/meson.build):
#   MOBIUS_CLI          the built mobius executable (required)
#   MOBIUS_SOURCE_ROOT  the project root, where node_modules/onnxruntime-node is (default: this script's ../..)
#   MOBIUS_SHARED       the shared folder with tools/parity.mjs and golden/ (default: $MOBIUS_SOURCE_ROOT/../shared)
# CASE_DIR may also be a bare case name, looked up in $MOBIUS_SHARED/golden.
# Exit status: 0 only if the build succeeded and every step of the case passed; the build's and the
# harness's output are both printed, so a failing test's log says why.
set -euo pipefail

usage="usage: run_case.sh CASE_DIR [f32|f16]"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "run_case: $usage" >&2; exit 2; }
case_dir=$1
dtype=${2:-f32}

: "${MOBIUS_CLI:?run_case: set MOBIUS_CLI to the built mobius executable}"
source_root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/../.." && pwd)"}
shared=${MOBIUS_SHARED:-"$source_root/../shared"}
parity="$shared/tools/parity.mjs"

if [ ! -d "$case_dir" ] && [ -d "$shared/golden/$case_dir" ]; then
  case_dir="$shared/golden/$case_dir"
fi
[ -x "$MOBIUS_CLI" ] || { echo "run_case: MOBIUS_CLI is not an executable: $MOBIUS_CLI" >&2; exit 2; }
[ -f "$parity" ] || { echo "run_case: no parity harness at $parity (set MOBIUS_SHARED)" >&2; exit 2; }
[ -f "$case_dir/case.json" ] || { echo "run_case: no case.json in $case_dir" >&2; exit 2; }
# Absolute paths: node runs from the source root below.
case_dir=$(cd "$case_dir" && pwd)
parity=$(cd "$(dirname "$parity")" && pwd)/$(basename "$parity")

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-parity.XXXXXX")
trap 'rm -rf "$work"' EXIT

case $dtype in
  f32)
    build_args=()
    compare_case=$case_dir
    ;;
  f16)
    build_args=(--dtype f16)
    # Looser tolerance for f16 weights: each weight rounds to 11 significant bits (relative error
    # up to 2^-11, about 5e-4), and those errors add up over the matmuls of every layer; the
    # norms and softmax still run in float32, so the error stays at this level instead of growing.
    # The case's own tolerance wins where it is already looser.
    f16_atol=2e-2
    f16_rtol=2e-2
    # parity.mjs reads only case.json (steps, atol, rtol) and reference.safetensors from the
    # case folder, so a folder with a rewritten case.json and a link to the reference is enough.
    compare_case="$work/case"
    mkdir "$compare_case"
    ln -s "$case_dir/reference.safetensors" "$compare_case/reference.safetensors"
    node -e '
      const fs = require("fs");
      const [src, dst, atol, rtol] = process.argv.slice(1);
      const c = JSON.parse(fs.readFileSync(src, "utf8"));
      c.atol = Math.max(Number(c.atol) || 0, Number(atol));
      c.rtol = Math.max(Number(c.rtol) || 0, Number(rtol));
      c.dtype = "float16 weights (run_case.sh)";
      fs.writeFileSync(dst, JSON.stringify(c, null, 2) + "\n");
    ' "$case_dir/case.json" "$compare_case/case.json" "$f16_atol" "$f16_rtol"
    ;;
  *)
    echo "run_case: unknown dtype '$dtype'; $usage" >&2
    exit 2
    ;;
esac

out="$work/model"
echo "== build: $MOBIUS_CLI build --model $case_dir $out ${build_args[*]}"
build_status=0
"$MOBIUS_CLI" build --model "$case_dir" "$out" "${build_args[@]}" 2>&1 || build_status=$?
if [ "$build_status" -ne 0 ]; then
  echo "run_case: FAIL: mobius build exited with status $build_status"
  exit 1  # not the CLI's own status: meson reads 77 as "skipped" and 99 as "error"
fi

# From the source root, where parity.mjs finds node_modules/onnxruntime-node.
cd "$source_root"
echo "== parity: node $parity --model $out --case $compare_case"
parity_status=0
NODE_PATH="$source_root/node_modules${NODE_PATH:+:$NODE_PATH}" \
  node "$parity" --model "$out" --case "$compare_case" 2>&1 || parity_status=$?
if [ "$parity_status" -ne 0 ]; then
  echo "run_case: FAIL: parity.mjs exited with status $parity_status"
fi
exit "$parity_status"
