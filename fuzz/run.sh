#!/bin/sh
# run.sh - builds one libFuzzer target under ASan/UBSan and fuzzes it for a number of seconds.
#
#   fuzz/run.sh <unpickler|torch_zip|safetensors|limits> [seconds=60]
#
# Seeds are (re)generated into fuzz/corpus/<target>/ (tiny, committed); inputs the fuzzer finds
# go to $MOBIUS_FUZZ_WORK/<target>/corpus (default /tmp/mobius-fuzz), crashes to .../crashes.
set -eu
target=${1:?usage: fuzz/run.sh <unpickler|torch_zip|safetensors|limits> [seconds]}
seconds=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=${MOBIUS_FUZZ_WORK:-/tmp/mobius-fuzz}/$target
golden=$root/tests/golden
case $target in
  unpickler|torch_zip|safetensors|limits) ;;
  *) echo "unknown target '$target'" >&2; exit 2 ;;
esac
mkdir -p "$work/corpus" "$work/crashes" "$work/bin"

flags="-std=c++20 -g -O1 -DONNX_ML=1 -I$root/core/src -I$root/core/include -I$root/sdk/include -I$root/tests"
clang++ $flags "$here/make_seeds.cpp" -o "$work/bin/make_seeds"
"$work/bin/make_seeds" "$here/corpus" "$golden" "$work/golden"
# Seeds from the golden checkpoints are used for this run only, not committed.
extra=""
if [ "$target" = unpickler ] && [ -d "$work/golden" ]; then extra="$work/golden"; fi
if [ "$target" = safetensors ] && [ -d "$golden" ]; then
  mkdir -p "$work/golden-st"
  find "$golden" -name '*.safetensors' -size -64k -exec cp {} "$work/golden-st/" \;
  extra="$work/golden-st"
fi

sources=""
for f in checkpoint/dtype util/untrusted checkpoint/checkpoint_files checkpoint/safetensors \
         checkpoint/zip_reader checkpoint/unpickler checkpoint/pickle_vocab checkpoint/pytorch_bin; do
  sources="$sources $root/core/src/$f.cpp"
done
# 64-byte gather windows instead of 16 MiB, so small inputs exercise the windowed reads.
clang++ $flags -DMOBIUS_GATHER_WINDOW_BYTES=64 -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=all $sources "$here/fuzz_$target.cpp" -lyaml-cpp -o "$work/bin/fuzz_$target"

cd "$work/crashes"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$work/bin/fuzz_$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/crashes/" \
  "$work/corpus" "$here/corpus/$target" $extra
