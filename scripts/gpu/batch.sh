#!/bin/bash
#: batch     in-process decode of B sessions at once (jitllm-bench -b BATCHES), per BATCH_ENVS setting;
#:           PROFILE_BATCH: each launch of such a step timed (carried .carry-serve binaries, else built)
#:
#: Builds jitllm-bench and jitllm-mkmodel unless .carry-serve is carried; carry .devshared (made by
#: scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="PROFILE_BATCH='32 64' bash scripts/gpu/batch.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
#:   BATCHES           jitllm-bench -b (default 1,8,16,32,64); BATCH_TOKENS: its -n (default 64)
#:   BATCH_ENVS        ';'-separated settings to compare, e.g. "JITLLM_CUDA_MMA=0;JITLLM_CUDA_MMA_TOKENS=32"
#:   PROFILE_BATCH     batch sizes whose steps are profiled (JITLLM_CUDA_PROFILE=1), e.g. "32 64"
#:   PROFILE_MODEL     1b or 3b, the Llama-3.2 shape in Q4_K_M with random weights (default 1b)
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

# Decode of B sessions at once in-process (jitllm-bench -b: the daemon's step without the socket),
# once per setting of BATCH_ENVS, then each launch of a step of PROFILE_BATCH sessions timed alone.
batch() {
  local bin one envs e
  useCarried || build jitllm-bench jitllm-mkmodel
  bin=$BIN
  one=$(makeModel "llama-3.2-$PROFILE_MODEL" q4_k_m)
  IFS=';' read -ra envs <<< "${BATCH_ENVS:-}"
  ((${#envs[@]})) || envs=("")
  local i=0
  for e in "${envs[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # e is NAME=VALUE words
    env $e timeout 150 "$bin/jitllm-bench" "$one" --devices cuda:0 -p 0 -n "${BATCH_TOKENS:-64}" -r 2 \
      -b "${BATCHES:-1,8,16,32,64}" > "$LOGS/batch-$i.txt" 2>&1
    echo "${e:-default}: $(grep -E "^tg" "$LOGS/batch-$i.txt" | paste -sd' ')" | tee -a "$OUT/batch.txt"
  done
  for b in ${PROFILE_BATCH:-}; do
    JITLLM_CUDA_PROFILE=1 timeout 120 "$bin/jitllm-bench" "$one" --devices cuda:0 -p 0 -n 16 -r 1 -b "$b" \
      > "$LOGS/profile-b$b.txt" 2>&1
    echo "step of $b sessions, each launch timed alone:"
    topOps "$LOGS/profile-b$b.txt" 16
  done
}

gpuMain batch batch
