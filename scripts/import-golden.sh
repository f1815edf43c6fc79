#!/usr/bin/env bash
# import-golden.sh - copies golden cases (folders holding case.json, config.json, weights and
# reference.safetensors) from SRC_DIR into tests/golden/, skipping the ones already there.
#
#   scripts/import-golden.sh SRC_DIR
set -euo pipefail
src=${1:?usage: scripts/import-golden.sh SRC_DIR}
dst="$(cd "$(dirname "$0")/.." && pwd)/tests/golden"
added=0
for c in "$src"/*/; do
  name=$(basename "$c")
  [ -f "$c/case.json" ] || continue
  [ -e "$dst/$name" ] && continue
  mkdir -p "$dst/$name"
  cp -- "$c"/* "$dst/$name/"
  chmod -R u+w "$dst/$name"
  echo "added $name"
  added=$((added + 1))
done
[ -f "$src/HINTS.md" ] && cp -- "$src/HINTS.md" "$dst/HINTS.md" && chmod u+w "$dst/HINTS.md"
echo "$added new case(s); list them in tests/parity/meson.build to run them"
