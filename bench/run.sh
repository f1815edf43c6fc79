#!/usr/bin/env bash
# run.sh - the streaming benchmark: `mobius build` against `cp` of the same checkpoint files, in
# the same run, on synthetic Llama-shaped checkpoints (every tensor's bytes distinct).
#
# usage: bench/run.sh [SIZE_MIB ...]        default: 1024 4096
#   BENCH_DIR  work folder (default build/bench-work; needs ~3.5x the largest size free)
#   REPS       repetitions per measurement, the best is kept (default 2)
#   MOBIUS     the mobius binary to measure (default build/mobius)
#   LAYOUT     folder: a plain checkpoint folder, whose files mobius hashes for the provenance
#              (default); hub: the same files as a Hugging Face cache snapshot, links to blobs
#              named by their sha256, which the provenance takes instead of hashing the weights
#   DIGESTS    cold: every build of a plain folder hashes its files (a fresh MOBIUS_CACHE_DIR per
#              build: a folder's first build; default); warm: the digests an untimed build left
#              in the cache are reused (later builds of the same, unchanged files)
# Prints a markdown table. cp does not fsync; mobius fsyncs its output before the rename, so the
# table shows cp alone and cp followed by an fsync of the copies (`sync -f`), the fair reference.
set -euo pipefail
cd "$(dirname "$0")/.."
mobius=${MOBIUS:-build/mobius}
[ -x "$mobius" ] && [ -x build/bench/make_checkpoint ] || { echo "run scripts/setup.sh first" >&2; exit 2; }
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1024 4096)
work=${BENCH_DIR:-build/bench-work}
reps=${REPS:-2}
layout=${LAYOUT:-folder}
digests=${DIGESTS:-cold}
mkdir -p "$work"

# hub_snapshot CKPT: the checkpoint as a cache snapshot beside it (blobs hard-linked when the
# filesystem allows); prints the snapshot folder.
hub_snapshot() {
  local repo="$1-hub/models--bench--ckpt" snap
  snap="$repo/snapshots/0000000000000000000000000000000000000000"
  if [ ! -d "$snap" ]; then
    mkdir -p "$repo/blobs" "$snap.tmp"
    for f in "$1"/*; do
      if [[ $f == *.safetensors ]]; then
        local sha; sha=$(sha256sum "$f" | cut -d' ' -f1)
        ln -f "$f" "$repo/blobs/$sha" 2>/dev/null || cp "$f" "$repo/blobs/$sha"
        ln -s "../../blobs/$sha" "$snap.tmp/$(basename "$f")"
      else
        cp "$f" "$snap.tmp/"
      fi
    done
    mv "$snap.tmp" "$snap"
  fi
  echo "$snap"
}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }

echo "| checkpoint | source | target | cp s | cp+fsync s | mobius s | mobius / cp | mobius / (cp+fsync) | peak RSS MiB | largest tensor MiB | RSS / largest |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for size in "${sizes[@]}"; do
  for src in f32 bf16; do
    ckpt="$work/ckpt-$size-$src"
    if [ ! -f "$ckpt/config.json" ]; then
      rm -rf "$ckpt" "$ckpt-hub"
      build/bench/make_checkpoint "$ckpt" "$size" "$src" >&2
    fi
    if [ "$layout" = hub ]; then ckpt=$(hub_snapshot "$ckpt"); fi
    files=("$ckpt"/*.safetensors)
    [ "$src" = bf16 ] && largest=$((32000 * 2048 * 2)) || largest=$((32000 * 2048 * 4))
    cat "${files[@]}" > /dev/null  # both sides read from the page cache
    cp_best=""; cps_best=""
    for _ in $(seq "$reps"); do
      rm -rf "$work/cp-out"; mkdir -p "$work/cp-out"; sync
      t0=$(now); cp "${files[@]}" "$work/cp-out/"; t1=$(now); sync -f "$work"/cp-out/*; t2=$(now)
      cp_best=$(best "$cp_best" "$(secs "$t0" "$t1")"); cps_best=$(best "$cps_best" "$(secs "$t0" "$t2")")
    done
    rm -rf "$work/cp-out"
    for target in same f16 int4; do
      case $target in same) dt=$src ;; *) dt=$target ;; esac
      m_best=""; rss=0
      rm -rf "$work/digests"
      if [ "$digests" = warm ]; then
        MOBIUS_CACHE_DIR="$work/digests" "$mobius" build -q --dtype "$dt" --model "$ckpt" "$work/out"
      fi
      for _ in $(seq "$reps"); do
        rm -rf "$work/out"; sync
        [ "$digests" = warm ] || rm -rf "$work/digests"
        MOBIUS_CACHE_DIR="$work/digests" /usr/bin/time -f "%e %M" -o "$work/time.txt" \
          "$mobius" build -q --dtype "$dt" --model "$ckpt" "$work/out"
        read -r el kb < "$work/time.txt"
        m_best=$(best "$m_best" "$el")
        rss=$(( kb > rss ? kb : rss ))
      done
      rm -rf "$work/out" "$work/digests"
      awk -v s="$size" -v src="$src" -v dt="$dt" -v cp="$cp_best" -v cps="$cps_best" -v m="$m_best" \
          -v rss="$rss" -v lg="$largest" 'BEGIN {
        printf "| %d MiB | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f |\n",
          s, src, dt, cp, cps, m, m / cp, m / cps, rss / 1024, lg / 1048576, (rss * 1024) / lg }'
    done
  done
done
