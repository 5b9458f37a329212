#!/usr/bin/env bash
# Installs everything jitllm needs to build and test on Debian 12 (run as root).
# Idempotent: packages already present are left alone, and apt is only asked when one is missing.
#   scripts/install-deps.sh             what the build and the test suite need
#   scripts/install-deps.sh --goldens   also what regenerating the goldens needs (numpy for the
#                                       float64 references, jinja2 for the chat-template renders)
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev          # unit and integration tests
  clang libclang-rt-14-dev           # libFuzzer + sanitizers for the fuzz targets
  libvulkan-dev glslang-dev libshaderc-dev spirv-tools   # the Vulkan backend and its JIT (shaderc)
  mesa-vulkan-drivers vulkan-tools   # lavapipe: a real Vulkan device on any machine (CI)
  capnproto libcapnp-dev             # the daemon's RPC and its schema compiler
  libsystemd-dev                     # sd_notify, socket activation, journal, sd-device
  libboost-dev libspdlog-dev libfmt-dev   # Boost.Asio event loop, logging
  systemd                            # systemd-analyze verify for the unit files
  stress-ng                          # loads the CPUs while the suite runs (docs/testing.md)
  nlohmann-json3-dev                 # JSON of the HTTP API (docs/api.md, "HTTP")
  curl python3-prometheus-client     # the HTTP acceptance test: requests, and /metrics parsed
  nodejs                             # ... and OpenAI's official Node.js client (npm installs it)
)
# npm comes with nodejs from NodeSource; only Debian's nodejs needs Debian's npm (and installing
# that one beside NodeSource's would conflict).
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)
[[ ${1:-} == --goldens ]] && PACKAGES+=(python3-numpy python3-jinja2)
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
