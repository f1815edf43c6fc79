#!/usr/bin/env bash
# setup.sh - installs what mobius needs on Debian 12 and builds it into ./build. Idempotent:
# packages already present are not reinstalled, an existing build is updated incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(meson ninja-build cmake pkg-config g++ libonnx-dev libprotobuf-dev protobuf-compiler
  libboost-dev libyaml-cpp-dev nlohmann-json3-dev doctest-dev libcli11-dev libcurl4-openssl-dev python3)
ORT_VERSION=1.30.0

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js may come from Debian or from another repository that bundles npm: check the commands.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ONNX Runtime for the tests and the demo; its CPU library ships inside the npm package, and the
# package's install script (a download) is not needed.
if [ ! -f node_modules/onnxruntime-node/package.json ] ||
   ! grep -q "\"version\": \"$ORT_VERSION\"" node_modules/onnxruntime-node/package.json; then
  echo "setup: installing onnxruntime-node@$ORT_VERSION"
  npm install --ignore-scripts --no-audit --no-fund --silent "onnxruntime-node@$ORT_VERSION" >/dev/null
fi

if [ ! -f build/build.ninja ]; then
  meson setup build
fi
ninja -C build
