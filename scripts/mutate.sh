#!/usr/bin/env bash
# mutate.sh - does the test suite notice when the product breaks? Each mutation below is a small
# deliberate break (a sign in an op, a swapped pair of weights, a wrong genai_config field, a
# harness that compares less, a check or bound switched off). Each is applied in turn to a
# scratch copy of the sources (a git worktree of HEAD in build-mutate/src, built once into
# build-mutate/build, then incrementally), the tests that cover it are run, and the copy is put
# back. A mutation the tests pass with is "missed": the suite cannot tell that break from a
# working product. Not part of the test suite (a full build, then a build and some tests per
# mutation); run it after changing tests, and add a mutation for each new reader and task.
#
#   scripts/mutate.sh            every mutation
#   scripts/mutate.sh NAME...    those named
#   scripts/mutate.sh --list     their names, files and tests
#
# Last line: "mutations: N caught, N missed"; exit status 1 when any was missed or could not be
# applied (its pattern no longer matches the source: the list needs updating).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$root/build-mutate

# name ~ file ~ perl substitution (applied with -0pi, so it may span lines) ~ tests (meson test
# names, ';'-separated)
mutations=(
  # The quantized expert banks (int4 and int8 share the path): the int4 tests must catch it on
  # their own, as the int8 ones do.
  'moe-int4-gate-up~sdk/src/moe.cpp~s/(sources\.push_back\(x \+ names\.)gate( \+ "\.weight"\);\s*sources\.push_back\(x \+ names\.)up/${1}up${2}gate/~quant;parity deepseek-v3-tiny int4;parity qwen3-moe-tiny int4;parity qwen3-moe-tiny int4-asym;moe_families'
  'genai-heads~sdk/src/genai_config.cpp~s/\{"num_attention_heads", f\.num_attention_heads\}/{"num_attention_heads", f.num_key_value_heads}/~genai configs'
  'parity-one-logit~tests/parity/parity.mjs~s/for \(let v = 0; v < vocab; \+\+v\) \{(\s*const x = g)/for (let v = 0; v < 1; ++v) {$1/~parity harness'
  'rope-sign~sdk/src/layers.cpp~s/Concat\(\{Neg\(x2\), x1\}, -1\)/Concat({x2, Neg(x1)}, -1)/~parity llama-tiny standard'
  'rmsnorm-eps~sdk/src/layers.cpp~s/Sqrt\(Add\(var, Scalar\(x\.graph\(\), DType::Float, eps\)\)\)/Sqrt(Add(var, Scalar(x.graph(), DType::Float, eps * 1000)))/~parity llama-tiny standard'
  'hub-unchecked-blob~core/src/hub/hub_download.cpp~s/if \(got != m\.etag\) \{/if (false) {/~hub;hub_hostile'
  'hub-etag-any~core/src/hub/hub.cpp~s/if \(m\.lfs \? !is_sha256_hex\(m\.etag\) : !is_sha1_hex\(m\.etag\)\)/if (false)/~hub;hub_hostile'
  'hub-redirect-anywhere~core/src/hub/net_policy.hpp~s/return static_cast<int>\(target\) <= static_cast<int>\(context\);/return true;/~hub redirects netns;hub_hostile'
  'hub-small-unbounded~core/src/util/untrusted.cpp~s/return kConfigLimits\.max_bytes;\n\}/return uint64_t{1} << 40;\n}/~hub_hostile'
  'hub-no-deadline~core/src/hub/http.cpp~s/if \(seconds_since\(t->start\) > r\.header_timeout_s\)/if (false)/~hub_hostile'
  'tjs-layout~core/src/save/layout.cpp~s/l\.graph = "onnx\/model" \+ suffix \+ "\.onnx";/l.graph = "model" + suffix + ".onnx";/~transformers.js llama-tiny;runtime_layout'
  'moe-asym-zero-points~sdk/src/moe.cpp~s/if \(q\.zero_points\.valid\(\)\) inputs/if (false) inputs/~quant'
  'quant-scale-sign~core/src/weights/weight_plan.cpp~s/p\.scale = -m \/ static_cast<float>/p.scale = m \/ static_cast<float>/~quant'
  'json-depth-off-by-one~core/src/util/untrusted.cpp~s/depth >= limits\.max_depth\)/depth > limits.max_depth)/~untrusted'
  'safetensors-overlap-off-by-one~core/src/checkpoint/safetensors.cpp~s/if \(e->begin < covered\) \{/if (e->begin + 1 < covered) {/~safetensors'
  'safetensors-gap-off-by-one~core/src/checkpoint/safetensors.cpp~s/if \(e->begin > covered\) \{/if (e->begin > covered + 1) {/~safetensors'
  'summary-skip-as-pass~scripts/count_results.mjs~s/if \(r === "OK" \|\| r === "EXPECTEDFAIL"\) passed\+\+;/if (r === "OK" || r === "EXPECTEDFAIL" || r === "SKIP") passed++;/~summary count'
  'summary-stale-log~scripts/test.sh~s/rm -f "\$log"\n//~summary count'

)

