#!/usr/bin/env bash
# unet_memory.sh - peak memory of converting a diffusers UNet2DConditionModel: synthetic
# checkpoints with Stable Diffusion 1.5's layout (bench/make_unet), each built by `mobius build`
# against `cp` + fsync of the same files, in the same run. The UNet's convolution, attention and
# feed-forward weights stream like a language model's, so peak RSS follows the largest tensor
# (SD 1.5: up_blocks.{0,1}.resnets.*.conv1.weight, 1280x2560x3x3, 112.5 MiB in f32), never the
# checkpoint.
#
# usage: bench/unet_memory.sh [f32|bf16] [WIDTH_MULT ...]    default: f32 1
#   f32|bf16   the checkpoint's dtype; targets are --dtype f32 and f16, and bf16 for a bf16 one
#   WIDTH_MULT every block's channels times it (make_unet --width-mult): 1 is SD 1.5's shapes,
#              859,520,964 parameters, 3,278 MiB in f32 (two shards); the bytes grow as its square
#   LAYERS     layers_per_block (default 2, SD 1.5's): more makes a larger checkpoint whose
#              largest tensor stays the same
#   BENCH_DIR  work folder (default build/bench-unet; needs ~3x the largest checkpoint free)
#   REPS       repetitions per measurement, the best time and the highest RSS kept (default 2)
#   BUILD      build folder holding mobius and bench/make_unet (default build)
#   MOBIUS     the mobius binary to measure (default $BUILD/mobius)
# Prints a markdown table. Every timed run holds /tmp/bench.lock (flock), so benchmarks started
# together do not overlap; the checkpoint files are read once first, so both sides read from the
# page cache. cp does not fsync and mobius fsyncs its output, so the reference is cp followed by
# an fsync of the copies (`sync -f`), as in bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
mobius=${MOBIUS:-$build/mobius}
make_unet=$build/bench/make_unet
[ -x "$mobius" ] && [ -x "$make_unet" ] || { echo "run scripts/setup.sh first (or set BUILD)" >&2; exit 2; }
src=${1:-f32}
[ "$src" = f32 ] || [ "$src" = bf16 ] || { echo "usage: bench/unet_memory.sh [f32|bf16] [WIDTH_MULT ...]" >&2; exit 2; }
shift $(( $# > 0 ? 1 : 0 ))
mults=("$@")
[ ${#mults[@]} -gt 0 ] || mults=(1)
work=${BENCH_DIR:-build/bench-unet}
reps=${REPS:-2}
layers=${LAYERS:-2}
lock=/tmp/bench.lock
mkdir -p "$work"
targets=(f32 f16)
[ "$src" = bf16 ] && targets+=(bf16)

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }

# largest CKPT: the largest tensor of the checkpoint's safetensors files as stored, in bytes.
largest() {
  node -e '
    const fs = require("fs"), path = require("path"); let m = 0;
    for (const f of fs.readdirSync(process.argv[1]).filter(f => f.endsWith(".safetensors"))) {
      const fd = fs.openSync(path.join(process.argv[1], f), "r"), b = Buffer.alloc(8);
      fs.readSync(fd, b, 0, 8, 0); const n = Number(b.readBigUInt64LE(0)), h = Buffer.alloc(n);
      fs.readSync(fd, h, 0, n, 8); fs.closeSync(fd);
      for (const [k, v] of Object.entries(JSON.parse(h))) if (k !== "__metadata__") m = Math.max(m, v.data_offsets[1] - v.data_offsets[0]);
    }
    console.log(m);' "$1"
}

echo "| checkpoint | source | target | checkpoint MiB | mobius s | cp+fsync s | mobius / (cp+fsync) | peak RSS MiB | largest tensor MiB | RSS / largest |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for mult in "${mults[@]}"; do
  ckpt="$work/unet-x$mult-l$layers-$src"
  if [ ! -f "$ckpt/config.json" ]; then
    rm -rf "$ckpt"
    "$make_unet" "$ckpt.tmp" "$src" --width-mult "$mult" --layers-per-block "$layers" >&2
    mv "$ckpt.tmp" "$ckpt"
  fi
  files=("$ckpt"/*.safetensors)
  bytes=$(stat -c %s "${files[@]}" | awk '{ s += $1 } END { print s }')
  lg=$(largest "$ckpt")
  channels=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).block_out_channels.join(","))' "$ckpt/config.json")
  cat "${files[@]}" "$ckpt"/*.json > /dev/null  # both sides read from the page cache
  cps_best=""
  for _ in $(seq "$reps"); do
    {
      flock 9
      rm -rf "$work/cp-out"; mkdir -p "$work/cp-out"; sync
      t0=$(now); cp "$ckpt"/* "$work/cp-out/"; sync -f "$work"/cp-out/*; t1=$(now)
    } 9> "$lock"
    cps_best=$(best "$cps_best" "$(secs "$t0" "$t1")")
  done
  rm -rf "$work/cp-out"
  for dt in "${targets[@]}"; do
    m_best=""; rss=0
    for _ in $(seq "$reps"); do
      {
        flock 9
        rm -rf "$work/out"; sync
        /usr/bin/time -f "%e %M" -o "$work/time.txt" "$mobius" build -q --dtype "$dt" --model "$ckpt" "$work/out"
      } 9> "$lock"
      read -r el kb < "$work/time.txt"
      m_best=$(best "$m_best" "$el")
      rss=$(( kb > rss ? kb : rss ))
    done
    rm -rf "$work/out"
    awk -v c="x$mult ($channels), $layers layers" -v src="$src" -v dt="$dt" -v b="$bytes" -v m="$m_best" -v cps="$cps_best" \
        -v rss="$rss" -v lg="$lg" 'BEGIN {
      printf "| %s | %s | %s | %.0f | %.2f | %.2f | %.2f | %.0f | %.1f | %.2f |\n",
        c, src, dt, b / 1048576, m, cps, m / cps, rss / 1024, lg / 1048576, (rss * 1024) / lg }'
  done
done
