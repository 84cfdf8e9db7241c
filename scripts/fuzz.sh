#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for a bounded time on a copy of the
# committed seed corpus. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
bash scripts/install-deps.sh clang libclang-rt-14-dev
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target fuzzers
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for pair in request_head:request_head_fuzz host_pattern:host_pattern_fuzz address:address_class_fuzz config:config_fuzz git:git_upload_pack_fuzz dns:dns_query_fuzz route_path:route_path_fuzz h2_translation:h2_translation_fuzz ssh_command:ssh_command_fuzz aws_sigv4:aws_sigv4_fuzz; do
  corpus="${pair%%:*}"; target="${pair##*:}"
  mkdir -p "$work/$corpus"
  echo "fuzz: $target for ${seconds}s"
  status=0
  out="$(cd "$work" && "$OLDPWD/build/fuzz/tests/fuzz/$target" -max_total_time="$seconds" -max_len=4096 \
      -print_final_stats=0 "$work/$corpus" "$OLDPWD/tests/fuzz/corpus/$corpus" 2>&1)" || status=$?
  printf '%s\n' "$out" | grep -E "^Done|ERROR|SUMMARY|Test unit written" || true
  # libFuzzer's exit status says it too: a crash whose input was written elsewhere still fails.
  if [ "$status" != 0 ] || ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* >/dev/null 2>&1; then
    echo "fuzz: $target found a failing input; see above" >&2
    exit 1
  fi
done
echo "fuzz: no crashes"
