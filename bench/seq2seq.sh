#!/usr/bin/env bash
# seq2seq.sh - encoder-decoder latency: mobius's build of a T5 and a Whisper checkpoint against
# Optimum's export of the same checkpoints, in ONNX Runtime on the CPU, and for Whisper ONNX Runtime
# GenAI's generator on mobius's GenAI folder beside the GenAI model builder's.
#
# Two checkpoints of released shapes, random weights (seeded, f32), with small local tokenizers
# (bench/make_seq2seq.py; nothing from the Hugging Face Hub):
#   t5       t5-small's shape: d_model 512, d_ff 2048, 6 + 6 layers, 8 heads, vocab 32128, tied
#   whisper  whisper-tiny's shape: d_model 384, 4 + 4 layers, 6 heads, ffn 1536, 80 mels, vocab 51865
# Each is exported by Optimum (optimum-cli export onnx --task text2text-generation-with-past, or
# automatic-speech-recognition-with-past; HF_HUB_OFFLINE=1) and built by mobius
# (mobius build --runtime onnxruntime --dtype f32): both write encoder_model.onnx and
# decoder_model_merged.onnx with the same inputs and outputs (the merged decoder's
# past_key_values.{i}.decoder/encoder.key/value and use_cache_branch). A checkpoint mobius cannot
# build is reported and left out; the other is measured.
#
# Measured (bench/seq2seq_latency.py, the onnxruntime Python package from the Optimum venv, as a
# user of Optimum's ORTModelForSeq2SeqLM / ORTModelForSpeechSeq2Seq runs these folders), mobius's
# folder and Optimum's in one process, their sessions created in alternating order over ROUNDS
# rounds, THREADS intra-op threads:
#   encoder   batch 1: 128 source tokens (t5), [1, 80, 3000] features (whisper); runs interleaved
#   decoder   ms per token with a self-attention cache of 32 and of 256 tokens (the cross cache from
#             the model's own encoder output, use_cache_branch true, one new token per step), the two
#             models' steps interleaved, outputs bound to preallocated buffers
#   creation  seconds to create the two sessions (one per round, after an untimed one)
# Ratios are mobius / Optimum: the median of the ratios of neighbouring measurements, the geometric
# mean over rounds (which cancels the few percent the session created first loses). Before timing,
# the two are checked to agree: max |diff| of the encoder output, of the first decoder step's logits
# and of every timed step's logits, printed under each table.
# Whisper, also (when a venv with onnxruntime-genai is there, GENAI_VENV): mobius's default build
# (no --runtime: ONNX Runtime GenAI's layout, genai_config.json of type whisper; --dtype f32) and
# the GenAI model builder's (-p fp32 -e cpu) in og.Generator, greedy: ms per generated token after
# the same features and a decoder prompt of 32 and of 256 tokens, the two in one process, their
# tokens interleaved (bench/seq2seq_latency.py --genai, with the GenAI venv's python). A folder GenAI
# cannot load is reported and skipped (mobius's measured alone when the builder fails).
# In both runtimes the intra-op thread pools do not spin (ONNX Runtime's session option
# session.intra_op.allow_spinning 0), as two models share the cores: the absolute times are a little
# above those of one model in a process of its own, the ratios are the graphs'.
#
# usage: bench/seq2seq.sh [--quick] [--sanity]
#   --quick       few steps, for a first look (8 decoder steps, 4 encoder runs, 16 generated tokens,
#                 no repeated rounds, a short wait for a quiet machine)
#   --sanity      Optimum's export against itself in place of mobius's, and the builder's GenAI
#                 folder against itself (mobius not built): every ratio should be near 1, every
#                 difference 0; a check of the method
#   MOBIUS        the mobius CLI (default build/mobius)
#   SEQ2SEQ_DIR   work folder (default build/seq2seq-work; the checkpoints, Optimum's exports and the
#                 builder's folder are kept for the next run while the inputs are unchanged, mobius's
#                 folders are rebuilt on every run)
#   MODELS        which checkpoints (default "t5 whisper")
#   OPTIMUM_VENV  an existing venv with optimum-onnx and onnxruntime, used as it is; default
#                 build/peers-optimum-venv from bench/peers-optimum-requirements.txt (made when
#                 missing, as bench/peers.sh makes it)
#   GENAI_VENV    a venv with onnxruntime-genai (and the model builder's torch and transformers);
#                 default build/peers-venv (bench/peers.sh makes it); the GenAI part is skipped
#                 without one
#   THREADS       intra-op threads (default 2)
#   STEPS         timed decoder steps per cache length (default 64); ENC_REPS encoder runs (default
#                 10); GEN_STEPS generated tokens per prompt length in GenAI (default 64); ROUNDS
#                 rounds per measurement, rounded up to even (default 2)
#   MAX_OTHER     a round during which other processes took more than this share of the CPU is run
#                 again, up to RETRIES times (default 0.05, 2); before each, waits up to QUIET_WAIT
#                 seconds (default 600) for a quiet machine
# Prints a markdown table per checkpoint (metric, mobius ms, Optimum ms, mobius / Optimum), the
# GenAI table, then the versions; progress and logs go to stderr and SEQ2SEQ_DIR. Takes about a
# minute on a quiet 2-core machine, a minute more on the first run (the checkpoints, Optimum's
# exports and the builder's folder), longer on a busy machine (each round waits for a quiet one).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 sanity=0
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    --sanity) sanity=1 ;;
    *) echo "usage: bench/seq2seq.sh [--quick] [--sanity]" >&2; exit 2 ;;
  esac
