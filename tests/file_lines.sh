#!/usr/bin/env bash
# file_lines.sh - no source file of the host, the SDK or the plugins grows past 800 lines: a file
# that long has outgrown one purpose and is split by purpose (core/src/README.md). Prints each
# file over the limit ("<file>: <n> lines, more than 800").
#
#   file_lines.sh [ROOT]       default: this project; checks ROOT/core, ROOT/sdk, ROOT/plugins
#   file_lines.sh --self-test  the check fails on a tree with an 801-line file and passes at 800
# Exit status: 0 every file within the limit; 1 a file over it (or a failed self-test); 2 usage.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
limit=800

check() {
  local root=$1 bad=0 file n
  for d in core sdk plugins; do
    [ -d "$root/$d" ] || { echo "file_lines: no folder $root/$d" >&2; return 2; }
  done
  while IFS= read -r -d '' file; do
    n=$(wc -l < "$file")
    if [ "$n" -gt "$limit" ]; then
      echo "${file#"$root"/}: $n lines, more than $limit"
      bad=1
    fi
  done < <(find "$root/core" "$root/sdk" "$root/plugins" -type f \
             \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) -print0)
  return $bad
}

case ${1:-} in
  --self-test)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/core/src/util" "$tmp/sdk/src" "$tmp/plugins/x"
    for i in $(seq 1 $limit); do echo "// $i"; done > "$tmp/sdk/src/at_limit.cpp"
    check "$tmp" > /dev/null || { echo "self-test: a file of exactly $limit lines was refused"; exit 1; }
    { cat "$tmp/sdk/src/at_limit.cpp"; echo "// one more"; } > "$tmp/plugins/x/over.hpp"
    if out=$(check "$tmp"); then
      echo "self-test: an $((limit + 1))-line file was not found"
      exit 1
    fi
    [ "$out" = "plugins/x/over.hpp: $((limit + 1)) lines, more than $limit" ] ||
      { echo "self-test: unexpected report: $out"; exit 1; }
    echo "self-test: an $((limit + 1))-line file is reported; $limit lines pass"
    ;;
  -*) echo "usage: file_lines.sh [ROOT] | --self-test" >&2; exit 2 ;;
  *)
    root=${1:-$here}
    if check "$root"; then
      echo "every source file of core/, sdk/ and plugins/ is at most $limit lines"
    else
      exit 1
    fi
    ;;
esac
