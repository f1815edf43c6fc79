#!/usr/bin/env bash
# output_hashes.sh - the bytes mobius writes for every golden case, for checking that a refactor
# changes none of them: builds each case of tests/golden (f32, f16, int4, transformers.js, standard
# operators), tests/golden-encoders (f32; f16 for ONNX Runtime) and tests/golden-diffusers with
# the given binary and prints "<case>-<variant> <md5> <file>" for every file of each output
# (the provenance, which records times and paths, left out). A build mobius refuses prints its
# first error instead.
#
#   scripts/output_hashes.sh [MOBIUS] > before.txt   (default: build/mobius)
#   ... change the code, rebuild ...
#   scripts/output_hashes.sh > after.txt && diff before.txt after.txt
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mobius=${1:-$root/build/mobius}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MOBIUS_CACHE_DIR=none

build() {
  local name=$1
  shift
  rm -rf "$work/out"
  if ! "$mobius" build --quiet "$@" "$work/out" > /dev/null 2> "$work/err"; then
    echo "$name refused: $(head -c 300 "$work/err" | tr '\n' ' ')"
    return
  fi
  (cd "$work/out" && find . -type f ! -name 'mobius_provenance*' -print0 | sort -z |
     xargs -0 md5sum | sed "s|^|$name |")
}

cd "$root"
for c in tests/golden/*/; do
  [ -f "$c/config.json" ] || continue
  n=$(basename "$c")
  build "$n-f32" -m "$c"
  build "$n-f16" -m "$c" --dtype f16
  build "$n-int4" -m "$c" --dtype int4
  build "$n-tjs" -m "$c" --runtime transformers.js
  build "$n-standard" -m "$c" --ops standard --runtime onnxruntime
done
for c in tests/golden-encoders/*/; do
  [ -f "$c/config.json" ] || continue
  n=$(basename "$c")
  build "$n-f32" -m "$c"
  build "$n-f16" -m "$c" --dtype f16 --runtime onnxruntime
done
for c in tests/golden-diffusers/*/; do
  build "$(basename "$c")" -m "$c"
done
