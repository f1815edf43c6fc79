#!/usr/bin/env bash
# genai_configs.sh - every golden case mobius builds gets a genai_config.json that ONNX Runtime
# GenAI's own parser accepts, with what GenAI checks only when it loads the model and generates
# (genai_parse.py), and the GenAI model type expected for it; and variants of llama-tiny check the
# token ids and the search section taken from config.json and generation_config.json.
#
#   MOBIUS_CLI=build/mobius [MOBIUS_SOURCE_ROOT=.] [MOBIUS_GENAI_PYTHON=...] bash tests/runtime/genai_configs.sh
#
# Environment as for the parity tests (tests/parity/meson.build): MOBIUS_CLI (required),
# MOBIUS_SOURCE_ROOT (default: this script's ../..), MOBIUS_PLUGIN_PATH / MOBIUS_PLUGIN_CACHE
# passed through to the CLI; MOBIUS_GENAI_PYTHON, a python with onnxruntime_genai (default
# build/venv/bin/python, which scripts/setup.sh makes). Exit 0 all passed, 1 a check failed, 77
# (skip) without MOBIUS_CLI, node or onnxruntime_genai. Last line: "genai configs: P passed, F failed".
set -u

root=${MOBIUS_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cli=${MOBIUS_CLI:-}
if [[ -z "$cli" || ! -x "$cli" ]]; then
  echo "genai configs: MOBIUS_CLI is not set to the mobius executable; skipped" >&2
  exit 77
fi
if ! command -v node >/dev/null; then
  echo "genai configs: node not found; skipped" >&2
  exit 77
fi
py=${MOBIUS_GENAI_PYTHON:-$root/build/venv/bin/python}
if ! "$py" -c 'import onnxruntime_genai' 2>/dev/null; then
  echo "genai configs: no onnxruntime_genai in $py; skipped" >&2
  exit 77
fi
parser=$root/tests/runtime/genai_parse.py
golden=$root/tests/golden

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-genai-XXXXXX")
trap 'rm -rf "$work"' EXIT
# Plugin probe results stay in the temp folder unless the caller says where.
export MOBIUS_PLUGIN_CACHE=${MOBIUS_PLUGIN_CACHE:-$work/plugin-scan.json}

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

# DeepSeek's latent cache has no GenAI runner: its default build is laid out for ONNX Runtime,
# with a warning saying why, and writes no genai_config.json (checked below).
no_genai_re='^deepseek-'
# Nor have the Mamba-2 states (conv_state, ssm_state) of mamba2, bamba, falcon_h1, nemotron_h and
# granitemoehybrid's hybrid layers (GenAI's granitemoehybrid runs the attention-only ones).
no_genai_re+='|^mamba2-|^bamba-|^falcon-h1-|^nemotron-h-|^granitemoehybrid-tiny$'
# Nor have the Mamba-1 states (conv_state, ssm_state) of mamba and jamba.
no_genai_re+='|^mamba-|^jamba-'
values=$root/tests/runtime/genai_values.mjs

# The GenAI model type each case must get (genai_config.cpp, genai_model_type).
expected_type() {
  case "$1" in
    llama-tiny | llama3-rope-tied) echo llama ;;
    mistral-sliding) echo mistral ;;
    qwen2-bias) echo qwen2 ;;
    qwen3-qknorm) echo qwen3 ;;
    granite-multipliers) echo granite ;;
    olmo2-postnorm) echo olmo ;;
    gemma-tiny) echo gemma ;;
    gemma2-softcap-sliding) echo gemma2 ;;
    gemma3-text-tiny) echo gemma3_text ;;
    qwen35-*) echo qwen3_5_text ;;
    phi3-longrope) echo phi3 ;;
    mixtral-tiny | qwen3-moe-tiny) echo decoder ;;
    gpt-oss-tiny) echo gptoss ;;
    qwen3-fp8) echo qwen3 ;;
    granitemoehybrid-dense-rope) echo granitemoehybrid ;;
    qwen2-moe-tiny | olmoe-tiny | granitemoe-tiny | ernie4_5-moe-tiny | glm4-moe-tiny) echo decoder ;;
    hunyuan-moe-tiny | dbrx-tiny) echo decoder ;;
    phimoe-tiny) echo phimoe ;;
    lfm2-tiny) echo lfm2 ;;
    qwen3-next-tiny) echo decoder ;;
    llama4-text-tiny) echo decoder ;;
    *) echo "" ;;
  esac
}

# build NAME CKPT: builds CKPT into $work/NAME; prints the CLI's errors on failure.
build() {
  local out=$work/$1
  if ! "$cli" build -q --no-weights -m "$2" "$out" >"$work/$1.log" 2>&1; then
    fail "$1: mobius build failed: $(tail -n 3 "$work/$1.log" | tr '\n' ' ')"
    return 1
  fi
  if [[ ! -f "$out/genai_config.json" ]]; then
    fail "$1: the build wrote no genai_config.json"
    return 1
  fi
  return 0
}

# validate NAME: GenAI's parser, and what GenAI checks when it loads the model and generates.
validate() {
  if "$py" "$parser" "$work/$1" >"$work/$1.validate" 2>&1; then
    pass "$1: genai_config.json passes GenAI's parser and checks"
  else
    fail "$(sed "s|$work/||" "$work/$1.validate" | tr '\n' ' ')"
  fi
}

