#!/bin/bash
#: vulkan    carried binaries (.carry, .gl; see vulkan.sh): vulkan_tests, then vulkan:0 beside cuda:0
#:
#: Builds nothing; carry .devshared, .carry and .gl, e.g.
#:   run(command="bash scripts/gpu/vulkan.sh", carry=[".devshared", ".carry", ".gl"], timeout_s=600)
#: Environment (all optional):
#:   BUILT_AT          the checkout path the carried binaries were built at (default /work/main)
#:   VK_DRIVER_FILES   the Vulkan ICD where none is installed (default NVIDIA's in /usr/local/nvidia)
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

# The Vulkan backend on NVIDIA's driver, with no build here (no Vulkan SDK on this machine): where it
# is built with Vulkan and CUDA (docs/vulkan.md, "Running elsewhere"), carry .carry/ (`strip -o .carry/X
# build-vk/bin/X` for X in jitllm-bench jitllm-mkmodel vulkan_tests) and .gl/ (Debian's libvulkan1).
vulkan() {
  local f m round dev rc=0 built=${BUILT_AT:-/work/main}
  BIN=$PWD/.carry
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  [ -e /usr/share/vulkan/icd.d/nvidia_icd.json ] || [ -e /etc/vulkan/icd.d/nvidia_icd.json ] ||
    export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
  # The test binaries hold their checkout's absolute paths (../shared, tests/goldens): link both here.
  [ "$(readlink -f "$built")" = "$PWD" ] || { mkdir -p "$(dirname "$built")" && ln -sfn "$PWD" "$built"; }
  [ -e "$(dirname "$PWD")/shared" ] || ln -sfn "$SHARED" "$(dirname "$PWD")/shared"
  mkdir -p build-vk
  gtest vulkan_tests || rc=1
  for m in 1b 3b; do
    f=$(makeModel "llama-3.2-$m" q4_k_m)
    for round in 1 2; do
      for dev in vulkan:0 cuda:0; do
        timeout 200 "$BIN/jitllm-bench" "$f" --devices $dev -p 512 -n 128 -r 3 2>&1 | tee -a "$LOGS/vulkan-bench.txt" |
          grep -E "^# (pp|tg)|error" | sed "s/^/$m $dev r$round: /"
      done
    done
  done
  return $rc
}

gpuMain vulkan vulkan
