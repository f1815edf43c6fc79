#!/usr/bin/env bash
# run_padding.sh - right-padded batches, as ONNX Runtime GenAI pads them: a golden case's
# checkpoint built with ONNX Runtime's operators against its standard-operator build (attention
# at position_ids under the mask, as transformers' eager attention), both through the mobius CLI,
# compared by tests/parity/right_padding.mjs with plain caches and with one shared buffer each.
#
#   run_padding.sh CASE [WINDOW]
#
# WINDOW replaces the config's sliding_window (in a copy of the case). On a right-padded row the
# operator's window counts the row's real tokens, as GenAI's own graphs do, where transformers'
# counts its padding slots too: the two agree while the window covers the whole row, so cases
# with a window shorter than their rows run with a wider one. Environment as run_case.sh's
# (MOBIUS_CLI, MOBIUS_SOURCE_ROOT). Exit 0 when both runs pass; 77 (skipped) without
# onnxruntime-node.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "run_padding: usage: run_padding.sh CASE [WINDOW]" >&2; exit 2; }
window=${2:-}
case_dir=$1
# shellcheck source=case_common.sh
. "$(dirname "$0")/case_common.sh"
resolve_case run_padding golden
if [ -n "$window" ]; then
  cp -r "$case_dir" "$work/case"
  node -e 'const fs = require("fs"); const f = process.argv[1]; const c = JSON.parse(fs.readFileSync(f, "utf8"));
           c.sliding_window = Number(process.argv[2]); fs.writeFileSync(f, JSON.stringify(c, null, 1));' \
    "$work/case/config.json" "$window"
  case_dir="$work/case"
fi
# The fused build as GenAI's default graph: rotary at cache slots (--position-ids slots).
for ops in ort standard; do
  extra=()
  [ "$ops" = ort ] && extra=(--position-ids slots)
  echo "== build: $MOBIUS_CLI build --model $case_dir $work/$ops --runtime onnxruntime --ops $ops ${extra[*]}"
  "$MOBIUS_CLI" build --model "$case_dir" "$work/$ops" --runtime onnxruntime --ops "$ops" "${extra[@]}" 2>&1 ||
    { echo "run_padding: FAIL: mobius build --ops $ops failed"; exit 1; }
done
cd "$source_root"
status=0
for shared in "" "--shared-buffer 64"; do
  # shellcheck disable=SC2086  # $shared is empty or two words
  node tests/parity/right_padding.mjs --model "$work/ort" --reference "$work/standard" --case "$case_dir" $shared 2>&1 ||
    status=1
done
[ $status -eq 0 ] || echo "run_padding: FAIL"
exit $status
