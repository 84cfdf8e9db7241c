#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test: the unit and integration suites, the agent
# hosts, the package and deploy suites on the default build; the unit tests, every integration suite
# and one Claude Code class again under ASan+UBSan; then each fuzz target for a bounded time.
# Usage: scripts/test.sh [--no-asan]
# Both builds' suites run in one ctest run (tests/CMakeLists.txt says how they share the machine),
# and the run ends with where its time went (scripts/test-times.py).
set -euo pipefail
cd "$(dirname "$0")/.."
asan=1
[ "${1:-}" = "--no-asan" ] && asan=0
times="$PWD/build/test-times"
mkdir -p "$times"
: > "$times/phases"
phase() { # phase NAME CMD...: runs CMD, appends "NAME START END" to the phase file, returns CMD's status
  local name="$1" start rc=0
  shift
  start=$(date +%s)
  "$@" || rc=$?
  echo "$name $start $(date +%s)" >> "$times/phases"
  return "$rc"
}
extra=()
[ "$asan" = 1 ] && extra=(clang libclang-rt-14-dev) # the fuzz targets' compiler and runtime
phase install bash scripts/install-deps.sh "${extra[@]}"
if [ "$asan" = 1 ]; then
  phase build-asan bash scripts/build.sh asan
  phase build bash scripts/build.sh default -DSLUICE_ASAN_DIR="$PWD/build/asan"
  phase build-fuzz env TARGET=fuzzers bash scripts/build.sh fuzz
else
  phase build bash scripts/build.sh default -DSLUICE_ASAN_DIR=
fi
status=0
# Three slots on two cores: the host and ASan suites keep both cores busy; more slots only add
# contention. The JUnit file keeps each suite's whole output (its "Ran N tests" line is counted).
phase tests ctest --preset default -j 3 --output-junit "$times/ctest.xml" \
  --test-output-size-passed 1048576 --test-output-size-failed 1048576 || status=$?
if [ "$asan" = 1 ] && [ "$status" = 0 ]; then
  phase fuzz bash scripts/fuzz.sh "${SLUICE_FUZZ_SECONDS:-10}" || status=$?
fi
/usr/bin/python3 scripts/test-times.py "$times/phases" "ctest=$times/ctest.xml" || true
exit "$status"
