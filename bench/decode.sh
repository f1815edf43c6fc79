#!/usr/bin/env bash
# decode.sh - the decode benchmark: mobius's graph against ONNX Runtime GenAI's model builder's
# (python -m onnxruntime_genai.models.builder -p fp32 / int4 -e cpu, from the venv bench/peers.sh
# uses) for the same weights, f32 and int4, on ONNX Runtime's CPU execution provider
# (onnxruntime-node, 2 intra-op threads), with the memory-bandwidth floor.
# Each model is measured alone (a fresh process: its RSS, creation and step times), then each
# mobius graph with the builder's of its dtype in one process, creations alternating and decode
# steps interleaved: the ratios that process-to-process drift on a shared machine cannot move
# (runs alternate which model is opened first: the first one decodes slower, whichever it is).
#
# usage: bench/decode.sh
#   MOBIUS     the mobius CLI (default build/mobius)
#   BENCH_BIN  folder of make_checkpoint and floor (default build/bench)
#   BENCH_DIR  work folder (default build/bench-decode; needs ~3 GiB)
#   PEERS_VENV a venv with onnxruntime-genai and its builder's packages, used as it is (default
#              build/peers-venv, made from bench/peers-requirements.txt when missing: see
#              bench/peers.sh; PEERS_PYTHON creates it)
#   REPS       measurements per model, alternating order, the best kept (default 2)
#   STEPS      timed decode steps per context length, the median reported (default 16)
#   PAIRED_STEPS  interleaved decode steps per context length in the paired runs (default 64)
#   MAX_OTHER  a measurement during which other processes took more than this share of the CPU is
#              repeated (default 0.05; each measurement also waits for a quiet machine first)
# The checkpoint, made once: llama, hidden 1024, intermediate 2816, 16 heads / 8 kv heads,
# 12 layers, vocab 32000, max_position_embeddings 2048, f32, weights N(0, 0.02) (about 207 M
# parameters), with a word-level tokenizer of its vocabulary (the builder loads one:
# bench/make_tokenizer.py). Every graph is rebuilt on each run. A mobius int4 build that fails
# reads n/a, with the reason under the table.
set -euo pipefail
cd "$(dirname "$0")/.."
mobius=${MOBIUS:-build/mobius}
bin=${BENCH_BIN:-build/bench}
work=${BENCH_DIR:-build/bench-decode}
reps=${REPS:-2}
steps=${STEPS:-16}
paired_steps=${PAIRED_STEPS:-64}
max_other=${MAX_OTHER:-0.05}
for x in "$mobius" "$bin/make_checkpoint" "$bin/floor"; do
  [ -x "$x" ] || { echo "decode.sh: $x missing: build first (meson setup build && ninja -C build)" >&2; exit 2; }
done
[ -d node_modules/onnxruntime-node ] || { echo "decode.sh: npm install first (onnxruntime-node)" >&2; exit 2; }
. bench/peers-venv.sh
peers_venv venv build/peers-venv bench/peers-requirements.txt "${PEERS_VENV:-}"
py=$venv/bin/python
"$py" -c "import onnxruntime_genai, onnx_ir, torch, transformers" ||
  { echo "decode.sh: $venv lacks onnxruntime-genai or its builder's packages" >&2; exit 2; }
mkdir -p "$work"

ckpt=$work/ckpt-llama-207m
if [ ! -f "$ckpt/config.json" ]; then
  rm -rf "$ckpt"
  "$bin/make_checkpoint" "$ckpt" 0 f32 --hidden 1024 --intermediate 2816 --heads 16 --kv-heads 8 \
    --layers 12 --vocab 32000 --max-pos 2048 --init normal --std 0.02 >&2
fi
[ -f "$ckpt/tokenizer.json" ] || "$py" bench/make_tokenizer.py "$ckpt" >&2

rm -rf "$work/logits" "$work"/*.error "$work/results.json" "$work/paired.json" "$work/floor.json"
models=()
for dt in f32 int4; do
  out=$work/mobius-$dt
  rm -rf "$out"
  echo "building $out" >&2
  if "$mobius" build -q --runtime onnxruntime --dtype "$dt" --model "$ckpt" "$out" 2> "$work/mobius-$dt.log"; then
    models+=("$out")
  else
    # the first line of the CLI's error says why (the last is often "Run with --help ...")
    sed -n '/./{p;q}' "$work/mobius-$dt.log" > "$work/mobius-$dt.error"
    echo "mobius-$dt: n/a (mobius build --dtype $dt: $(cat "$work/mobius-$dt.error"))" >&2
    rm -rf "$out"
  fi
  rm -f "$work/mobius-$dt.log"
  out=$work/builder-$dt
  rm -rf "$out"
  echo "building $out" >&2
  HF_HUB_OFFLINE=1 "$py" -m onnxruntime_genai.models.builder -i "$ckpt" -o "$out" \
    -p "$([ $dt = f32 ] && echo fp32 || echo int4)" -e cpu -c "$work/builder-cache" > "$work/builder-$dt.log" 2>&1 ||
    { cat "$work/builder-$dt.log" >&2; exit 1; }
  rm -rf "$work/builder-cache" "$work/builder-$dt.log"
  models+=("$out")
done

# One model at a time, each measurement a fresh process; the order alternates between repetitions.
node bench/decode.mjs --reps "$reps" --steps "$steps" --prompt 128 --long 1024 --dump "$work/logits" \
  --max-other "$max_other" --out "$work/results.json" "${models[@]}" >&2

# The ratios, measured in pairs: mobius and the builder's graph of one dtype in one process, their
# session creations alternating and their decode steps interleaved, so both see the same machine.
pairs=()
for dt in f32 int4; do
  [ -d "$work/mobius-$dt" ] && pairs+=("$work/mobius-$dt" "$work/builder-$dt")
done
if [ ${#pairs[@]} -gt 0 ]; then
  node bench/decode.mjs --paired --reps "$reps" --steps "$paired_steps" --prompt 128 --long 1024 \
    --max-other "$max_other" --out "$work/paired.json" "${pairs[@]}" >&2
fi

# The floor for each graph's per-token weight bytes (all initializers but the embedding table).
sizes=()
for m in "${models[@]}"; do
  sizes+=("$(node bench/onnx_stats.mjs --per-token-bytes "$m/model.onnx")")
done
node bench/decode.mjs --wait-quiet --max-other "$max_other"
"$bin/floor" "${sizes[@]}" > "$work/floor.json"

node bench/decode_report.mjs "$work"
