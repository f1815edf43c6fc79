#!/usr/bin/env bash
# encoder.sh - the encoder benchmark: mobius's build of a BERT checkpoint against what a user
# deploys today, Optimum's export of the same checkpoint run through ONNX Runtime's transformer
# optimizer (`optimum-cli export onnx`, then `onnxruntime.transformers.optimizer --model_type bert`:
# the fused Attention / SkipLayerNormalization / BiasGelu graph), in ONNX Runtime on the CPU.
# Two checkpoints of released shapes (bert-base-uncased's, all-MiniLM-L6-v2's; random weights),
# batch 1 x 128 and 8 x 128 tokens, the two graphs timed paired and interleaved in one process.
# Conversion time and peak RSS are printed beside it.
#
# usage: bench/encoder.sh
#   BENCH_PYTHON  a python with torch, transformers, optimum-onnx and onnxruntime (pip install torch
#                 optimum-onnx onnxruntime, in a venv outside the repository); default python3
#   BENCH_DIR     work folder (default build/bench-encoder)
#   MOBIUS        the mobius binary (default build/mobius)
#   REPS          timed repetitions per shape (default 30); THREADS intra-op threads (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${BENCH_PYTHON:-python3}
mobius=${MOBIUS:-build/mobius}
work=${BENCH_DIR:-build/bench-encoder}
reps=${REPS:-30}
threads=${THREADS:-2}
[ -x "$mobius" ] || { echo "encoder.sh: no $mobius; build first" >&2; exit 2; }
"$py" -c "import torch, transformers, optimum, onnxruntime" 2>/dev/null ||
  { echo "encoder.sh: $py lacks torch, transformers, optimum-onnx or onnxruntime (set BENCH_PYTHON)" >&2; exit 2; }
optimum_cli=$(dirname "$("$py" -c 'import sys; print(sys.executable)')")/optimum-cli
mkdir -p "$work"

# timed DIR CMD...: runs CMD, prints "<seconds> <peak RSS MiB>".
timed() {
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" > "$work/log.txt" 2>&1 || { cat "$work/log.txt" >&2; exit 1; }
  awk '{ printf "%s %.0f\n", $1, $2 / 1024 }' "$work/time.txt"
}

declare -A heads=([bert-base]=12 [minilm]=12) hidden=([bert-base]=768 [minilm]=384)
rows=()
conv=()
for shape in bert-base minilm; do
  ckpt="$work/ckpt-$shape"
  [ -f "$ckpt/config.json" ] || "$py" bench/make_encoder.py --shape "$shape" --out "$ckpt"
  rm -rf "$work/mobius-$shape" "$work/optimum-$shape"
  read -r m_s m_rss < <(timed env MOBIUS_CACHE_DIR=none "$mobius" build -q --runtime onnxruntime --model "$ckpt" "$work/mobius-$shape")
  read -r o_s o_rss < <(timed "$optimum_cli" export onnx --model "$ckpt" --task feature-extraction "$work/optimum-$shape")
  read -r p_s p_rss < <(timed "$py" -m onnxruntime.transformers.optimizer --input "$work/optimum-$shape/model.onnx" \
    --output "$work/optimum-$shape/model_opt.onnx" --model_type bert --num_heads "${heads[$shape]}" --hidden_size "${hidden[$shape]}")
  conv+=("| $shape | $m_s | $m_rss | $o_s + $p_s | $o_rss / $p_rss | $(awk -v a="$m_s" -v b="$o_s" -v c="$p_s" 'BEGIN { printf "%.3f", a / (b + c) }') |")
  for batch in 1 8; do
    rows+=("$("$py" bench/encoder_latency.py --a "$work/mobius-$shape/model.onnx" --b "$work/optimum-$shape/model_opt.onnx" \
      --batch "$batch" --seq 128 --reps "$reps" --threads "$threads" --label "$shape")")
  done
done
echo "| checkpoint | batch x seq | mobius ms | Optimum + optimizer ms | mobius / optimized | max abs diff |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "| checkpoint | mobius s | mobius peak RSS MiB | Optimum export + optimizer s | their peak RSS MiB | time ratio |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${conv[@]}"