done
mobius=${MOBIUS:-build/mobius}
work=${SEQ2SEQ_DIR:-build/seq2seq-work}
models=${MODELS:-t5 whisper}
threads=${THREADS:-2}
if [ $quick = 1 ]; then
  steps=${STEPS:-8} enc_reps=${ENC_REPS:-4} gen_steps=${GEN_STEPS:-16} rounds=${ROUNDS:-2}
  retries=${RETRIES:-0} quiet_wait=${QUIET_WAIT:-30}
else
  steps=${STEPS:-64} enc_reps=${ENC_REPS:-10} gen_steps=${GEN_STEPS:-64} rounds=${ROUNDS:-2}
  retries=${RETRIES:-2} quiet_wait=${QUIET_WAIT:-600}
fi
max_other=${MAX_OTHER:-0.05}
if [ $sanity = 0 ] && [ ! -x "$mobius" ]; then
  echo "seq2seq.sh: $mobius missing: build first (meson setup build && ninja -C build)" >&2
  exit 2
fi
. bench/peers-venv.sh
peers_venv optimum_venv build/peers-optimum-venv bench/peers-optimum-requirements.txt "${OPTIMUM_VENV:-}"
opy=$optimum_venv/bin/python
"$opy" -c "import optimum.exporters.onnx, onnxruntime" ||
  { echo "seq2seq.sh: $optimum_venv lacks optimum-onnx or onnxruntime" >&2; exit 2; }
genai_venv=${GENAI_VENV:-build/peers-venv}
gpy=
if [ -x "$genai_venv/bin/python" ] && "$genai_venv/bin/python" -c "import onnxruntime_genai" 2>/dev/null; then
  gpy=$genai_venv/bin/python
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
[ $sanity = 1 ] || mobius=$(cd "$(dirname "$mobius")" && pwd)/$(basename "$mobius")
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
say() { echo "seq2seq.sh: $*" >&2; }

# The last line of a log that names an error (progress bars end in carriage returns).
last_error() {
  tr '\r' '\n' < "$1" | grep -v '^\s*$' | grep -iE 'error|exception|not supported|unsupported|failed|cannot' |
    tail -1 | cut -c1-300 || true
}

