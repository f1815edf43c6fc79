#!/usr/bin/env bash
# run_genai_whisper.sh - ONNX Runtime GenAI's own generator runs mobius's default Whisper folder
# and gives the tokens of a plain ONNX Runtime loop over the same graphs
# (tests/runtime/genai_whisper.py, which writes the checkpoint).
#
#   MOBIUS_CLI=build/mobius [MOBIUS_GENAI_PYTHON=...] bash tests/runtime/run_genai_whisper.sh [--dtype f32|f16]
#
# Exit 0 pass, 1 fail, 77 (skipped) without onnxruntime_genai in the python (build/venv, made by
# scripts/setup.sh).
set -u
root=${MOBIUS_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cli=${MOBIUS_CLI:-}
py=${MOBIUS_GENAI_PYTHON:-$root/build/venv/bin/python}
[[ -n "$cli" && -x "$cli" ]] || { echo "run_genai_whisper: MOBIUS_CLI is not set; skipped"; exit 77; }
"$py" -c 'import onnxruntime_genai' 2>/dev/null || { echo "run_genai_whisper: no onnxruntime_genai in $py; skipped"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-genai-whisper-XXXXXX")
trap 'rm -rf "$work"' EXIT
export MOBIUS_PLUGIN_CACHE=${MOBIUS_PLUGIN_CACHE:-$work/plugin-scan.json}
"$py" "$root/tests/runtime/genai_whisper.py" "$cli" "$work" "$@"
