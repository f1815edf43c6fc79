# peers-venv.sh - sourced by bench/peers.sh and bench/decode.sh: the Python venvs of the converters
# mobius is compared with, each installed from its pinned requirements file when it is missing or
# the file changed since (a stamp in the venv), from PyPI with pip (torch is a large download).
#   peers_venv VAR DIR REQUIREMENTS [OVERRIDE]
#     sets VAR to the venv's folder: OVERRIDE when given (an existing venv, used as it is), else DIR,
#     created with $PEERS_PYTHON (default python3) and installed when needed.
peers_venv() {
  local var=$1 dir=$2 req=$3 override=${4:-}
  if [ -n "$override" ]; then
    [ -x "$override/bin/python" ] || { echo "peers-venv: $override/bin/python missing" >&2; return 2; }
    printf -v "$var" '%s' "$override"
    return 0
  fi
  local want
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ ! -x "$dir/bin/python" ] || [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
    echo "peers-venv: installing $req into $dir" >&2
    rm -rf "$dir"
    "${PEERS_PYTHON:-python3}" -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip >&2
    "$dir/bin/pip" install -q -r "$req" >&2
    echo "$want" > "$dir/.requirements.sha256"
  fi
  printf -v "$var" '%s' "$dir"
}
