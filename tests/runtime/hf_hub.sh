#!/usr/bin/env bash
# hf_hub.sh - mobius and the real huggingface_hub (pinned in tests/runtime/requirements.txt) share
# one Hugging Face cache, both ways, against the loopback hub of tests/hub_server.mjs:
#   1. what `hf download` (huggingface_hub's command) fetched, a whole repository at main and
#      another at a tag, `mobius build --model ORG/NAME[@REV]` builds offline (HF_HUB_OFFLINE=1)
#      from that snapshot, asking the hub nothing;
#   2. what `mobius download ORG/NAME[@REV]` fetched, huggingface_hub finds offline
#      (hf_hub_download and snapshot_download with local_files_only=True give the source's bytes;
#      scan_cache_dir reports the repository, its refs, commit and size, with no warning), verifies
#      online (verify_repo_checksums: no mismatch; blobs named by the hub's etags), and completes
#      with `hf download` without fetching a file mobius has (tests/runtime/hf_hub_check.py).
#
#   MOBIUS_CLI=build/mobius [MOBIUS_SOURCE_ROOT=.] [MOBIUS_GENAI_PYTHON=...] bash tests/runtime/hf_hub.sh
#
# MOBIUS_GENAI_PYTHON: a python with huggingface_hub (default build/venv/bin/python, which
# scripts/setup.sh makes; its `hf` command sits beside it). Only loopback addresses are reached:
# Python's requests go through a proxy that refuses, loopback excepted; telemetry and update
# checks are off. Exit 0 every check passed, 1 one failed, 77 (skipped) without huggingface_hub.
set -u
root=${MOBIUS_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cli=${MOBIUS_CLI:-}
py=${MOBIUS_GENAI_PYTHON:-$root/build/venv/bin/python}
check="$root/tests/runtime/hf_hub_check.py"
[[ -n "$cli" && -x "$cli" ]] || { echo "hf_hub: MOBIUS_CLI is not set; skipped"; exit 77; }
"$py" -c 'import huggingface_hub' 2>/dev/null || { echo "hf_hub: no huggingface_hub in $py; skipped"; exit 77; }
hf=$(dirname "$py")/hf
[ -x "$hf" ] || { echo "FAIL no hf command beside $py"; exit 1; }
command -v node >/dev/null || { echo "FAIL node (for tests/hub_server.mjs) is not on PATH"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-hf-hub-XXXXXX")
hub_pid=
cleanup() {
  if [ -n "$hub_pid" ]; then
    exec {hub_in}>&-
    for _ in $(seq 50); do kill -0 "$hub_pid" 2>/dev/null || break; sleep 0.1; done
    kill "$hub_pid" 2>/dev/null
    wait "$hub_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
export MOBIUS_PLUGIN_CACHE=${MOBIUS_PLUGIN_CACHE:-$work/plugin-scan.json}
# Nothing of the caller's hub settings, token or proxies.
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_TOKEN_PATH HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_HUB_CACHE \
  HUGGINGFACE_HUB_CACHE HF_HOME HF_ENDPOINT XDG_CACHE_HOME HF_XET_CACHE \
  HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_UPDATE_CHECK=1 HF_HUB_DISABLE_PROGRESS_BARS=1 DO_NOT_TRACK=1
export HOME=$work/home
mkdir -p "$HOME"

status=0
fail() { echo "FAIL $*"; status=1; }
pass() { echo "ok   $*"; }
# huggingface_hub (httpx) and Python: any address but the loopback hub's goes to a refusing proxy.
pyenv() {
  env HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9 \
    NO_PROXY=127.0.0.1,127.0.0.2 "$@"
}
# mobius: its own HTTP client, no proxy (as the hub tests run it).
mobius() { env NO_PROXY='*' "$cli" "$@" </dev/null; }

# The repositories: golden checkpoints with a README mobius has no use for. st-bert is a
# sentence-transformers model (tokenizer files, module folders), tiny-llama a sharded llama.
repos=$work/repos
mkdir -p "$repos"
cp -r "$root/tests/golden-encoders/st-bert-mean-norm" "$repos/st-bert"
cp -r "$root/tests/golden/llama3-rope-tied" "$repos/tiny-llama"
for r in st-bert tiny-llama; do
  rm -f "$repos/$r/case.json" "$repos/$r/reference.safetensors"
  printf '# %s\n\nA tiny test model.\n' "$r" >"$repos/$r/README.md"
done
# What `mobius download` takes of each (its config, weights, tokenizer and modules files).
st_files=config.json,model.safetensors,tokenizer.json,tokenizer_config.json,modules.json,1_Pooling/config.json,2_Normalize/config.json
llama_files=config.json,model.safetensors.index.json,model-00001-of-00002.safetensors,model-00002-of-00002.safetensors

cat >"$work/hub.json" <<EOF
{"repos": {"org/st-bert": {"dir": "$repos/st-bert", "tags": ["v1"]},
           "org/tiny-llama": {"dir": "$repos/tiny-llama", "tags": ["v1"]}},
 "host": "127.0.0.1", "cdnHost": "127.0.0.2"}
EOF
# The hub runs until its standard input (a fifo this script holds open) closes.
mkfifo "$work/hub.in"
exec {hub_in}<>"$work/hub.in"
node "$root/tests/hub_server.mjs" "$work/hub.json" <"$work/hub.in" >"$work/hub.out" 2>"$work/hub.err" {hub_in}>&- &
hub_pid=$!
for _ in $(seq 200); do
  [ "$(tail -c 1 "$work/hub.out")" = "" ] && [ -s "$work/hub.out" ] && break
  kill -0 "$hub_pid" 2>/dev/null || break
  sleep 0.1
done
port=$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$work/hub.out")
[ -n "$port" ] || { echo "FAIL the loopback hub did not start: $(cat "$work/hub.out" "$work/hub.err")"; exit 1; }
endpoint=http://127.0.0.1:$port
export HF_ENDPOINT=$endpoint
hub_log() { pyenv "$py" "$check" log "$endpoint" "$@"; }

# 1. huggingface_hub fetches, mobius builds offline.
export HF_HOME=$work/hf-python
if pyenv "$hf" download org/tiny-llama >"$work/hf1.log" 2>&1 &&
   pyenv "$hf" download org/st-bert --revision v1 >>"$work/hf1.log" 2>&1; then
  pass "hf download org/tiny-llama, org/st-bert --revision v1"
else
  fail "hf download: $(tail -n 5 "$work/hf1.log" | tr '\n' ' ')"
fi
hub_log reset
for spec in "org/tiny-llama main model.onnx" "org/st-bert v1 onnx/model.onnx"; do
  read -r repo rev onnx <<<"$spec"
  id=$repo; [ "$rev" = main ] || id=$repo@$rev
  out=$work/out-${repo#org/}
  cache_repo=$HF_HOME/hub/models--${repo/\//--}
  if ! HF_HUB_OFFLINE=1 mobius build --model "$id" "$out" >"$out.log" 2>&1; then
    fail "mobius build --model $id offline from huggingface_hub's cache: $(tail -n 3 "$out.log" | tr '\n' ' ')"
  elif [ ! -f "$out/$onnx" ]; then
    fail "mobius build --model $id: no $onnx in $out"
  elif ! grep -q "\"commit\": *\"$(cat "$cache_repo/refs/$rev" 2>/dev/null)\"" "$out/mobius_provenance.json"; then
    fail "mobius build --model $id: the provenance does not name the commit of refs/$rev"
  else
    pass "mobius build --model $id offline from huggingface_hub's snapshot ($onnx)"
  fi
done
hub_log quiet || fail "the offline builds asked the hub"
# The same build from an empty cache must fail: the model came from huggingface_hub's snapshot.
if HF_HOME=$work/hf-empty HF_HUB_OFFLINE=1 mobius build --model org/tiny-llama "$work/out-empty" >"$work/empty.log" 2>&1; then
  fail "mobius build --model org/tiny-llama offline from an empty cache succeeded"
else
  pass "mobius build --model org/tiny-llama offline from an empty cache fails: $(grep -m1 -o 'error: .*' "$work/empty.log" | cut -c1-120)"
fi

# 2. mobius fetches, huggingface_hub reads, verifies and completes.
export HF_HOME=$work/hf-mobius
for id in org/st-bert org/st-bert@v1 org/tiny-llama@v1; do
  repo=${id%@*}; rev=main; [ "$repo" = "$id" ] || rev=${id#*@}
  cache_repo=$HF_HOME/hub/models--${repo/\//--}
  if ! mobius download -q "$id" >"$work/dl.out" 2>"$work/dl.log"; then
    fail "mobius download $id: $(tail -n 3 "$work/dl.log" | tr '\n' ' ')"
  elif [ "$(cat "$work/dl.out")" != "$cache_repo/snapshots/$(cat "$cache_repo/refs/$rev" 2>/dev/null)" ]; then
    fail "mobius download $id printed $(cat "$work/dl.out"), not the snapshot of refs/$rev"
  else
    pass "mobius download $id -> snapshots/$(cat "$cache_repo/refs/$rev")"
  fi
done
hub_log reset
HF_HUB_OFFLINE=1 pyenv "$py" "$check" cached "$HF_HOME/hub" \
  org/st-bert "$repos/st-bert" main,v1 "$st_files" \
  org/tiny-llama "$repos/tiny-llama" v1 "$llama_files" || status=1
hub_log quiet || fail "huggingface_hub asked the hub offline"
pyenv "$py" "$check" verify "$HF_HOME/hub" org/st-bert main "$st_files" || status=1
pyenv "$py" "$check" verify "$HF_HOME/hub" org/tiny-llama v1 "$llama_files" || status=1
# `hf download` of the whole repository into mobius's cache fetches only what mobius left out.
hub_log reset
if pyenv "$hf" download org/st-bert >"$work/hf2.log" 2>&1 && pyenv "$hf" download org/tiny-llama --revision v1 >>"$work/hf2.log" 2>&1; then
  pass "hf download org/st-bert, org/tiny-llama --revision v1 into mobius's cache"
else
  fail "hf download into mobius's cache: $(tail -n 5 "$work/hf2.log" | tr '\n' ' ')"
fi
hub_log no-refetch "$st_files,$llama_files" || status=1
all_st=$(cd "$repos/st-bert" && find . -type f | sed 's|^\./||' | sort | paste -sd,)
all_llama=$(cd "$repos/tiny-llama" && find . -type f | sed 's|^\./||' | sort | paste -sd,)
if HF_HUB_OFFLINE=1 pyenv "$py" "$check" cached "$HF_HOME/hub" \
     org/st-bert "$repos/st-bert" main,v1 "$all_st" \
     org/tiny-llama "$repos/tiny-llama" v1 "$all_llama" >"$work/after.log"; then
  pass "after hf download: scan_cache_dir, hf_hub_download and snapshot_download see both tools' files"
else
  grep FAIL "$work/after.log"
  fail "after hf download into mobius's cache"
fi

# The checks must be able to fail: a copy of the cache with one byte of a blob flipped.
cp -a "$HF_HOME" "$work/broken"
blob=$(readlink -f "$work/broken/hub/models--org--st-bert/snapshots/"*/tokenizer.json)
"$py" -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[10] ^= 1; open(p, "wb").write(b)' "$blob"
if HF_HOME=$work/broken HF_HUB_OFFLINE=1 pyenv "$py" "$check" cached "$work/broken/hub" \
     org/st-bert "$repos/st-bert" main,v1 "$all_st" >"$work/broken.log"; then
  fail "the check passed a cache with a corrupted blob"
else
  pass "the check fails a cache with a corrupted blob: $(grep -m1 FAIL "$work/broken.log" | cut -c1-120)"
fi
exit "$status"
