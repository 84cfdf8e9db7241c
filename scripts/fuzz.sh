#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for a bounded time on a copy of the
# committed seed corpus, as many at once as the machine has cores (each target is one process on
# one core). Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
seconds="${1:-60}"
bash scripts/install-deps.sh clang libclang-rt-14-dev
TARGET=fuzzers bash scripts/build.sh fuzz >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Runs one target in a directory of its own (its corpus and any failing input it writes); prints
# its summary in one piece; fails on a failing input.
run_one() {
  local corpus="$1" target="$2" dir="$work/$1" status=0 out
  mkdir -p "$dir/corpus" "$dir/found"
  out="$(cd "$dir/found" && "$root/build/fuzz/tests/fuzz/$target" -max_total_time="$seconds" -max_len=4096 \
      -print_final_stats=0 "$dir/corpus" "$root/tests/fuzz/corpus/$corpus" 2>&1)" || status=$?
  printf 'fuzz: %s for %ss\n%s\n' "$target" "$seconds" \
    "$(printf '%s\n' "$out" | grep -E "^Done|ERROR|SUMMARY|Test unit written" || true)"
  # libFuzzer's exit status says it too: a crash whose input was written elsewhere still fails.
  if [ "$status" != 0 ] || ls "$dir/found"/crash-* "$dir/found"/leak-* "$dir/found"/timeout-* >/dev/null 2>&1; then
    printf 'fuzz: %s found a failing input; see above\n%s\n' "$target" "$out" >&2
    return 1
  fi
}

slots="$(nproc)"
failed=0
pids=()
for pair in request_head:request_head_fuzz host_pattern:host_pattern_fuzz address:address_class_fuzz config:config_fuzz git:git_upload_pack_fuzz dns:dns_query_fuzz route_path:route_path_fuzz h2_translation:h2_translation_fuzz ssh_command:ssh_command_fuzz aws_sigv4:aws_sigv4_fuzz; do
  run_one "${pair%%:*}" "${pair##*:}" &
  pids+=("$!")
  if [ "${#pids[@]}" -ge "$slots" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
if [ "$failed" != 0 ]; then
  exit 1
fi
echo "fuzz: no crashes"
