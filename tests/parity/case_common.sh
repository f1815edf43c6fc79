# case_common.sh - sourced by the parity runners (run_case.sh, run_component.sh, run_padding.sh).
#
# resolve_case SCRIPT GOLDEN: with case_dir set to a folder or to a case name under tests/GOLDEN,
# checks MOBIUS_CLI, makes case_dir absolute, sets source_root (MOBIUS_SOURCE_ROOT, else this
# file's ../..) and work (a temporary folder removed on exit). Exits 2 when the case has no
# case.json, 77 (skipped) when onnxruntime-node is not installed.
resolve_case() {
  local script=$1 golden=$2
  : "${MOBIUS_CLI:?$script: set MOBIUS_CLI to the built mobius executable}"
  [ -x "$MOBIUS_CLI" ] || { echo "$script: MOBIUS_CLI is not an executable: $MOBIUS_CLI" >&2; exit 2; }
  source_root=${MOBIUS_SOURCE_ROOT:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"}
  if [ ! -d "$case_dir" ] && [ -d "$source_root/tests/$golden/$case_dir" ]; then
    case_dir="$source_root/tests/$golden/$case_dir"
  fi
  [ -f "$case_dir/case.json" ] || { echo "$script: no case.json in $case_dir" >&2; exit 2; }
  if [ ! -f "$source_root/node_modules/onnxruntime-node/package.json" ]; then
    echo "$script: SKIP: onnxruntime-node is not installed in $source_root/node_modules (scripts/setup.sh installs it)"
    exit 77
  fi
  case_dir=$(cd "$case_dir" && pwd)  # absolute: node runs from the source root
  work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-$script.XXXXXX")
  trap 'rm -rf "$work"' EXIT
}

# component_tolerance SCRIPT DTYPE USAGE: sets `tolerance`, the options of component_parity.mjs for
# a build of DTYPE: the case's own for f32; for f16 atol 2e-2, rtol 1e-2 (the cases' stated f16
# tolerance, at least 4x what an emulated float16 run of each graph needs). Exits 2 for another
# dtype.
component_tolerance() {
  case $2 in
    f32) tolerance=() ;;
    f16) tolerance=(--atol 2e-2 --rtol 1e-2) ;;
    *) echo "$1: unknown dtype '$2'; $3" >&2; exit 2 ;;
  esac
}
