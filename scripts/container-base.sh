#!/usr/bin/env bash
# Makes the container base image `debian:bookworm-slim` for podman (or Docker, with
# SLUICE_ENGINE=docker) from Debian's packages, without a registry: `mmdebstrap --variant=minbase bookworm`, imported under that name. With a .deb given, the
# base also holds that package's dependencies (and ca-certificates), so that building the image from
# deploy/container/Containerfile needs no network (`--build-arg APT_UPDATE=no`).
# The root file system is made once and kept outside the checkout (/var/cache/sluice-images, or
# $SLUICE_IMAGE_CACHE), named by what it holds; it takes minutes to make and a second to import.
# Usage: scripts/container-base.sh [DEB [PACKAGE,...]]   (root: mmdebstrap and the engine's image store)
# PACKAGE,...: more of Debian's packages for the base (haproxy for the swarm test's load balancer).
set -euo pipefail
deb="${1:-}"
extra="${2:-}"
engine="${SLUICE_ENGINE:-podman}"
cache="${SLUICE_IMAGE_CACHE:-/var/cache/sluice-images}"
name="${SLUICE_BASE_NAME:-debian:bookworm-slim}" # SLUICE_BASE_NAME: another name (a base with extra packages)
include="ca-certificates"
if [ -n "$deb" ]; then
  # Depends: "libfoo1 (>= 1.0), libbar2 | libbaz2, ..." -> the first of each alternative, no versions.
  deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/ //g' | grep -v '^$' | sort -u | paste -sd, -)
  include="$include,$deps"
fi
if [ -n "$extra" ]; then include="$include,$extra"; fi
key=$(printf '%s\n' "bookworm minbase $include" | sha256sum | cut -c1-16)
tar="$cache/bookworm-minbase-$key.tar"
mkdir -p "$cache"
if [ ! -s "$tar" ]; then
  echo "container-base: making $tar (mmdebstrap, a few minutes; kept for next time)" >&2
  # The machine's mirror may serve a snapshot whose Release files are past their Valid-Until date.
  mmdebstrap --quiet --format=tar --variant=minbase --include="$include" \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$tar.tmp"
  mv "$tar.tmp" "$tar"
fi
# Imported again only when the image there is not this root file system.
label="sluice.base=$key"
if [ "$("$engine" image inspect --format '{{index .Config.Labels "sluice.base"}}' "$name" 2>/dev/null || true)" != "$key" ]; then
  "$engine" import --change "LABEL $label" --change 'CMD ["/bin/bash"]' "$tar" "$name" >/dev/null
fi
echo "$name"