# check NAME WHAT JS: JS is an expression over `c` (the parsed genai_config.json) that must be true.
check() {
  local f=$work/$1/genai_config.json
  [[ -f "$f" ]] || return 0  # already reported
  if node -e '
    const c = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const ok = (function () { return eval(process.argv[2]); })();
    if (!ok) { console.error("got model=" + JSON.stringify({type: c.model.type, bos: c.model.bos_token_id, eos: c.model.eos_token_id, pad: c.model.pad_token_id}) + " search=" + JSON.stringify(c.search)); process.exit(1); }
  ' "$f" "$3" 2>"$work/$1.check"; then
    pass "$1: $2"
  else
    fail "$1: $2 ($3): $(cat "$work/$1.check")"
  fi
}

# values NAME CKPT: every number of NAME's genai_config.json agrees with CKPT's configs.
values() {
  if node "$values" "$2" "$work/$1/genai_config.json" >"$work/$1.values" 2>&1; then
    pass "$1: every number agrees with config.json"
  else
    fail "$1: $(tr '\n' ';' < "$work/$1.values")"
  fi
}

# --- every golden case that builds ----------------------------------------------------------------
for dir in "$golden"/*/; do
  name=$(basename "$dir")
  [[ -f "$dir/case.json" ]] || continue
  if [[ "$name" =~ $no_genai_re ]]; then
    if ! "$cli" build --no-weights -m "$dir" "$work/$name" >"$work/$name.log" 2>&1; then
      fail "$name: mobius build failed: $(tail -n 3 "$work/$name.log" | tr '\n' ' ')"
    elif [[ -f "$work/$name/genai_config.json" ]] || ! grep -q "onnxruntime" "$work/$name.log"; then
      fail "$name: expected an ONNX Runtime layout, no genai_config.json, and a warning saying why"
    else
      pass "$name: no genai_config.json (no GenAI runner), with the reason"
    fi
    continue
  fi
  build "$name" "$dir" || continue
  validate "$name"
  values "$name" "$dir"
  t=$(expected_type "$name")
  [[ -n "$t" ]] && check "$name" "model.type is $t" "c.model.type === '$t'"
  # Where the checkpoint names no eos or pad id (mpt-tiny), both are left to GenAI's defaults.
  check "$name" "pad_token_id is one number, or absent with eos" \
    "Number.isInteger(c.model.pad_token_id) || (c.model.pad_token_id === undefined && c.model.eos_token_id === undefined)"
done

# LFM2's own runner: the layer types, and the graph's conv state names.
check lfm2-tiny "decoder.layer_types and conv state names for GenAI's LFM2 runner" \
  "c.model.decoder.layer_types.join() === 'conv,full_attention,conv' && c.model.decoder.inputs.past_conv_names === 'past_key_values.%d.conv_state' && c.model.decoder.outputs.present_conv_names === 'present.%d.conv_state'"

# --- llama-tiny variants ----------------------------------------------------------------------------
# variant NAME NODE_JS: a copy of llama-tiny whose files NODE_JS edits (cwd = the copy; `cfg` is
# config.json, written back; `write(name, obj)` writes another JSON file).
variant() {
  local ckpt=$work/ckpt-$1
  mkdir -p "$ckpt"
  cp "$golden/llama-tiny/config.json" "$golden/llama-tiny/model.safetensors" "$ckpt/"
  (cd "$ckpt" && node -e '
    const fs = require("fs");
    const cfg = JSON.parse(fs.readFileSync("config.json", "utf8"));
    const write = (n, o) => fs.writeFileSync(n, JSON.stringify(o, null, 2));
    eval(process.argv[1]);
    write("config.json", cfg);
  ' "$2") || { fail "$1: could not make the checkpoint"; return 1; }
  build "$1" "$ckpt"
}

# Llama-3-instruct style: a list of eos ids and no pad (vocab_size large enough to hold them: a
# --no-weights build opens no weights, so the checkpoint's smaller tensors do not matter).
if variant llama-eos-list 'cfg.vocab_size = 128256; cfg.bos_token_id = 128000; cfg.eos_token_id = [128001, 128008, 128009]; delete cfg.pad_token_id;'; then
  validate llama-eos-list
  values llama-eos-list "$work/ckpt-llama-eos-list"
  check llama-eos-list "eos list kept" "JSON.stringify(c.model.eos_token_id) === '[128001,128008,128009]'"
  check llama-eos-list "pad is a scalar, the first eos" "c.model.pad_token_id === 128001"
fi

# generation_config.json sampling without top_k: transformers' top_k 50, never 1.
if variant llama-sampling 'write("generation_config.json", {do_sample: true, temperature: 0.6, top_p: 0.9, bos_token_id: 1, eos_token_id: 2});'; then
  validate llama-sampling
  values llama-sampling "$work/ckpt-llama-sampling"
  check llama-sampling "do_sample from generation_config.json" "c.search.do_sample === true"
  check llama-sampling "temperature 0.6" "Math.abs(c.search.temperature - 0.6) < 1e-9"
  check llama-sampling "top_p 0.9" "Math.abs(c.search.top_p - 0.9) < 1e-9"
  check llama-sampling "top_k 50 when unset" "c.search.top_k === 50"
fi

# generation_config.json's eos list overrides config.json's eos.
if variant llama-gen-eos 'write("generation_config.json", {bos_token_id: 1, eos_token_id: [2, 5, 7]});'; then
  validate llama-gen-eos
  values llama-gen-eos "$work/ckpt-llama-gen-eos"
  check llama-gen-eos "eos list from generation_config.json" "JSON.stringify(c.model.eos_token_id) === '[2,5,7]'"
  check llama-gen-eos "pad is the first eos" "c.model.pad_token_id === 2"
  check llama-gen-eos "greedy without do_sample" "c.search.do_sample === false && c.search.top_k === 50"
fi

echo "genai configs: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
