#!/usr/bin/env bash
# run_tjs_pipelines.sh - builds four encoder folders with the mobius CLI (st-bert-mean-norm, and
# bert-seqcls, bert-tokcls, bert-mlm given st-bert-mean-norm's tokenizer files) in their default
# layout (transformers.js) and runs transformers.js's pipelines on them (tjs_pipelines.mjs).
# Environment: MOBIUS_CLI (required), MOBIUS_SOURCE_ROOT. Exit status as tjs_pipelines.mjs.
set -euo pipefail
source_root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/../.." && pwd)"}
: "${MOBIUS_CLI:?set MOBIUS_CLI to the built mobius executable}"
cases="$source_root/tests/golden-encoders"
work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-tjs-pipelines.XXXXXX")
trap 'rm -rf "$work"' EXIT
outs=()
for c in st-bert-mean-norm bert-seqcls bert-tokcls bert-mlm; do
  cp -r "$cases/$c" "$work/$c"
  chmod -R u+w "$work/$c"
  cp "$cases/st-bert-mean-norm/tokenizer.json" "$cases/st-bert-mean-norm/tokenizer_config.json" "$work/$c/" 2>/dev/null || true
  "$MOBIUS_CLI" build -q --model "$work/$c" "$work/out-$c" || { echo "run_tjs_pipelines: FAIL: mobius build of $c"; exit 1; }
  outs+=("$work/out-$c")
done
cd "$source_root"
node tests/runtime/tjs_pipelines.mjs "${outs[@]}"