if [ "${1:-}" = "--list" ]; then
  for m in "${mutations[@]}"; do
    IFS='~' read -r name file _ tests <<<"$m"
    printf '%-22s %-28s %s\n' "$name" "$file" "$tests"
  done
  exit 0
fi

selected=("$@")
want() {
  [ ${#selected[@]} -eq 0 ] && return 0
  local s
  for s in "${selected[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

# The scratch copy: HEAD's sources, this checkout's node_modules, a build of its own.
if [ ! -d "$scratch/src/.git" ] && [ ! -f "$scratch/src/.git" ]; then
  mkdir -p "$scratch"
  git -C "$root" worktree add --detach "$scratch/src" HEAD >/dev/null || { echo "mutate: cannot make a worktree"; exit 2; }
else
  git -C "$scratch/src" checkout -q --detach "$(git -C "$root" rev-parse HEAD)" && git -C "$scratch/src" checkout -q -- .
fi
[ -e "$scratch/src/node_modules" ] || ln -s "$root/node_modules" "$scratch/src/node_modules"
if [ ! -f "$scratch/build/build.ninja" ]; then
  meson setup "$scratch/build" "$scratch/src" >/dev/null || { echo "mutate: meson setup failed"; exit 2; }
fi
echo "mutate: building the unmutated copy"
ninja -C "$scratch/build" >/dev/null || { echo "mutate: the unmutated copy does not build"; exit 2; }

caught=0; missed=0; broken=0
missed_names=()
for m in "${mutations[@]}"; do
  IFS='~' read -r name file expr tests <<<"$m"
  want "$name" || continue
  target=$scratch/src/$file
  before=$(sha256sum "$target")
  perl -0pi -e "$expr" "$target"
  if [ "$(sha256sum "$target")" = "$before" ]; then
    echo "mutate: $name: the pattern no longer matches $file (update the list)"
    broken=$((broken + 1))
    continue
  fi
  IFS=';' read -r -a names <<<"$tests"
  if ! ninja -C "$scratch/build" >"$scratch/$name.build.log" 2>&1; then
    echo "caught  $name: the mutated copy does not build"
    caught=$((caught + 1))
  elif meson test -C "$scratch/build" --no-rebuild --num-processes 2 "${names[@]}" >"$scratch/$name.test.log" 2>&1; then
    echo "MISSED  $name ($file): ${tests//;/, } passed"
    missed=$((missed + 1))
    missed_names+=("$name")
  else
    echo "caught  $name: $(grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT)' "$scratch/$name.test.log" | sed 's/  */ /g' | head -3 | tr '\n' ';')"
    caught=$((caught + 1))
  fi
  git -C "$scratch/src" checkout -q -- "$file"
done
ninja -C "$scratch/build" >/dev/null 2>&1  # back to the unmutated build
[ $broken -eq 0 ] || echo "mutate: $broken mutation(s) could not be applied"
echo "mutations: $caught caught, $missed missed${missed_names:+ (${missed_names[*]})}"
[ $missed -eq 0 ] && [ $broken -eq 0 ]
