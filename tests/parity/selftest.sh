#!/usr/bin/env bash
# selftest.sh - the parity harness itself: a model passes its own case and fails a case whose
# checkpoint differs (other weights, same shapes), a case whose logits were nudged by more than the
# tolerance at one position, and a missing model (usage error, exit 2).
set -euo pipefail
: "${MOBIUS_CLI:?set MOBIUS_CLI}"
root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "$0")/../.." && pwd)"}
[ -f "$root/node_modules/onnxruntime-node/package.json" ] || { echo "SKIP: no onnxruntime-node"; exit 77; }
cd "$root"
work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "selftest: FAIL: $*"; exit 1; }
expect() {  # expect STATUS LAST_LINE_PATTERN ARGS...
  local want=$1 pattern=$2; shift 2
  local status=0 out
  out=$(node tests/parity/parity.mjs "$@" 2>&1) || status=$?
  echo "$out" | tail -4
  [ "$status" -eq "$want" ] || fail "exit $status, expected $want: parity.mjs $*"
  echo "$out" | grep -q -- "$pattern" || fail "no '$pattern' in the output of parity.mjs $*"
}

"$MOBIUS_CLI" build -q --model tests/golden/llama-tiny "$work/model"
expect 0 'parity: 3 passed, 0 failed' --model "$work/model" --case tests/golden/llama-tiny
# qwen3-qknorm has the same shapes and other weights: every step is out of tolerance.
expect 1 'parity: 0 passed, 3 failed' --model "$work/model" --case tests/golden/qwen3-qknorm

# The reference with one logit of the decode step moved by 1e-2 (100x atol): only decode fails.
mkdir "$work/nudged"
cp tests/golden/llama-tiny/case.json "$work/nudged/"
node -e '
const fs = require("fs");
const [src, dst] = process.argv.slice(1);
const b = fs.readFileSync(src);
const n = Number(b.readBigUInt64LE(0));
const h = JSON.parse(b.subarray(8, 8 + n).toString());
const [begin] = h["decode.logits"].data_offsets;
// The decode step of llama-tiny: batch 0 is a real token there; nudge its first logit.
const off = 8 + n + begin;
b.writeFloatLE(b.readFloatLE(off) + 1e-2, off);
fs.writeFileSync(dst, b);
' tests/golden/llama-tiny/reference.safetensors "$work/nudged/reference.safetensors"
expect 1 'parity: 2 passed, 1 failed' --model "$work/model" --case "$work/nudged"
expect 2 'parity: error: no model' --model "$work/absent" --case tests/golden/llama-tiny
echo "selftest: ok"
