#!/usr/bin/env bash
# peers.sh - mobius against the converters a user would run instead, on the same checkpoints, in
# one run: ONNX Runtime GenAI's model builder (python -m onnxruntime_genai.models.builder, -p fp32
# and -p int4, -e cpu), the mobius-onnx Python package (`mobius build --config
# DIR OUT --ep cpu --runtime ort-genai`; it has no int4) and Optimum's ONNX exporter (optimum-cli
# export onnx --task text-generation-with-past). Each peer's output is set beside the mobius output
# for the same runtime:
#   builder fp32 / int4  vs  mobius build --dtype f32 / int4 (the default runtime, ort-genai)
#   mobius-onnx f32      vs  mobius build --dtype f32 (ort-genai)
#   Optimum              vs  mobius build --runtime onnxruntime (ONNX Runtime alone: a model.onnx
#                            with position_ids and past_key_values.N.* inputs, as Optimum's)
# Two checkpoints, random weights N(0, 0.02), f32, each with a word-level tokenizer of its
# vocabulary (bench/make_tokenizer.py; the builder and Optimum load a tokenizer):
#   llama  bench/decode.sh's: hidden 1024, intermediate 2816, 16 heads / 8 kv heads, 12 layers,
#          vocab 32000, max_position_embeddings 2048, untied (207 M parameters, 790 MiB)
#   qwen3  Qwen3-0.6B's shape: hidden 1024, intermediate 3072, 16 / 8 heads, head_dim 128,
#          28 layers, vocab 151936, q/k norms, tie_word_embeddings, max_position_embeddings 40960
#          (596 M parameters, 2273 MiB)
# Measured, per tool and checkpoint:
#   conversion  wall time, peak RSS of the whole process tree (bench/peak_rss.py: /proc polled
#               every 50 ms, the largest sum over the tree, or a process's own VmHWM when larger),
#               output bytes (the files of the output folder). One run each, the checkpoint read
#               into the page cache and the earlier outputs synced to disk first (the time is to
#               the process's exit, its output not synced); mobius with MOBIUS_CACHE_DIR=none (it
#               hashes every checkpoint file, as on a first build), the peers with
#               HF_HUB_OFFLINE=1. When Optimum's export fails and its error says to pass
#               --no-post-process, that is run and measured, and the failure noted.
#   decode      ONNX Runtime (onnxruntime-node, CPU, THREADS intra-op threads, spinning off): each
#               mobius output with its peer's in one process, session creations alternating,
#               decode steps (one new token after a KV cache of 128, then 1024) interleaved
#               (bench/decode.mjs --paired)
#   generator   ONNX Runtime GenAI's og.Generator, greedy, THREADS intra-op threads
#               (bench/genai_tokens.py): tokens/s of mobius's ort-genai folders against the
#               builder's and mobius-onnx's, the two models in one process, tokens generated in
#               alternating blocks, after a prompt of 128 and of 1024 tokens
# Every ratio is mobius / peer, from the paired measurements (the median ratio of neighbouring
# steps, geometric mean over runs that alternate which model is opened first). Prints markdown
# tables (bench/peers_report.py), one set per checkpoint, then the versions; progress goes to
# stderr. Takes about an hour with both checkpoints on 2 cores (longer on a busy machine).
#
# usage: bench/peers.sh
#   MOBIUS        the mobius CLI (default build/mobius)
#   BENCH_BIN     folder of make_checkpoint (default build/bench)
#   PEERS_DIR     work folder (default build/peers-work; about 25 GiB with both checkpoints)
#   CHECKPOINTS   which checkpoints (default "llama qwen3")
#   PEERS_VENV    an existing venv with onnxruntime-genai (with its builder's needs: torch,
#                 transformers 5, onnx-ir) and mobius-onnx, used as it is; default build/peers-venv,
#                 made from bench/peers-requirements.txt (pinned) when missing or when that changed
#   OPTIMUM_VENV  likewise for optimum-onnx (it takes transformers < 4.58, so a venv of its own);
#                 default build/peers-optimum-venv from bench/peers-optimum-requirements.txt
#   PEERS_PYTHON  the python that creates the venvs (default python3)
#   REPS          paired runs per comparison, alternating which model opens first (default 2)
#   STEPS         interleaved decode steps per past length in bench/decode.mjs (default 64)
#   GEN_STEPS     generated tokens per past length in bench/genai_tokens.py (default 64)
#   THREADS       intra-op threads (default 2)
#   MAX_OTHER     a run during which other processes took more than this share of the CPU is
#                 repeated (default 0.05; each run first waits up to QUIET_WAIT seconds, default
#                 600, for a quiet machine)
# The outputs are rebuilt on every run and left in PEERS_DIR/CKPT/NAME, with the measurements
# (PEERS_DIR/CKPT/{convert,decode,genai}); the checkpoints are made once.
set -euo pipefail
cd "$(dirname "$0")/.."
mobius=${MOBIUS:-build/mobius}
bin=${BENCH_BIN:-build/bench}
work=${PEERS_DIR:-build/peers-work}
checkpoints=${CHECKPOINTS:-llama qwen3}
reps=${REPS:-2}
steps=${STEPS:-64}
gen_steps=${GEN_STEPS:-64}
threads=${THREADS:-2}
max_other=${MAX_OTHER:-0.05}
quiet_wait=${QUIET_WAIT:-600}
for x in "$mobius" "$bin/make_checkpoint"; do
  [ -x "$x" ] || { echo "peers.sh: $x missing: build first (meson setup build && ninja -C build)" >&2; exit 2; }
