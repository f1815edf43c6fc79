#!/usr/bin/env bash
# run.sh - the Python package's tests (pytest), on the package that scripts/setup.sh builds from
# this tree as a wheel (meson-python, as `pip install .` builds it) and installs into build/venv.
#
#   MOBIUS_CLI=build/mobius bash tests/python/run.sh [test_build.py ...] [pytest options]
#
# MOBIUS_CLI is the CLI whose folders the package's must equal, byte for byte. Exit status:
# pytest's (0 every test passed).
set -u
root=${MOBIUS_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
py=${MOBIUS_PYTHON:-$root/build/venv/bin/python}
export MOBIUS_SOURCE_ROOT=$root
export MOBIUS_CLI=${MOBIUS_CLI:-$root/build/mobius}
"$py" -c 'import mobius, pytest' || {
  echo "FAIL the mobius package (or pytest) is not installed in $py: run scripts/setup.sh"
  exit 1
}
cd "$root/tests/python" && exec "$py" -m pytest -q -p no:cacheprovider "$@"
