#!/bin/bash
#: tp        tensor parallelism over two devices of one GPU: the split tests (cuda_tests), then
#:           jitllm-migrate-bench --tp on the 3B shape (TP_CONTEXTS) - the switch pause against context
#:
#: With two GPUs, also TP2 decode against TP1 on the 8B shape. Builds cuda_tests, jitllm-migrate-bench,
#: jitllm-bench and jitllm-mkmodel; carry .devshared (made by scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/tp.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
#:   TP_CONTEXTS       the bench's contexts (default 512,2048,8192)
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

# tp: the tensor-parallel tests and the switch pause on cuda:0 split with itself (one GPU lent).
tp() {
  local rc=0 three
  gtest cuda_tests --gtest_filter='*Split*:*TwoDevicesOfOneGpu*' || rc=1
  three=$(makeModel llama-3.2-3b q4_k_m)
  timeout 200 "$BIN/jitllm-migrate-bench" "$three" --tp --devices cuda:0,cuda:0 --sessions 1 --repeat 4 \
    --contexts "${TP_CONTEXTS:-512,2048,8192}" 2>&1 | tee "$LOGS/tp-3b-sessions1.txt" || rc=1
  timeout 150 "$BIN/jitllm-migrate-bench" "$three" --tp --devices cuda:0,cuda:0 --sessions 4 --repeat 2 \
    --contexts 512,2048 2>&1 | tee "$LOGS/tp-3b-sessions4.txt" || rc=1
  # Two GPUs (the two-GPU issue): TP2 decode against TP1 on the 8B shape, batch 1 and 32.
  if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    local eight
    eight=$(makeModel llama-3.1-8b q4_k_m)
    timeout 150 "$BIN/jitllm-bench" "$eight" --devices cuda:0 -p 0 -n 128 -r 3 -b 1,32 2>&1 |
      tee "$LOGS/tp1-8b-decode.txt" || rc=1
    timeout 150 "$BIN/jitllm-bench" "$eight" --devices cuda:0,cuda:1 --tp 2 -p 0 -n 128 -r 3 -b 1,32 2>&1 |
      tee "$LOGS/tp2-8b-decode.txt" || rc=1
  fi
  return $rc
}

gpuMain tp "build cuda_tests jitllm-migrate-bench jitllm-bench jitllm-mkmodel" tp
