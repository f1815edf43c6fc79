# greedy_cases.sh - sourced by run_tjs_greedy.sh and run_genai_greedy.sh: the golden cases that
# hold transformers' greedy tokens (greedy.input_ids / greedy.tokens).
#
#   greedy_cases ROOT [CASE...]   prints one case name per line: the given cases (every case of
#                                 ROOT/tests/golden when none is given) whose reference has them
greedy_cases() {
  local root=$1 c
  shift
  local cases=("$@")
  if [ ${#cases[@]} -eq 0 ]; then
    for c in "$root"/tests/golden/*/; do cases+=("$(basename "$c")"); done
  fi
  for c in "${cases[@]}"; do
    grep -q '"greedy.tokens"' <(head -c 4096 "$root/tests/golden/$c/reference.safetensors" 2>/dev/null) && echo "$c"
  done
  return 0
}