# The checkpoint, made again when bench/make_seq2seq.py or the Optimum venv's pins (its transformers
# and torch) changed; its stamp keys the exports made from it.
make_ckpt() {
  local ck=$1 dir=$work/ckpt-$1 want
  want=$(cat bench/make_seq2seq.py bench/peers-optimum-requirements.txt | sha256sum | cut -c1-16)
  if [ "$(cat "$dir.stamp" 2>/dev/null)" != "$want" ] || [ ! -f "$dir/model.safetensors" ]; then
    say "making the $ck checkpoint"
    rm -rf "$dir" "$dir.stamp"
    "$opy" bench/make_seq2seq.py --shape "$ck" --out "$dir" >&2
    echo "$want" > "$dir.stamp"
  fi
}

# cached_export NAME STAMP COMMAND...: runs COMMAND (which writes $work/NAME) unless $work/NAME.stamp
# holds STAMP; its log in $work/NAME.log. Fails (the reason in $work/NAME.error) when it fails.
cached_export() {
  local name=$1 stamp=$2
  shift 2
  [ "$(cat "$work/$name.stamp" 2>/dev/null)" = "$stamp" ] && [ -d "$work/$name" ] && return 0
  rm -rf "$work/$name" "$work/$name.stamp" "$work/$name.error"
  say "exporting $name"
  if "$@" > "$work/$name.log" 2>&1; then
    echo "$stamp" > "$work/$name.stamp"
  else
    last_error "$work/$name.log" > "$work/$name.error"
    [ -s "$work/$name.error" ] || echo "failed (see $work/$name.log)" > "$work/$name.error"
    return 1
  fi
}

# mobius_build NAME CKPT ARGS...: mobius's folder, rebuilt every run; the reason in $work/NAME.error.
mobius_build() {
  local name=$1 ckpt=$2
  shift 2
  rm -rf "$work/$name" "$work/$name.error"
  say "building $name"
  if ! MOBIUS_CACHE_DIR=none "$mobius" build -q --model "$ckpt" "$work/$name" "$@" > "$work/$name.log" 2>&1; then
    last_error "$work/$name.log" > "$work/$name.error"
    [ -s "$work/$name.error" ] || tail -1 "$work/$name.log" | cut -c1-300 > "$work/$name.error"
    rm -rf "$work/$name"
    return 1
  fi
}

