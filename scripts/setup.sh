#!/usr/bin/env bash
# setup.sh - installs what mobius needs on Debian 12 and builds it into ./build. Idempotent:
# packages already present are not reinstalled, an existing build is updated incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(meson ninja-build cmake pkg-config g++ libonnx-dev libprotobuf-dev protobuf-compiler
  libboost-dev libyaml-cpp-dev nlohmann-json3-dev doctest-dev libcli11-dev libcurl4-openssl-dev libssl-dev
  python3 python3-venv python3-dev chromium)

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

# The tests' JavaScript packages, pinned in package.json and package-lock.json: ONNX Runtime
# (its CPU library ships inside the npm package), transformers.js and real tokenizers for the
# runtime tests, and puppeteer-core, which drives the chromium package for the browser test (it
# downloads no browser of its own). Install scripts are not run (onnxruntime-node's would try a
# download).
if ! node -e '
  const deps = require("./package.json").dependencies;
  for (const [name, version] of Object.entries(deps)) {
    const p = require("./node_modules/" + name + "/package.json");
    if (p.version !== version) process.exit(1);
  }' >/dev/null 2>&1; then
  echo "setup: installing the test packages (package-lock.json)"
  npm ci --ignore-scripts --no-audit --no-fund --silent >/dev/null
fi

if [ ! -f build/build.ninja ]; then
  meson setup build
fi
ninja -C build

# The tests' Python packages, pinned in tests/runtime/requirements.txt (ONNX Runtime GenAI) and
# tests/python/requirements.txt (the Python package's build tools, pytest), in a virtual
# environment inside the build folder.
for req in tests/runtime/requirements.txt tests/python/requirements.txt; do
  if ! build/venv/bin/python - "$req" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, want = line.split("==")
        if version(name) != want:
            sys.exit(1)
PY
  then
    echo "setup: installing the test packages ($req) into build/venv"
    [ -x build/venv/bin/python ] || python3 -m venv build/venv
    build/venv/bin/pip install -q --disable-pip-version-check -r "$req"
  fi
done

# The Python package, built from the tree as `pip install .` builds it (meson-python, in
# build/python-build, incrementally) and installed into build/venv for tests/python.
rm -rf build/wheel
build/venv/bin/pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -w build/wheel -Cbuild-dir="$PWD/build/python-build" . >build/wheel.log 2>&1 || {
  cat build/wheel.log >&2
  echo "setup: building the Python package failed (log above)" >&2
  exit 1
}
build/venv/bin/pip install -q --disable-pip-version-check --no-deps --force-reinstall build/wheel/mobius-*.whl
