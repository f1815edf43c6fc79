#!/usr/bin/env bash
# hub_redirect_netns.sh - the redirect policy end to end, inside a network namespace of its own
# (nothing in it reaches outside): a hub on a public address (203.0.113.10, TEST-NET-3) whose CDN
# is another public host follows its redirects; redirects to the private network, link-local,
# unique-local, loopback and unspecified addresses, in every spelling and through a name that
# resolves there (an /etc/hosts of the namespace), are refused before anything is asked of them:
# the trap server on 10.77.0.1 sees no request. Skipped (77) where no namespace can be made.
set -uo pipefail
if [ "${1:-}" != "--inside" ]; then
  if ! unshare -rnm true 2>/dev/null; then
    echo "skipped: cannot create a network namespace here (unshare -rnm failed)"
    exit 77
  fi
  exec unshare -rnm bash "$0" --inside
fi

set -e
work=$(mktemp -d)
server=""; sleeper=""
trap 'kill $server $sleeper 2>/dev/null; rm -rf "$work"' EXIT
ip link set lo up
ip addr add 203.0.113.10/32 dev lo
ip addr add 203.0.113.11/32 dev lo
ip addr add 10.77.0.1/32 dev lo
ip -6 addr add fd77::1/128 dev lo nodad
printf '127.0.0.1 localhost\n10.77.0.1 internal.test\n203.0.113.11 cdn.test\n' > "$work/hosts"
mount --bind "$work/hosts" /etc/hosts

root="$MOBIUS_SOURCE_ROOT"
mkdir -p "$work/repo"
cp "$root/tests/golden/llama-tiny/config.json" "$root/tests/golden/llama-tiny/model.safetensors" "$work/repo/"

# Where each hostile repository sends model.safetensors; dec and oct spell 10.77.0.1.
refused=(
  "private|http://10.77.0.1:{trapPort}/blobs/{sha256}"
  "mapped|http://[::ffff:10.77.0.1]:{trapPort}/blobs/{sha256}"
  "hex|http://0x0a4d0001:{trapPort}/blobs/{sha256}"
  "dec|http://172818433:{trapPort}/blobs/{sha256}"
  "oct|http://012.0115.0.1:{trapPort}/blobs/{sha256}"
  "short|http://10.77.1:{trapPort}/blobs/{sha256}"
  "name|http://internal.test:{trapPort}/blobs/{sha256}"
  "loopback|http://127.0.0.1:{trapPort}/blobs/{sha256}"
  "unspecified|http://0.0.0.0:{trapPort}/blobs/{sha256}"
  "linklocal|http://169.254.169.254/latest/meta-data/"
  "ula|http://[fd77::1]:{trapPort}/blobs/{sha256}"
)
node -e '
const [work, ...refused] = process.argv.slice(1);
const repos = {"org/public": {dir: work + "/repo"},
               "org/public-name": {dir: work + "/repo", hostile: {kind: "redirect-to", location: "http://cdn.test:{cdnPort}/blobs/{sha256}?repo=org%2Fpublic-name"}}};
for (const r of refused) {
  const [name, location] = r.split("|");
  repos["org/" + name] = {dir: work + "/repo", hostile: {kind: "redirect-to", location}};
}
require("fs").writeFileSync(work + "/config.json", JSON.stringify({repos, host: "203.0.113.10", cdnHost: "203.0.113.11", trapHost: "10.77.0.1"}));
' "$work" "${refused[@]}"
[ "$(printf '%d' $(( (10<<24) + (77<<16) + 1 )))" = 172818433 ]  # the decimal spelling above

exec 3< <(exec sleep 3600 </dev/null 2>/dev/null)  # the server's stdin: it stops when this closes
sleeper=$!
node "$root/tests/hub_server.mjs" "$work/config.json" <&3 > "$work/server.out" &
server=$!
for _ in $(seq 100); do [ -s "$work/server.out" ] && break; sleep 0.1; done
port=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8").split("\n")[0]).port)' "$work/server.out")
endpoint="http://203.0.113.10:$port"

passed=0; failed=0
check() { if eval "$2"; then passed=$((passed+1)); else echo "FAIL: $1"; failed=$((failed+1)); fi; }

for repo in public public-name; do
  out=$(env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u ALL_PROXY -u all_proxy \
        HF_ENDPOINT="$endpoint" HF_HOME="$work/hf-$repo" NO_PROXY='*' "$MOBIUS_CLI" download -q "org/$repo" 2>&1) && rc=0 || rc=$?
  check "org/$repo (a public CDN) downloads: $out" '[ $rc -eq 0 ]'
done
for r in "${refused[@]}"; do
  name=${r%%|*}
  out=$(env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u ALL_PROXY -u all_proxy \
        HF_ENDPOINT="$endpoint" HF_HOME="$work/hf-$name" NO_PROXY='*' "$MOBIUS_CLI" download -q "org/$name" 2>&1) && rc=0 || rc=$?
  echo "org/$name: $out"
  check "org/$name is refused (rc $rc): $out" '[ $rc -ne 0 ] && [[ "$out" == *"model.safetensors"* ]] && [[ "$out" == *"refused"* ]]'
  check "org/$name: one line: $out" '[ "$(printf "%s\n" "$out" | wc -l)" -eq 1 ]'
  check "org/$name: nothing stored" '! ls "$work/hf-$name/hub/models--org--$name/blobs/" 2>/dev/null | grep -q "^[0-9a-f]\{64\}"'
done
log=$(node -e 'fetch(process.argv[1] + "/_control/log").then(r => r.text()).then(t => console.log(t))' "$endpoint")
traps=$(node -e 'console.log(JSON.parse(process.argv[1]).filter(e => e.server === "trap").length)' "$log")
check "the private network saw no request ($traps)" '[ "$traps" -eq 0 ]'
echo "$passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
