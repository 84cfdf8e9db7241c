#!/usr/bin/env bash
# Configures and builds one CMake preset (default: "default"). Usage: scripts/build.sh [PRESET [CMAKE_ARG...]]
# (CMAKE_ARGs go to the configure step, e.g. -DSLUICE_ASAN_DIR=...; TARGET=NAME builds one target.)
# With ccache installed (scripts/install-deps.sh does), objects are cached outside the checkout, in
# /var/cache/sluice-ccache (root) or ~/.cache/ccache, so a clean clone on the same machine rebuilds
# only what changed. SLUICE_NO_CCACHE=1 builds without it.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
shift || true
launcher=()
if [ -z "${SLUICE_NO_CCACHE:-}" ] && command -v ccache >/dev/null; then
  if [ -z "${CCACHE_DIR:-}" ]; then
    if [ "$(id -u)" = 0 ]; then export CCACHE_DIR=/var/cache/sluice-ccache; else export CCACHE_DIR="$HOME/.cache/ccache"; fi
  fi
  mkdir -p "$CCACHE_DIR"
  # The precompiled header is part of what a translation unit depends on: ccache hashes it.
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  # Paths under the checkout are hashed relative to it, and the build directory is not hashed (-g
  # would add it): a clone in another folder (CI's) finds the objects another clone compiled.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  ccache --max-size=5G >/dev/null
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  launcher=(-UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER)
fi
cmake --preset "$preset" "${launcher[@]}" "$@" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" ${TARGET:+--target "$TARGET"}
