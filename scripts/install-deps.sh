#!/usr/bin/env bash
# Installs everything jitllm needs to build and test on Debian 12 (run as root).
# Idempotent: packages already present are left alone, and apt is only asked when one is missing.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev          # unit and integration tests
  clang libclang-rt-14-dev           # libFuzzer + sanitizers for the fuzz targets
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all ${#PACKAGES[@]} packages present"
