#!/usr/bin/env bash
# vision.sh - the vision benchmark: image-classification latency of mobius's build of a ViT
# checkpoint against what a user deploys today, Optimum's export of the same checkpoint run through
# ONNX Runtime's transformer optimizer (`optimum-cli export onnx --task image-classification`, then
# `onnxruntime.transformers.optimizer --model_type vit`), in ONNX Runtime on the CPU.
# The checkpoint is google/vit-base-patch16-224's shape (ViTForImageClassification, its published
# config, 1000 labels; random weights, bench/make_vision.py). mobius builds it with
# `--runtime onnxruntime --dtype f32`. Where the optimizer fails on the export, the export is
# measured as it is; the fused operators of the optimized graph are printed (whether its attention
# became Attention / MultiHeadAttention), beside the operators of both graphs.
# Measured by bench/vision_latency.py, the two graphs in one process: session creation (alternating
# order), then per batch (1 and 8 images of 224 x 224) the logits checked to agree (atol 1e-4 +
# rtol 1e-3, the same argmax) before REPS paired runs, interleaved (A B, then B A, ...); the median
# ms of each and the median of the paired ratios mobius / Optimum. Conversion time and peak RSS are
# printed beside it.
#
# usage: bench/vision.sh [--sanity]
#   --sanity      Optimum's optimized export against itself in place of mobius's build (mobius not
#                 needed): the ratios should be near 1 and the difference 0; a check of the method
#   BENCH_PYTHON  a python with torch, transformers, optimum-onnx and onnxruntime; default the venv
#                 build/peers-optimum-venv (bench/peers-optimum-requirements.txt, made by
#                 bench/peers-venv.sh when missing, as bench/peers.sh makes it)
#   BENCH_DIR     work folder (default build/bench-vision; the checkpoint is kept for the next run
#                 while bench/make_vision.py and the venv's pins are unchanged)
#   MOBIUS        the mobius binary (default build/mobius)
#   REPS          timed repetitions per batch (default 30); THREADS intra-op threads (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
sanity=0
for arg in "$@"; do
  case $arg in
    --sanity) sanity=1 ;;
    *) echo "usage: bench/vision.sh [--sanity]" >&2; exit 2 ;;
  esac
done
mobius=${MOBIUS:-build/mobius}
work=${BENCH_DIR:-build/bench-vision}
reps=${REPS:-30}
threads=${THREADS:-2}
[ $sanity = 1 ] || [ -x "$mobius" ] || { echo "vision.sh: no $mobius; build first" >&2; exit 2; }
if [ -n "${BENCH_PYTHON:-}" ]; then
  py=$BENCH_PYTHON
else
  . bench/peers-venv.sh
  peers_venv venv build/peers-optimum-venv bench/peers-optimum-requirements.txt
  py=$venv/bin/python
fi
"$py" -c "import torch, transformers, optimum.exporters.onnx, onnxruntime, onnx" 2>/dev/null ||
  { echo "vision.sh: $py lacks torch, transformers, optimum-onnx, onnxruntime or onnx (set BENCH_PYTHON)" >&2; exit 2; }
optimum_cli=$(dirname "$("$py" -c 'import sys; print(sys.executable)')")/optimum-cli
mkdir -p "$work"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
say() { echo "vision.sh: $*" >&2; }

# timed CMD...: runs CMD, prints "<seconds> <peak RSS MiB>"; its output in $work/log.txt.
timed() {
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" > "$work/log.txt" 2>&1 ||
    { cat "$work/log.txt" >&2; echo "vision.sh: failed: $*" >&2; exit 1; }
  awk '{ printf "%s %.0f\n", $1, $2 / 1024 }' "$work/time.txt"
}

# The checkpoint, made again when bench/make_vision.py or the venv's pins changed.
ckpt=$work/ckpt
want=$(cat bench/make_vision.py bench/peers-optimum-requirements.txt | sha256sum | cut -c1-16)
if [ "$(cat "$ckpt.stamp" 2>/dev/null)" != "$want" ] || [ ! -f "$ckpt/model.safetensors" ]; then
  say "making the checkpoint"
  rm -rf "$ckpt" "$ckpt.stamp"
  "$py" bench/make_vision.py --out "$ckpt" >&2
  echo "$want" > "$ckpt.stamp"
