#!/usr/bin/env bash
# moe_memory.sh - peak memory of converting a sparse mixture-of-experts checkpoint, and an FP8
# block-quantized one, against a dense one of the same size: the expert banks stream like any
# other weight, and FP8 weights are dequantized a chunk at a time, so peak RSS stays flat.
#
# usage: bench/moe_memory.sh [SIZE_MIB]        default 3072
#   BENCH_DIR  work folder (default build/bench-moe; needs ~3x SIZE_MIB free)
# Two synthetic bf16 checkpoints of about SIZE_MIB (bench/make_checkpoint): a llama (hidden 2048,
# intermediate 5632) and a Mixtral-shaped MoE (hidden 2048, 8 experts of width 1408, top-2), each
# and the llama's shapes with its projections stored FP8 (128x128 blocks, F32 scales; about half
# the bytes), each built by `mobius build` in bf16, f16 and int4. Prints a markdown table: time,
# peak RSS, the largest checkpoint tensor (as stored) and each RSS over the dense model's.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/mobius ] && [ -x build/bench/make_checkpoint ] || { echo "run scripts/setup.sh first" >&2; exit 2; }
size=${1:-3072}
work=${BENCH_DIR:-build/bench-moe}
mkdir -p "$work"
dense=$work/dense-$size
moe=$work/moe-$size
[ -f "$dense/config.json" ] || build/bench/make_checkpoint "$dense" "$size" bf16 >&2
[ -f "$moe/config.json" ] || build/bench/make_checkpoint "$moe" "$size" bf16 --intermediate 1408 --experts 8 --top-k 2 >&2
[ -f "$work/fp8-$size/config.json" ] || build/bench/make_checkpoint "$work/fp8-$size" "$size" bf16 --fp8 128 >&2

echo "| checkpoint | target | checkpoint MiB | mobius s | peak RSS MiB | largest tensor MiB | RSS / dense RSS |"
echo "|---|---|---|---|---|---|---|"
declare -A dense_rss
for target in bf16 f16 int4; do
  for kind in dense moe fp8; do
    ckpt=$work/$kind-$size
    cat "$ckpt"/*.safetensors > /dev/null
    rm -rf "$work/out"; sync
    /usr/bin/time -f "%e %M" -o "$work/time.txt" build/mobius build -q --dtype "$target" --model "$ckpt" "$work/out"
    read -r el kb < "$work/time.txt"
    rm -rf "$work/out"
    mib=$(du -sm "$ckpt" | cut -f1)
    largest=$(node -e '
      const fs = require("fs"), path = require("path"); let m = 0;
      for (const f of fs.readdirSync(process.argv[1]).filter(f => f.endsWith(".safetensors"))) {
        const fd = fs.openSync(path.join(process.argv[1], f), "r"), b = Buffer.alloc(8);
        fs.readSync(fd, b, 0, 8, 0); const n = Number(b.readBigUInt64LE(0)), h = Buffer.alloc(n);
        fs.readSync(fd, h, 0, n, 8); fs.closeSync(fd);
        for (const [k, v] of Object.entries(JSON.parse(h))) if (k !== "__metadata__") m = Math.max(m, v.data_offsets[1] - v.data_offsets[0]);
      }
      console.log((m / 1048576).toFixed(0));' "$ckpt")
    [ "$kind" = dense ] && dense_rss[$target]=$kb
    awk -v k="$kind" -v t="$target" -v mib="$mib" -v el="$el" -v kb="$kb" -v lg="$largest" -v d="${dense_rss[$target]}" 'BEGIN {
      printf "| %s | %s | %d | %.2f | %.0f | %d | %.2f |\n", k, t, mib, el, kb / 1024, lg, kb / d }'
  done
done
