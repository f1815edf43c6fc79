#!/usr/bin/env bash
# run_browser.sh - mobius's transformers.js folders in a real browser: headless Chromium (driven by
# puppeteer-core, pinned in package.json) loads transformers.js's browser bundle and ONNX Runtime
# Web's WASM files from a server on 127.0.0.1 and runs one model of each task transformers.js
# runs from mobius's builds (tests/runtime/browser/browser_test.mjs): greedy generation (llama,
# qwen3, gemma3 golden cases), feature extraction, sequence and token classification, fill-mask
# (encoder golden cases, each also through its pipeline). Every output must match the case's
# reference and transformers.js in Node on the same folder; no request may leave 127.0.0.1.
#
#   MOBIUS_CLI=build/mobius [MOBIUS_SOURCE_ROOT=.] [MOBIUS_CHROMIUM=/usr/bin/chromium] \
#     bash tests/runtime/run_browser.sh [generate:CASE | encode:CASE ...]
#
# A generate CASE is under tests/golden, an encode CASE under tests/golden-encoders; the default is
# the list below. Exit 0 every check passed, 1 one failed, 77 (skipped) when Chromium or
# puppeteer-core (or the node that runs it) is missing.
set -u
root=${MOBIUS_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cli=${MOBIUS_CLI:-}
[[ -n "$cli" && -x "$cli" ]] || { echo "FAIL run_browser: MOBIUS_CLI is not set to the mobius executable"; exit 1; }
chromium=${MOBIUS_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[[ -n "$chromium" && -x "$chromium" ]] || { echo "run_browser: chromium not found (apt-get install chromium); skipped"; exit 77; }
command -v node >/dev/null || { echo "run_browser: node not found (puppeteer-core runs in it); skipped"; exit 77; }
[[ -f "$root/node_modules/puppeteer-core/package.json" ]] || { echo "run_browser: puppeteer-core not installed (npm ci); skipped"; exit 77; }

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(generate:llama-tiny generate:qwen3-qknorm generate:gemma3-text-tiny
  encode:st-bert-mean-norm encode:bert-seqcls encode:bert-tokcls encode:bert-mlm)

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-browser-XXXXXX")
driver=
cleanup() {
  if [ -n "$driver" ]; then kill "$driver" 2>/dev/null; wait "$driver" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mkdir -p "$work/models" "$work/cases" "$work/tmp"
export TMPDIR=$work/tmp  # Chromium's profile, removed with the rest
export MOBIUS_PLUGIN_CACHE=${MOBIUS_PLUGIN_CACHE:-$work/plugin-scan.json}

status=0
specs=()
for spec in "${cases[@]}"; do
  kind=${spec%%:*} c=${spec#*:}
  case $kind in
    generate) src=$root/tests/golden/$c ;;
    encode)
      # A copy with the tokenizer files of st-bert-mean-norm (the encoder cases share its
      # vocabulary), so that the folder runs in its task's pipeline too.
      src=$work/cases/$c
      cp -r "$root/tests/golden-encoders/$c" "$src" && chmod -R u+w "$src" || { echo "FAIL $spec: no case $c"; status=1; continue; }
      for f in tokenizer.json tokenizer_config.json; do
        [ -f "$src/$f" ] || cp "$root/tests/golden-encoders/st-bert-mean-norm/$f" "$src/"
      done ;;
    *) echo "FAIL $spec: expected generate:CASE or encode:CASE"; status=1; continue ;;
  esac
  if "$cli" build -q --runtime transformers.js -m "$src" "$work/models/$c" </dev/null >"$work/$c.log" 2>&1; then
    specs+=("$kind:$src")
  else
    echo "FAIL $spec: mobius build failed: $(tail -n 2 "$work/$c.log" | tr '\n' ' ')"
    status=1
  fi
done
[ ${#specs[@]} -gt 0 ] || { echo "FAIL run_browser: no folder was built"; exit 1; }

cd "$root"
node tests/runtime/browser/browser_test.mjs "$chromium" "$work/models" "${specs[@]}" &
driver=$!
wait "$driver"
rc=$?
driver=
[ "$rc" -eq 0 ] || status=1
exit "$status"
