#!/usr/bin/env bash
# published_memory.sh - peak memory of int4 builds of published configs, each on a synthetic
# checkpoint of about SIZE_MIB that transformers itself makes from the config
# (bench/make_published.py: fewer layers, random bfloat16 weights, saved as a hub checkpoint).
#
# usage: BENCH_PYTHON=/path/to/python bench/published_memory.sh [SIZE_MIB [MODEL_TYPE ...]]
#   SIZE_MIB    default 2048
#   MODEL_TYPE  default qwen2_moe olmoe llama4_text qwen3_next lfm2 falcon_h1 mamba
#   BENCH_PYTHON a python with torch and transformers (not the project's venv)
#   BENCH_DIR   work folder (default build/bench-published)
# Prints a markdown table: the checkpoint's size, mobius's time and peak RSS for --dtype int4.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/mobius ] || { echo "run scripts/setup.sh first" >&2; exit 2; }
py=${BENCH_PYTHON:-}
[ -n "$py" ] && "$py" -c 'import torch, transformers' 2>/dev/null ||
  { echo "published_memory: BENCH_PYTHON must be a python with torch and transformers" >&2; exit 2; }
size=${1:-2048}
shift || true
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(qwen2_moe olmoe llama4_text qwen3_next lfm2 falcon_h1 mamba)
work=${BENCH_DIR:-build/bench-published}
mkdir -p "$work"
for t in "${types[@]}"; do
  [ -f "$work/$t/config.json" ] || "$py" bench/make_published.py "$work" "$size" "$t" >&2
done
echo "| model type | checkpoint MiB | int4 build s | peak RSS MiB |"
echo "|---|---|---|---|"
for t in "${types[@]}"; do
  cat "$work/$t"/*.safetensors > /dev/null
  rm -rf "$work/out"
  /usr/bin/time -f "%e %M" -o "$work/time.txt" build/mobius build -q --dtype int4 --model "$work/$t" "$work/out"
  read -r el kb < "$work/time.txt"
  rm -rf "$work/out"
  printf "| %s | %d | %.2f | %.0f |\n" "$t" "$(du -sm "$work/$t" | cut -f1)" "$el" "$(echo "$kb / 1024" | bc -l)"
done