done
[ -d node_modules/onnxruntime-node ] || { echo "peers.sh: npm install first (onnxruntime-node)" >&2; exit 2; }
. bench/peers-venv.sh
peers_venv venv build/peers-venv bench/peers-requirements.txt "${PEERS_VENV:-}"
peers_venv optimum_venv build/peers-optimum-venv bench/peers-optimum-requirements.txt "${OPTIMUM_VENV:-}"
py=$venv/bin/python
"$py" -c "import onnxruntime_genai, onnx_ir, torch, transformers, mobius" ||
  { echo "peers.sh: $venv lacks onnxruntime-genai, its builder's packages or mobius-onnx" >&2; exit 2; }
"$optimum_venv/bin/python" -c "import optimum.exporters.onnx" ||
  { echo "peers.sh: $optimum_venv lacks optimum-onnx" >&2; exit 2; }
mkdir -p "$work"
abs() { (cd "$1" && pwd); }
work=$(abs "$work")
mobius=$(cd "$(dirname "$mobius")" && pwd)/$(basename "$mobius")

# The versions, and which mobius.
commit=$(git log -1 --format='%h %cd' --date=format:'%Y-%m-%d %H:%M' 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit, with uncommitted changes"
{
  echo "{"
  echo "\"mobius\": \"$commit (binary built $(date -r "$mobius" '+%Y-%m-%d %H:%M'))\","
  echo "\"onnxruntime-node\": \"$(node -p "require('onnxruntime-node/package.json').version")\","
  "$py" -c "
import importlib.metadata as m
for p in ['onnxruntime-genai', 'onnxruntime', 'mobius-onnx', 'torch', 'transformers']:
    print(f'\"{p} (builder venv)\": \"{m.version(p)}\",')"
  "$optimum_venv/bin/python" -c "
import importlib.metadata as m
ps = ['optimum', 'optimum-onnx', 'torch', 'transformers']
print(',\n'.join(f'\"{p} (Optimum venv)\": \"{m.version(p)}\"' for p in ps))"
  echo "}"
} > "$work/versions.json"

make_ckpt() {
  local ck=$1 dir=$2
  [ -f "$dir/config.json" ] && [ -f "$dir/tokenizer.json" ] && return 0
  rm -rf "$dir"
  case $ck in
    llama) "$bin/make_checkpoint" "$dir" 0 f32 --hidden 1024 --intermediate 2816 --heads 16 --kv-heads 8 \
             --layers 12 --vocab 32000 --max-pos 2048 --init normal --std 0.02 >&2 ;;
    qwen3) "$bin/make_checkpoint" "$dir" 0 f32 --model-type qwen3 --tie --hidden 1024 --intermediate 3072 \
             --heads 16 --kv-heads 8 --head-dim 128 --layers 28 --vocab 151936 --max-pos 40960 \
             --init normal --std 0.02 >&2 ;;
    *) echo "peers.sh: unknown checkpoint $ck (llama, qwen3)" >&2; exit 2 ;;
  esac
  "$py" bench/make_tokenizer.py "$dir" >&2
}

