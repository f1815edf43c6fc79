#!/usr/bin/env bash
# demo.sh - the main job end to end: set up, make a tiny Llama checkpoint, convert it to ONNX, generate with it.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== demo: installing what is missing and building mobius into ./build"
./scripts/setup.sh

# A random checkpoint made on the spot: the demo needs no network and no Hugging Face download.
ckpt=build/demo/tiny-llama
onnx_out=build/demo/tiny-llama-onnx
echo "== demo: writing a tiny random Llama checkpoint (config.json + model.safetensors) to $ckpt"
build/examples/tiny_llama/make_tiny_llama "$ckpt"

echo "== demo: converting it to ONNX: build/mobius build --model $ckpt $onnx_out"
build/mobius build --model "$ckpt" "$onnx_out"

echo "== demo: greedy generation in ONNX Runtime from the prompt ids 1,17,42"
node examples/generate.mjs --model "$onnx_out" --prompt 1,17,42 --max-new-tokens 8
