#!/usr/bin/env bash
# moe_qmoe.sh - int4 decode of a mixture of experts: ONNX Runtime's fused QMoE (mobius's default
# for symmetric int4 SiLU experts on the CPU) against the loop over the experts hit
# (--expert-loop), the same checkpoint and quantization, timed paired (bench/moe_decode.py).
#
# usage: bench/moe_qmoe.sh [SIZE_MIB]        default 1024
#   BENCH_DIR  work folder (default build/bench-qmoe)
# The checkpoint is bench/make_checkpoint's Mixtral-shaped MoE (hidden 2048, 8 experts of width
# 1408, top-2, bf16) of about SIZE_MIB. Prints a markdown table: ms per decoded token of each,
# the loop over QMoE, and the largest logit difference between the two (they compute the same
# model: QMoE dequantizes the same int4 blocks in float32).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/mobius ] && [ -x build/bench/make_checkpoint ] || { echo "run scripts/setup.sh first" >&2; exit 2; }
py=build/venv/bin/python
[ -x "$py" ] || { echo "no build/venv (scripts/setup.sh makes it)" >&2; exit 2; }
size=${1:-1024}
work=${BENCH_DIR:-build/bench-qmoe}
mkdir -p "$work"
ckpt=$work/moe-$size
[ -f "$ckpt/config.json" ] || build/bench/make_checkpoint "$ckpt" "$size" bf16 --intermediate 1408 --experts 8 --top-k 2 >&2
for kind in qmoe loop; do
  rm -rf "$work/$kind"
  extra=()
  [ "$kind" = loop ] && extra=(--expert-loop)
  build/mobius build -q --runtime onnxruntime --dtype int4 "${extra[@]}" --model "$ckpt" "$work/$kind"
done
echo "| checkpoint MiB | prompt | decoded tokens | QMoE ms/token | loop ms/token | loop / QMoE | max logit diff |"
echo "|---|---|---|---|---|---|---|"
for prompt in 16 128; do
  "$py" bench/moe_decode.py "$work/qmoe" "$work/loop" --prompt "$prompt" --steps 32 |
    "$py" -c '
import json, sys
r = json.load(sys.stdin)
print("| %s | %s | 32 | %.2f | %.2f | %.2f | %.2g |" % (sys.argv[1], sys.argv[2], r["a_ms_per_token"], r["b_ms_per_token"], r["b_over_a"], r["max_abs_logit_diff"]))' "$(du -sm "$ckpt" | cut -f1)" "$prompt"
done