fi

rm -rf "$work/mobius" "$work/optimum"
if [ $sanity = 0 ]; then
  say "building with mobius"
  read -r m_s m_rss < <(timed env MOBIUS_CACHE_DIR=none "$mobius" build -q --runtime onnxruntime --dtype f32 \
    --model "$ckpt" "$work/mobius")
fi
say "exporting with Optimum"
read -r o_s o_rss < <(timed "$optimum_cli" export onnx --model "$ckpt" --task image-classification "$work/optimum")
say "optimizing Optimum's export"
optimized=$work/optimum/model_opt.onnx
if /usr/bin/time -f "%e %M" -o "$work/time.txt" "$py" -m onnxruntime.transformers.optimizer \
    --input "$work/optimum/model.onnx" --output "$optimized" --model_type vit --num_heads 12 --hidden_size 768 \
    > "$work/optimizer.log" 2>&1 && [ -f "$optimized" ]; then
  read -r p_s p_rss < <(awk '{ printf "%s %.0f\n", $1, $2 / 1024 }' "$work/time.txt")
  b_name="Optimum + optimizer"
  opt_note="ONNX Runtime's transformer optimizer (model_type vit) ran on Optimum's export"
else
  p_s=0 p_rss=0
  optimized=$work/optimum/model.onnx
  b_name="Optimum"
  opt_note="ONNX Runtime's transformer optimizer (model_type vit) failed on Optimum's export (see $work/optimizer.log: \
$(tr '\r' '\n' < "$work/optimizer.log" | grep -iE 'error|exception' | tail -1 | cut -c1-200)); the export is measured as it is"
fi

if [ $sanity = 1 ]; then
  a_graph=$optimized a_name="$b_name (again)"
else
  a_graph=$work/mobius/model.onnx a_name=mobius
  [ -f "$a_graph" ] || { echo "vision.sh: mobius wrote no $a_graph" >&2; ls "$work/mobius" >&2; exit 1; }
fi
say "measuring: $a_name vs $b_name"
table=$("$py" bench/vision_latency.py --a "$a_graph" --b "$optimized" --names "$a_name,$b_name" --batches 1,8 \
  --reps "$reps" --threads "$threads" --label "vit-base-patch16-224's shape" --out "$work/latency.json")

echo "$table"
echo
echo "$opt_note."
# The graphs' operators: the optimizer's fusions (attention fused into Attention / MultiHeadAttention
# or left as MatMul, Softmax, MatMul), and mobius's.
"$py" - "$a_name" "$a_graph" "$b_name" "$optimized" <<'EOF'
import collections
import sys

import onnx

for name, path in zip(sys.argv[1::2], sys.argv[2::2]):
    g = onnx.load(path, load_external_data=False).graph
    ops = collections.Counter(n.op_type for n in g.node)
    attn = ops["Attention"] + ops["MultiHeadAttention"]
    print(f"- {name}: {len(g.node)} nodes; attention {'fused (' + str(attn) + ')' if attn else 'not fused'}; "
          + ", ".join(f"{op} {c}" for op, c in ops.most_common()))
EOF
echo
echo "| conversion | s | peak RSS MiB |"
echo "|---|---|---|"
[ $sanity = 1 ] || echo "| mobius build --runtime onnxruntime --dtype f32 | $m_s | $m_rss |"
echo "| optimum-cli export onnx | $o_s | $o_rss |"
[ "$p_s" = 0 ] || echo "| onnxruntime.transformers.optimizer | $p_s | $p_rss |"
echo
"$py" -c "
import importlib.metadata as m
print('Versions: ' + ', '.join(f'{p} {m.version(p)}' for p in
      ['onnxruntime', 'optimum', 'optimum-onnx', 'transformers', 'torch']) + '; $(nproc) cores, THREADS=$threads, REPS=$reps')"
