#!/usr/bin/env bash
# include_graph.sh - the host's dependency direction (core/src/README.md), checked from the
# sources: every `#include "folder/file"` of a file in core/src/<folder>/ must name a folder that
# <folder> may include (and the public headers of the hub, the registry and the build are not
# included by the readers, util/ or the weight plan), and the readers (checkpoint/), the hub
# (hub/), util/ and the weight plan (weights/) include no ONNX header. Prints each forbidden edge ("<file>: includes <header> (<from> may not include <to>)").
#
#   include_graph.sh [SRC_DIR]      default: core/src of this project
#   include_graph.sh --self-test    the check fails on a tree with a forbidden edge added
# Exit status: 0 no forbidden edge; 1 forbidden edges (or a self-test that found none); 2 usage.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

# The folders each folder may include besides itself.
allowed() {
  case $1 in
    util) echo "" ;;
    checkpoint) echo "util" ;;
    hub) echo "util checkpoint" ;;
    weights) echo "util checkpoint" ;;
    plugins) echo "util checkpoint weights save" ;;
    save) echo "util checkpoint weights plugins" ;;
    info) echo "util checkpoint save plugins" ;;
    pipeline) echo "util checkpoint hub weights plugins save info" ;;
    *) echo "?" ;;
  esac
}

check() {
  local src=$1 bad=0 file from line to ok a
  [ -d "$src" ] || { echo "include_graph: no folder $src" >&2; return 2; }
  while IFS= read -r file; do
    from=$(basename "$(dirname "$file")")
    [ "$(allowed "$from")" != "?" ] || { echo "$file: in a folder the rules do not name ($from)"; bad=1; continue; }
    while IFS= read -r line; do
      to=${line%%/*}
      [ "$to" = "$from" ] && continue
      case $to in
        mobius)
          # The host's public headers: the shared ones (error.hpp, plugin.h, half.h, utf8.h) for
          # every part; the hub's, the registry's and the build's not for the readers and util/.
          case "$from:$line" in
            util:mobius/hub.hpp|util:mobius/plugins.hpp|util:mobius/registry.hpp|util:mobius/build.hpp|util:mobius/pipeline.hpp|\
            checkpoint:mobius/hub.hpp|checkpoint:mobius/plugins.hpp|checkpoint:mobius/registry.hpp|checkpoint:mobius/build.hpp|checkpoint:mobius/pipeline.hpp|\
            weights:mobius/hub.hpp|weights:mobius/plugins.hpp|weights:mobius/registry.hpp|weights:mobius/build.hpp|weights:mobius/pipeline.hpp|\
            hub:mobius/plugins.hpp|hub:mobius/registry.hpp|hub:mobius/build.hpp|hub:mobius/pipeline.hpp)
              echo "$file: includes \"$line\" (the public header of a part $from may not include)"
              bad=1 ;;
          esac
          continue ;;
        onnx) continue ;;  # the ONNX rule below
      esac
      ok=0
      for a in $(allowed "$from"); do [ "$a" = "$to" ] && ok=1; done
      if [ $ok -eq 0 ]; then
        echo "$file: includes \"$line\" ($from may not include $to)"
        bad=1
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\/[^"]*\)".*/\1/p' "$file")
    case $from in
      util|checkpoint|hub|weights)
        if grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]onnx/' "$file"; then
          echo "$file: includes an ONNX header ($from knows nothing of ONNX)"
          bad=1
        fi ;;
    esac
  done < <(find "$src" -mindepth 2 -maxdepth 2 -type f \( -name '*.cpp' -o -name '*.hpp' \) | sort)
  return $bad
}

if [ "${1:-}" = "--self-test" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-include-graph.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  cp -r "$here/core/src" "$work/src"
  check "$work/src" > /dev/null || { echo "include_graph: FAIL: the project's own tree has forbidden edges"; exit 1; }
  for edit in 'checkpoint/checkpoint.cpp~#include "hub/hub.hpp"' 'util/progress.cpp~#include "checkpoint/checkpoint.hpp"' \
              'hub/http.cpp~#include <onnx/onnx_pb.h>' 'weights/weight_plan.cpp~#include "plugins/context.hpp"'; do
    rm -rf "$work/t" && cp -r "$work/src" "$work/t"
    printf '%s\n' "${edit#*~}" >> "$work/t/${edit%%~*}"
    if out=$(check "$work/t"); then
      echo "include_graph: FAIL: adding ${edit#*~} to ${edit%%~*} went unnoticed"; exit 1
    fi
    echo "caught: $out"
  done
  echo "include_graph: self-test passed"
  exit 0
fi
[ $# -le 1 ] || { echo "usage: include_graph.sh [SRC_DIR] | --self-test" >&2; exit 2; }
if check "${1:-$here/core/src}"; then
  echo "include_graph: no forbidden edge"
else
  exit 1
fi
