#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: unit and integration tests on the default
# build, then the whole suite again under ASan+UBSan. Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh default
# The host suites mostly wait on the hosts (about 1.8 of 2 cores busy with three side by side); the
# integration suites that check timing bounds run alone (RUN_SERIAL) whatever -j says.
ctest --preset default -j 3
if [ "${1:-}" != "--no-asan" ]; then
  bash scripts/build.sh asan
  asan_env=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
  env "${asan_env[@]}" ctest --preset asan -j 2 -E 'hosts\.|package\.deb|deploy\.'
  # The host suites differ in the host, not in sluice's code: the hook runs under ASan in the unit
  # and integration suites, the exec and gateway code in the integration suites. Under ASan the
  # host level gets one Claude Code class through the hook and exec (as 65534); `sluice serve` runs
  # under ASan in the integration suites. Running every host suite twice would take CI past its
  # time budget. The package is built from the default build only.
  (cd tests/hosts && env "${asan_env[@]}" SLUICE_BIN="$(cd ../.. && pwd)/build/asan/sluice" \
    /usr/bin/python3 -m unittest test_claude.ClaudeCurrentAsNobody)
fi
if [ "${1:-}" != "--no-asan" ]; then
  bash scripts/fuzz.sh "${SLUICE_FUZZ_SECONDS:-10}"
fi