# convert CKPT_DIR OUT_BASE NAME COMMAND...: runs COMMAND (which writes OUT_BASE/NAME), measured.
convert() {
  local ckpt=$1 base=$2 name=$3
  shift 3
  local out=$base/$name
  rm -rf "$out" "$base/convert/$name".* "$base/cache"
  # the checkpoint in the page cache, and no dirty pages of the previous conversion left to throttle
  # this one's writes
  cat "$ckpt"/* > /dev/null
  sync
  echo "converting: $name" >&2
  if python3 bench/peak_rss.py "$base/convert/$name.json" "$base/convert/$name.log" -- "$@" && [ -f "$out/model.onnx" ]; then
    find "$out" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }' > "$base/convert/$name.bytes"
  else
    # the last line of the log that names an error (progress bars end in carriage returns)
    tr '\r' '\n' < "$base/convert/$name.log" | grep -v '^\s*$' | grep -iE 'error|exception|not supported|failed' |
      tail -1 | cut -c1-300 > "$base/convert/$name.error" || true
    [ -s "$base/convert/$name.error" ] || echo "no model.onnx written (see $base/convert/$name.log)" > "$base/convert/$name.error"
    echo "peers.sh: $name failed: $(cat "$base/convert/$name.error")" >&2
    rm -rf "$out" "$base/cache"
    return 1
  fi
  rm -rf "$base/cache"
}

for ck in $checkpoints; do
  ckpt=$work/ckpt-$ck
  make_ckpt "$ck" "$ckpt"
  base=$work/$ck
  mkdir -p "$base/convert" "$base/decode" "$base/genai"
  rm -f "$base"/decode/* "$base"/genai/*

  rm -f "$base"/convert/*
  export MOBIUS_CACHE_DIR=none
  convert "$ckpt" "$base" mobius-genai-f32 "$mobius" build -q --dtype f32 --model "$ckpt" \
    "$base/mobius-genai-f32" || true
  convert "$ckpt" "$base" mobius-genai-int4 "$mobius" build -q --dtype int4 --model "$ckpt" \
    "$base/mobius-genai-int4" || true
  convert "$ckpt" "$base" mobius-ort-f32 "$mobius" build -q --dtype f32 --runtime onnxruntime --model "$ckpt" \
    "$base/mobius-ort-f32" || true
  unset MOBIUS_CACHE_DIR
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  convert "$ckpt" "$base" builder-f32 "$py" -m onnxruntime_genai.models.builder -i "$ckpt" -o "$base/builder-f32" \
    -p fp32 -e cpu -c "$base/cache" || true
  convert "$ckpt" "$base" builder-int4 "$py" -m onnxruntime_genai.models.builder -i "$ckpt" -o "$base/builder-int4" \
    -p int4 -e cpu -c "$base/cache" || true
  convert "$ckpt" "$base" mobius-onnx-f32 "$venv/bin/mobius" build --config "$ckpt" "$base/mobius-onnx-f32" \
    --ep cpu --runtime ort-genai || true
  optimum=("$optimum_venv/bin/optimum-cli" export onnx --model "$ckpt" --task text-generation-with-past)
  if ! convert "$ckpt" "$base" optimum-f32 "${optimum[@]}" "$base/optimum-f32"; then
    # Its post-processing (deduplicating tied weights) fails on a graph over 2 GiB, and the error
    # says to pass --no-post-process: what a user does next, so that is measured, and the failure told.
    if grep -q -- '--no-post-process' "$base/convert/optimum-f32.log"; then
      note="the plain export failed ($(cat "$base/convert/optimum-f32.error")); measured with"
      note="$note --no-post-process, as its error message advises"
      mv "$base/convert/optimum-f32.log" "$base/convert/optimum-f32-plain.log"
      convert "$ckpt" "$base" optimum-f32 "${optimum[@]}" --no-post-process "$base/optimum-f32" || true
      echo "$note" > "$base/convert/optimum-f32.note"
    fi
  fi
  unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE

  # ONNX Runtime: each pair in one process (a failure costs only its own pair).
  for pair in mobius-genai-f32:builder-f32 mobius-genai-int4:builder-int4 mobius-genai-f32:mobius-onnx-f32 \
              mobius-ort-f32:optimum-f32; do
    a=${pair%%:*} b=${pair##*:}
    [ -f "$base/$a/model.onnx" ] && [ -f "$base/$b/model.onnx" ] || continue
    echo "decode: $a vs $b" >&2
    node bench/decode.mjs --paired --reps "$reps" --steps "$steps" --prompt 128 --long 1024 --threads "$threads" \
      --max-other "$max_other" --quiet-wait "$quiet_wait" --out "$base/decode/$a--$b.json" \
      "$base/$a" "$base/$b" > /dev/null 2> "$base/decode/$a--$b.log" ||
      { grep -m1 -iE 'error' "$base/decode/$a--$b.log" | cut -c1-300 > "$base/decode/$a--$b.error" || true
        echo "peers.sh: decode $a vs $b failed (see $base/decode/$a--$b.log)" >&2; }
  done

  # ONNX Runtime GenAI's generator on the ort-genai folders.
  for pair in mobius-genai-f32:builder-f32 mobius-genai-int4:builder-int4 mobius-genai-f32:mobius-onnx-f32; do
    a=${pair%%:*} b=${pair##*:}
    [ -f "$base/$a/genai_config.json" ] && [ -f "$base/$b/genai_config.json" ] || continue
    echo "generator: $a vs $b" >&2
    "$py" bench/genai_tokens.py --reps "$reps" --steps "$gen_steps" --prompt 128 --long 1024 \
      --threads "$threads" --max-other "$max_other" --quiet-wait "$quiet_wait" \
      --out "$base/genai/$a--$b.json" "$base/$a" "$base/$b" > /dev/null 2> "$base/genai/$a--$b.log" ||
      { grep -iE 'error|exception' "$base/genai/$a--$b.log" | tail -1 | cut -c1-300 > "$base/genai/$a--$b.error" || true
        echo "peers.sh: generator $a vs $b failed (see $base/genai/$a--$b.log)" >&2; }
  done
done

python3 bench/peers_report.py "$work" $checkpoints
