#!/usr/bin/env bash
# selftest.sh - the parity harness itself: a model passes its own case, comparing every logit of
# every unpadded position (the counts it reports are checked), and fails a case whose checkpoint
# differs (other weights, same shapes), each of several cases with one logit nudged beyond the
# tolerance (first and last logit, the padded row, a middle prefill position, each decode step),
# and a missing model (usage error, exit 2); a nudge at a padded position changes nothing. The
# encoder-decoder harness (seq2seq_parity.mjs) likewise: a pass, other weights, one nudged logit.
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

# Each positive test prints how much it compared: every unpadded position, every logit of it
# (llama-tiny: batch 0 left-padded by 2 of 7 tokens, a vocabulary of 160).
out=$(node tests/parity/parity.mjs --model "$work/model" --case tests/golden/llama-tiny)
for want in 'prefill: PASS.*12 positions (1920 logits) compared' 'decode: PASS.*2 positions (320 logits) compared' \
            'decode2: PASS.*2 positions (320 logits) compared'; do
  echo "$out" | grep -q -- "$want" || fail "no '$want' in: $out"
done

# nudge NAME STEP BATCH TOKEN LOGIT: a copy of the case whose reference has that one logit moved
# by 1e-2 (100x atol).
nudge() {
  mkdir "$work/$1"
  cp tests/golden/llama-tiny/case.json "$work/$1/"
  node -e '
  const fs = require("fs");
  const [src, dst, step, batch, token, logit] = process.argv.slice(1);
  const b = fs.readFileSync(src);
  const n = Number(b.readBigUInt64LE(0));
  const h = JSON.parse(b.subarray(8, 8 + n).toString());
  const t = h[step + ".logits"];
  const [, seq, vocab] = t.shape;
  const off = 8 + n + t.data_offsets[0] + 4 * ((Number(batch) * seq + Number(token)) * vocab + Number(logit));
  b.writeFloatLE(b.readFloatLE(off) + 1e-2, off);
  fs.writeFileSync(dst, b);
  ' tests/golden/llama-tiny/reference.safetensors "$work/$1/reference.safetensors" "$2" "$3" "$4" "$5"
}
# One logit anywhere the model is compared fails that step alone: the first and the last logit
# of a decode step, the last real token of the left-padded row and a middle position of the
# other row in the prefill, the second decode step.
nudge first decode 0 0 0;        expect 1 'parity: 2 passed, 1 failed' --model "$work/model" --case "$work/first"
nudge last decode 1 0 159;       expect 1 'parity: 2 passed, 1 failed' --model "$work/model" --case "$work/last"
nudge padded-row prefill 0 6 80; expect 1 'parity: 2 passed, 1 failed' --model "$work/model" --case "$work/padded-row"
nudge middle prefill 1 3 17;     expect 1 'parity: 2 passed, 1 failed' --model "$work/model" --case "$work/middle"
nudge decode2 decode2 1 0 42;    expect 1 'parity: 2 passed, 1 failed' --model "$work/model" --case "$work/decode2"
# A padded position is not the model's to get right: moving it changes nothing.
nudge padding prefill 0 1 5;     expect 0 'parity: 3 passed, 0 failed' --model "$work/model" --case "$work/padding"
expect 2 'parity: error: no model' --model "$work/absent" --case tests/golden/llama-tiny

# The encoder-decoder harness (seq2seq_parity.mjs): t5-tiny passes its own case (the encoder's
# output, three decoder steps and their caches), fails mt5-tiny's (same shapes, other weights)
# and a copy of its case with one logit of the last step nudged by 1e-2.
"$MOBIUS_CLI" build -q --model tests/golden-seq2seq/t5-tiny "$work/t5" --runtime transformers.js
expect_seq2seq() {  # expect_seq2seq STATUS LAST_LINE_PATTERN CASE
  local status=0 out
  out=$(node tests/parity/seq2seq_parity.mjs --model "$work/t5" --case "$3" 2>&1) || status=$?
  echo "$out" | tail -2
  [ "$status" -eq "$1" ] || fail "exit $status, expected $1: seq2seq_parity.mjs --case $3"
  echo "$out" | grep -q -- "$2" || fail "no '$2' in the output of seq2seq_parity.mjs --case $3"
}
expect_seq2seq 0 'seq2seq parity: 7 passed, 0 failed' tests/golden-seq2seq/t5-tiny
expect_seq2seq 1 'seq2seq parity: 3 passed, 4 failed' tests/golden-seq2seq/mt5-tiny
mkdir "$work/t5-nudged"
cp tests/golden-seq2seq/t5-tiny/case.json "$work/t5-nudged/"
node -e '
const fs = require("fs");
const [src, dst] = process.argv.slice(1);
const b = fs.readFileSync(src);
const n = Number(b.readBigUInt64LE(0));
const t = JSON.parse(b.subarray(8, 8 + n).toString())["decode2.logits"];
const off = 8 + n + t.data_offsets[0] + 4 * (t.shape[2] + 7);  // batch 1, logit 7
b.writeFloatLE(b.readFloatLE(off) + 1e-2, off);
fs.writeFileSync(dst, b);
' tests/golden-seq2seq/t5-tiny/reference.safetensors "$work/t5-nudged/reference.safetensors"
expect_seq2seq 1 'seq2seq parity: 6 passed, 1 failed' "$work/t5-nudged"
echo "selftest: ok"
