#!/bin/bash
#: migrate   migration tests; jitllm-migrate-bench cuda:0<->cuda:1 (two GPUs) and cuda:0<->cpu:0
#:
#: Builds those; carry .devshared (made by scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/migrate.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

migrate() {
  local rc=0 tiny one
  gtest cuda_tests --gtest_filter='*Migrat*:*BlocksMove*:*Gather*:*TwoDevicesOfOneGpu*:*TwoGpus*' || rc=1
  gtest migration_tests || rc=1
  tiny=$(makeModel tiny q4_k_m)
  one=$(makeModel llama-3.2-1b q4_k_m)
  if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    timeout 150 "$BIN/jitllm-migrate-bench" "$one" --devices cuda:0,cuda:1 --sessions 1 --repeat 2 --contexts 512,2048,8192 2>&1 |
      tee "$LOGS/migrate-1b-cuda-cuda.txt"
  fi
  timeout 100 "$BIN/jitllm-migrate-bench" "$tiny" --devices cuda:0,cpu:0 --sessions 4 --repeat 2 --contexts 512,2048,8192 2>&1 |
    tee "$LOGS/migrate-tiny-cuda-cpu.txt"
  return $rc
}

gpuMain migrate "build cuda_tests migration_tests jitllm-migrate-bench jitllm-mkmodel" migrate