declare -A task=([t5]=text2text-generation-with-past [whisper]=automatic-speech-recognition-with-past)
declare -A title=([t5]="t5 (t5-small's shape)" [whisper]="whisper (whisper-tiny's shape)")
out=()
for ck in $models; do
  [ -n "${task[$ck]:-}" ] || { echo "seq2seq.sh: unknown checkpoint $ck (t5, whisper)" >&2; exit 2; }
  make_ckpt "$ck"
  ckpt=$work/ckpt-$ck
  ostamp=$(cat "$ckpt.stamp")
  out+=("## $ck" "")
  if ! cached_export "optimum-$ck" "$ostamp" "$optimum_venv/bin/optimum-cli" export onnx --model "$ckpt" \
      --task "${task[$ck]}" "$work/optimum-$ck" ||
     [ ! -f "$work/optimum-$ck/decoder_model_merged.onnx" ]; then
    [ -s "$work/optimum-$ck.error" ] || echo "no decoder_model_merged.onnx written" > "$work/optimum-$ck.error"
    out+=("Optimum's export failed: $(cat "$work/optimum-$ck.error")" "")
    continue
  fi
  if [ $sanity = 1 ]; then
    a=$work/optimum-$ck names="Optimum,Optimum (again)"
  elif mobius_build "mobius-$ck" "$ckpt" --runtime onnxruntime --dtype f32 &&
       [ -f "$work/mobius-$ck/encoder_model.onnx" ] && [ -f "$work/mobius-$ck/decoder_model_merged.onnx" ]; then
    a=$work/mobius-$ck names="mobius,Optimum"
  else
    [ -s "$work/mobius-$ck.error" ] || echo "no encoder_model.onnx and decoder_model_merged.onnx written" > "$work/mobius-$ck.error"
    say "mobius cannot build $ck: $(cat "$work/mobius-$ck.error")"
    out+=("mobius cannot build the $ck checkpoint (yet): $(cat "$work/mobius-$ck.error")" "")
    a=
  fi
  if [ -n "$a" ]; then
    say "measuring $ck: ${names/,/ vs }"
    if table=$("$opy" bench/seq2seq_latency.py --names "$names" --label "${title[$ck]}" --steps "$steps" \
        --enc-reps "$enc_reps" --rounds "$rounds" --threads "$threads" --max-other "$max_other" \
        --retries "$retries" --quiet-wait "$quiet_wait" --out "$work/latency-$ck.json" \
        "$a" "$work/optimum-$ck" 2> "$work/latency-$ck.log"); then
      out+=("$table" "")
    else
      out+=("The measurement failed: $(last_error "$work/latency-$ck.log") (see $work/latency-$ck.log)" "")
    fi
  fi

  # Whisper in ONNX Runtime GenAI.
  [ "$ck" = whisper ] || continue
  if [ -z "$gpy" ]; then
    out+=("ONNX Runtime GenAI generator: skipped: no venv with onnxruntime-genai at $genai_venv (GENAI_VENV)" "")
    continue
  fi
  gstamp="$(cat "$ckpt.stamp") $(cat "$genai_venv/.requirements.sha256" 2>/dev/null | cut -c1-16)"
  builder=$work/builder-$ck
  if ! cached_export "builder-$ck" "$gstamp" "$gpy" -m onnxruntime_genai.models.builder -i "$ckpt" -o "$builder" \
      -p fp32 -e cpu -c "$work/builder-cache"; then
    say "the GenAI model builder failed on $ck: $(cat "$work/builder-$ck.error")"
    builder=
  fi
  rm -rf "$work/builder-cache"
  if [ $sanity = 1 ]; then
    ga=$builder gb=$builder gnames="builder,builder (again)"
  elif mobius_build "mobius-$ck-genai" "$ckpt" --dtype f32; then
    ga=$work/mobius-$ck-genai gb=$builder gnames="mobius,builder"
  else
    out+=("ONNX Runtime GenAI generator: skipped: mobius's default build of $ck failed: $(cat "$work/mobius-$ck-genai.error")" "")
    continue
  fi
  if [ -z "$ga" ]; then
    out+=("ONNX Runtime GenAI generator: skipped: the model builder failed: $(cat "$work/builder-$ck.error")" "")
    continue
  fi
  say "measuring $ck in ONNX Runtime GenAI: ${gnames/,/ vs }"
  if table=$("$gpy" bench/seq2seq_latency.py --genai --names "$gnames" --label "$ck," --steps "$gen_steps" \
      --rounds "$rounds" --threads "$threads" --max-other "$max_other" --retries "$retries" \
      --quiet-wait "$quiet_wait" --out "$work/genai-$ck.json" "$ga" $gb 2> "$work/genai-$ck.log"); then
    out+=("$table" "")
  else
    out+=("ONNX Runtime GenAI generator: failed: $(last_error "$work/genai-$ck.log") (see $work/genai-$ck.log)" "")
  fi
done

printf '%s\n' "${out[@]}"
echo "## Versions"
echo
if [ $sanity = 0 ]; then
  commit=$(git log -1 --format='%h %cd' --date=format:'%Y-%m-%d %H:%M' 2>/dev/null || echo unknown)
  git diff --quiet HEAD 2>/dev/null || commit="$commit, with uncommitted changes"
  echo "- mobius: $commit (binary built $(date -r "$mobius" '+%Y-%m-%d %H:%M'))"
fi
"$opy" -c "
import importlib.metadata as m
print('- Optimum venv: ' + ', '.join(f'{p} {m.version(p)}' for p in
      ['onnxruntime', 'optimum', 'optimum-onnx', 'transformers', 'torch']))"
[ -z "$gpy" ] || "$gpy" -c "
import importlib.metadata as m
print('- GenAI venv: ' + ', '.join(f'{p} {m.version(p)}' for p in ['onnxruntime-genai', 'onnxruntime']))"
echo "- $(nproc) cores, THREADS=$threads"
