#!/usr/bin/env bash
# Installs the Debian packages sluice needs to build and test. Idempotent: packages already present are
# skipped, and apt-get runs only when something is missing.
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config ccache
  libboost1.81-dev libboost-url1.81-dev libboost-json1.81-dev
  libssl-dev libc-ares-dev libre2-dev prometheus-cpp-dev
  catch2 libcli11-dev libtomlplusplus-dev libseccomp-dev libnghttp2-dev libssh-dev
  libhyperscan-dev libhiredis-dev
)
test_pkgs=(
  curl openssl python3 iproute2 git util-linux procps wget
  prometheus prometheus-node-exporter chromium nodejs bubblewrap socat
  python3-pip python3-requests python3-setuptools python3-wheel golang-go busybox python3-yaml haproxy
  podman runc catatonit mmdebstrap apparmor nftables docker.io
  nghttp2-client python3-h2 python3-websockets python3-grpcio
  openssh-server openssh-client gh nginx
  postgresql redis-server
  gdb # a hung test prints the threads of the sluice it waited for
)
# kubectl for rendering deploy/kubernetes (kustomize): Debian's, unless one is installed already.
command -v kubectl >/dev/null || test_pkgs+=(kubernetes-client)

missing=()
for p in "${build_pkgs[@]}" "${test_pkgs[@]}" "$@"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}; run this script as root (or with sudo)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
