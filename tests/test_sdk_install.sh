#!/usr/bin/env bash
# test_sdk_install.sh - the SDK as a product: install the build, build examples/custom_arch against the installed SDK alone, run its model.
#
#   test_sdk_install.sh BUILD_DIR SOURCE_ROOT
#
# Steps (each prints its elapsed seconds):
#   1. `meson install --no-rebuild --destdir STAGE` of BUILD_DIR: the staged tree is the install,
#      moved. Nothing is recompiled; the installed files must work from wherever they land.
#   2. the staged tree holds the CLI, libmobius, the SDK headers and libmobius_sdk.a, mobius-sdk.pc
#      and the four family plugins with their manifests.
#   3. the staged CLI, with no flag and no environment, loads libmobius and the plugins installed
#      beside it (never the build tree's) and lists their model types.
#   4. a copy of examples/custom_arch is configured with PKG_CONFIG_PATH (and
#      PKG_CONFIG_SYSROOT_DIR, the standard way to consume a staged .pc) as its only link to
#      mobius: no include path may point into the source or build tree.
#   5. the example installed into the SDK's default plugindir is listed without flags; installed
#      into a folder of its own, `--plugin-path FOLDER` lists it (and it overrides the default copy).
#   6. the example's generator writes a checkpoint; `mobius build --plugin-path FOLDER` builds it.
#   7. ONNX Runtime runs the model: logits [1, 5, vocab] and finite, present.<i>.key/value of the
#      right shape, and decoding the last token with the cache of the first four gives the same
#      logits as the whole prompt at once (the custom layer honours the cache contract).
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: test_sdk_install.sh BUILD_DIR SOURCE_ROOT" >&2; exit 2; }
build_dir=$(cd "$1" && pwd)
source_root=$(cd "$2" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/mobius-sdk-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
step() { echo "== [$((SECONDS - start)) s] $*"; }
fail() { echo "test_sdk_install: FAIL: $*" >&2; exit 1; }
need() { for f; do [ -e "$f" ] || fail "missing: $f"; done; }

# The host must find everything from the install alone: no plugin path or cached probe from the
# caller's environment, and no scan cache shared with the build tree's tests.
unset MOBIUS_PLUGIN_PATH LD_LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
export MOBIUS_PLUGIN_CACHE="$work/plugin-scan.json"

# The install locations BUILD_DIR was configured with, one per line.
{
  read -r prefix
  read -r bindir
  read -r libdir
  read -r includedir
} < <(meson introspect "$build_dir" --buildoptions | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print("\n".join(opts[k] for k in ("prefix", "bindir", "libdir", "includedir")))')
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
case $bindir in /*) ;; *) bindir=$prefix/$bindir ;; esac
case $includedir in /*) ;; *) includedir=$prefix/$includedir ;; esac

# ---- 1. install -------------------------------------------------------------------------------
stage=$work/stage
step "meson install -C $build_dir --no-rebuild --destdir $stage"
# --no-rebuild: a rebuild here would relink libmobius under the tests running beside this one;
# meson test has already built what the tests depend on (and `ninja -C build` everything else).
meson install -C "$build_dir" --no-rebuild --destdir "$stage" --quiet >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "meson install failed"; }
bin=$stage$bindir
lib=$stage$libdir
inc=$stage$includedir
plugins=$lib/mobius/plugins

# ---- 2. what the install holds ----------------------------------------------------------------
step "installed files"
need "$bin/mobius" "$lib/libmobius.so" "$lib/libmobius_sdk.a" "$lib/pkgconfig/mobius-sdk.pc" \
  "$inc/mobius/plugin.h" "$inc/mobius/half.h" "$inc/mobius/sdk/error.hpp" "$inc/mobius/sdk/plugin.hpp" \
  "$inc/mobius/sdk/nn.hpp" "$inc/mobius/sdk/module_build.hpp" \
  "$inc/mobius/build.hpp" "$inc/mobius/error.hpp" "$inc/mobius/registry.hpp"
for family in deepseek gemma llama qwen35; do
  need "$plugins/$family/libmobius_$family.so" "$plugins/$family/plugin.yaml"
done
grep -q '^plugindir=' "$lib/pkgconfig/mobius-sdk.pc" || fail "mobius-sdk.pc has no plugindir variable"

# ---- 3. the installed CLI on its own ----------------------------------------------------------
step "installed CLI: libmobius and the installed plugins, without flags"
resolved=$(ldd "$bin/mobius" | awk '/libmobius\.so/ {print $3}')
[ -n "$resolved" ] || { ldd "$bin/mobius"; fail "the installed CLI does not resolve libmobius"; }
[ "$(realpath "$resolved")" = "$(realpath "$lib/libmobius.so")" ] ||
  fail "the installed CLI loads $resolved, not the installed libmobius ($lib)"
"$bin/mobius" list >"$work/list.txt" 2>&1 || { cat "$work/list.txt"; fail "mobius list failed"; }
for t in llama qwen3 gemma3_text qwen3_5_text deepseek_v3; do
  grep -q "^$t " "$work/list.txt" || { cat "$work/list.txt"; fail "installed 'mobius list' does not show $t"; }
done
"$bin/mobius" plugins --json >"$work/plugins.json"
python3 - "$work/plugins.json" "$plugins" <<'EOF' || fail "the installed CLI did not load its plugins from the install"
import json, os, sys
records, root = json.load(open(sys.argv[1])), os.path.realpath(sys.argv[2])
loaded = [r for r in records if r["status"] == "loaded"]
names = sorted(r["name"] for r in loaded)
print("loaded:", ", ".join(names))
assert {"deepseek", "gemma", "llama", "qwen35"} <= set(names), names
for r in loaded:
    if r["name"] in ("deepseek", "gemma", "llama", "qwen35"):
        assert os.path.realpath(r["library"]).startswith(root + "/"), r["library"]
EOF

# ---- 4. the example, against the installed SDK alone ------------------------------------------
step "configure and build examples/custom_arch against mobius-sdk.pc"
cp -r "$source_root/examples/custom_arch" "$work/custom_arch"
rm -rf "$work/custom_arch/build"  # a developer's in-folder build dir is not part of the source
export PKG_CONFIG_PATH="$lib/pkgconfig"
# The .pc names the final prefix; the sysroot maps it (and its plugindir) into the staged tree.
export PKG_CONFIG_SYSROOT_DIR="$stage"
meson setup "$work/ex" "$work/custom_arch" >"$work/ex-setup.log" 2>&1 ||
  { cat "$work/ex-setup.log"; fail "meson setup of the example failed"; }
ninja -C "$work/ex" >"$work/ex-build.log" 2>&1 || { cat "$work/ex-build.log"; fail "the example does not build"; }
if grep -E -e "-I *($source_root|$build_dir)" "$work/ex/compile_commands.json" >/dev/null; then
  fail "the example's compile commands reach into the source or build tree"
fi
grep -q -- "-I$inc" "$work/ex/compile_commands.json" || fail "the example does not use the installed headers"

step "the example installed into the SDK's plugindir is found by default"
meson install -C "$work/ex" --no-rebuild --quiet >/dev/null
need "$plugins/my_new_arch/libmy_new_arch.so" "$plugins/my_new_arch/plugin.yaml"
"$bin/mobius" list >"$work/list2.txt" 2>&1
grep -q "^my_new_arch .*my_new_arch 0.1.0 (example vendor)" "$work/list2.txt" ||
  { cat "$work/list2.txt"; fail "'mobius list' does not show my_new_arch from the default plugins folder"; }

# ---- 5. a plugin folder of its own ------------------------------------------------------------
step "the example in a folder of its own: mobius list --plugin-path"
folder=$work/folder
meson configure "$work/ex" -Dplugin_dir="$folder" >/dev/null
meson install -C "$work/ex" --quiet >/dev/null
need "$folder/libmy_new_arch.so" "$folder/plugin.yaml"
"$bin/mobius" list --plugin-path "$folder" >"$work/list3.txt" 2>&1
cat "$work/list3.txt"
grep -q "^my_new_arch .*my_new_arch 0.1.0 (example vendor)" "$work/list3.txt" ||
  fail "'mobius list --plugin-path' does not show my_new_arch"
# The same type is also in the default folder: --plugin-path wins and says what it overrides.
grep "^my_new_arch " "$work/list3.txt" | grep -q "overrides my_new_arch" ||
  fail "--plugin-path's my_new_arch does not override the default folder's"

# ---- 6. checkpoint and build ------------------------------------------------------------------
step "generate the example checkpoint and build it"
"$work/ex/make_my_new_arch_checkpoint" "$work/ckpt"
"$bin/mobius" build -q --plugin-path "$folder" --model "$work/ckpt" "$work/out" ||
  fail "mobius build of the example checkpoint failed"
need "$work/out/model.onnx" "$work/out/model.onnx.data"

# ---- 7. ONNX Runtime --------------------------------------------------------------------------
step "run the model in ONNX Runtime"
export NODE_PATH="$source_root/node_modules${NODE_PATH:+:$NODE_PATH}"
node - "$source_root/tests/ort_run.mjs" "$work/out/model.onnx" "$work/ckpt/config.json" "$work" <<'EOF'
// The whole prompt at once, then the same prompt as 4 tokens + 1 token over the cache.
const { spawnSync } = require('child_process');
const fs = require('fs');
const [ortRun, model, configFile, work] = process.argv.slice(2);
const cfg = JSON.parse(fs.readFileSync(configFile, 'utf8'));
const L = cfg.num_hidden_layers, KV = cfg.num_key_value_heads, HD = cfg.head_dim, V = cfg.vocab_size;
const die = (m) => { console.error('test_sdk_install: FAIL: ' + m); process.exit(1); };
let runs = 0;
function run(tokens, past, pastLen) {
  const n = tokens.length, total = pastLen + n;
  const feeds = {
    input_ids: { type: 'int64', dims: [1, n], data: tokens },
    attention_mask: { type: 'int64', dims: [1, total], data: Array(total).fill(1) },
    position_ids: { type: 'int64', dims: [1, n], data: tokens.map((_, i) => pastLen + i) },
  };
  for (let i = 0; i < L; ++i)
    for (const k of ['key', 'value']) {
      const p = past ? past[`present.${i}.${k}`] : { dims: [1, KV, 0, HD], data: [] };
      feeds[`past_key_values.${i}.${k}`] = { type: 'float32', dims: p.dims, data: p.data };
    }
  const file = `${work}/inputs${runs++}.json`;
  fs.writeFileSync(file, JSON.stringify(feeds));
  const r = spawnSync('node', [ortRun, model, file], { encoding: 'utf8', maxBuffer: 1 << 28 });
  if (r.status !== 0) die(`ort_run exited with ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}
const prompt = [1, 17, 42, 99, 200];
const full = run(prompt, null, 0);
const shape = (t) => JSON.stringify(t.dims);
if (shape(full.logits) !== JSON.stringify([1, 5, V])) die(`logits shape ${shape(full.logits)}, expected [1,5,${V}]`);
if (!full.logits.data.every(Number.isFinite)) die('logits hold non-finite values');
if (new Set(full.logits.data.map((x) => x.toFixed(6))).size < 10) die('logits are (nearly) constant');
for (let i = 0; i < L; ++i)
  for (const k of ['key', 'value']) {
    const t = full[`present.${i}.${k}`];
    if (!t || shape(t) !== JSON.stringify([1, KV, 5, HD])) die(`present.${i}.${k} shape ${t && shape(t)}`);
  }
const head = run(prompt.slice(0, 4), null, 0);
const step = run(prompt.slice(4), head, 4);
if (shape(step.logits) !== JSON.stringify([1, 1, V])) die(`cached step logits shape ${shape(step.logits)}`);
let maxDiff = 0;
for (let j = 0; j < V; ++j) maxDiff = Math.max(maxDiff, Math.abs(step.logits.data[j] - full.logits.data[4 * V + j]));
if (!(maxDiff < 1e-3)) die(`cached decoding differs from the full prompt by ${maxDiff}`);
console.log(`logits [1,5,${V}] finite; cached step matches the full prompt (max |diff| ${maxDiff.toExponential(2)})`);
EOF
step "done"
