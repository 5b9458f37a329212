#!/bin/bash
# One call on a lent GPU machine (the device tool's `run`) for the Vulkan backend on NVIDIA's driver:
# the Vulkan tests, then decode/prefill of the Llama-3.2-1B and 3B shapes (Q4_K_M) on vulkan:0 and
# on cuda:0 with the same binary, alternating, so the Vulkan/CUDA ratio comes from one run.
#
# The GPU machine has no Vulkan loader, shaderc or registry, so the binaries are built here (a
# build with Vulkan and CUDA, e.g. build-vk/) and carried stripped in .carry/ with Debian's
# libvulkan1 in .gl/ (docs/vulkan.md, "Running elsewhere"):
#   strip -o .carry/X build-vk/bin/X   for X in jitllm-bench jitllm-mkmodel vulkan_tests [cuda_tests]
#   run(command="bash scripts/vulkan-gpu-check.sh", carry=[".carry", ".gl", ".devshared"])
# The test binaries have this checkout's absolute paths compiled in (../shared, tests/goldens):
# BUILT_AT (default /work/main) is linked to the working tree there and its ../shared to .devshared.
# Env: MODELS (default "1b 3b"), WHAT (any of "tests bench tune profile", default "tests bench"),
# CUDA_TESTS=1 also runs the carried cuda_tests, ROUNDS (default 2) alternations of the engines,
# INTDOT_AB=0 skips the 1B run with JITLLM_VULKAN_INTDOT=0. Logs go to $OUT.
set -o pipefail
OUT=${OUT:-/tmp/jitllm-gpu-out}
mkdir -p "$OUT"
C=$PWD/.carry
BUILT_AT=${BUILT_AT:-/work/main}
export JITLLM_CACHE_DIR=/tmp/jitllm-cache
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }

for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
[ -e /usr/share/vulkan/icd.d/nvidia_icd.json ] || [ -e /etc/vulkan/icd.d/nvidia_icd.json ] ||
  export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
# BUILT_AT/../shared resolves against the working tree's real parent once BUILT_AT is a link.
if [ "$(readlink -f "$BUILT_AT")" != "$PWD" ]; then
  mkdir -p "$(dirname "$BUILT_AT")"
  ln -sfn "$PWD" "$BUILT_AT"
fi
[ -e "$(dirname "$PWD")/shared" ] || ln -sfn "$PWD/.devshared" "$(dirname "$PWD")/shared"
mkdir -p build-vk
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

bench() { # label, env..., then jitllm-bench arguments
  local label=$1
  shift
  echo "== $label"
  env "$@" 2>&1 | tee -a "$OUT/bench.txt" | grep -E "^# (pp|tg)|error" | sed "s/^/$label: /"
}

if [[ "${WHAT:-tests bench}" == *tests* ]]; then
  timeout 300 "$C/vulkan_tests" 2>&1 | tee "$OUT/vulkan_tests.log" |
    grep -E "^\[  (FAILED|PASSED|SKIPPED) |nmse|Failure|Expected|Which is|error|differ" | head -60
  echo "vulkan tests: $(elapsed)"
  if [ "${CUDA_TESTS:-0}" = 1 ]; then
    timeout 300 "$C/cuda_tests" 2>&1 | tee "$OUT/cuda_tests.log" |
      grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|differ" | head -60
    echo "cuda tests: $(elapsed)"
  fi
fi

if [[ "${WHAT:-tests bench}" == *bench* ]]; then
  for m in ${MODELS:-1b 3b}; do
    "$C/jitllm-mkmodel" llama-3.2-$m q4_k_m /tmp/$m.gguf --shared "$PWD/.devshared" > /dev/null || echo "mkmodel $m failed"
  done
  for m in ${MODELS:-1b 3b}; do
    for round in $(seq "${ROUNDS:-2}"); do
      bench "$m vulkan r$round" timeout 200 "$C/jitllm-bench" /tmp/$m.gguf --device vulkan:0 -p 512 -n 128 -r 3
      bench "$m cuda r$round" timeout 100 "$C/jitllm-bench" /tmp/$m.gguf --device cuda:0 -p 512 -n 128 -r 3
    done
    [ "$m" = 1b ] && [ "${INTDOT_AB:-1}" = 1 ] && bench "$m vulkan intdot=0" JITLLM_VULKAN_INTDOT=0 timeout 200 "$C/jitllm-bench" /tmp/$m.gguf \
      --device vulkan:0 -p 512 -n 128 -r 3
  done
fi
if [[ "${WHAT:-tests bench}" == *bench* ]]; then
  echo "== product shapes the tuner chose (key WR NR):"
  cat /tmp/jitllm-cache/vulkan/*/matmul-tuning.txt 2>/dev/null | sed 's/|src=[0-9a-f]*//' | tee "$OUT/matmul-tuning.txt"
fi
if [[ "${WHAT:-tests bench}" == *tune* ]]; then
  # Decode's row groups per workgroup and rows per group of the matrix products (JITLLM_VULKAN_DECODE_ROWS).
  [ -f /tmp/1b.gguf ] || "$C/jitllm-mkmodel" llama-3.2-1b q4_k_m /tmp/1b.gguf --shared "$PWD/.devshared" > /dev/null
  for rows in ${TUNE:-2,2 1,1 2,1 4,1 8,1 1,2 4,2}; do
    bench "1b vulkan decode rows $rows" JITLLM_VULKAN_DECODE_ROWS=$rows timeout 100 "$C/jitllm-bench" /tmp/1b.gguf \
      --device vulkan:0 -p 0 -n 128 -r 3
  done
fi
if [[ "${WHAT:-tests bench}" == *profile* ]]; then
  [ -f /tmp/1b.gguf ] || "$C/jitllm-mkmodel" llama-3.2-1b q4_k_m /tmp/1b.gguf --shared "$PWD/.devshared" > /dev/null
  # Decode only: GPU time per command between timestamps (StreamProfile).
  JITLLM_VULKAN_PROFILE=1 timeout 120 "$C/jitllm-bench" /tmp/1b.gguf --device vulkan:0 -p 0 -n 64 -r 1 \
    > "$OUT/profile-1b-vulkan.txt" 2>&1
  grep -A40 "GPU time by command" "$OUT/profile-1b-vulkan.txt" | head -40
fi
echo "total: $(elapsed)"
