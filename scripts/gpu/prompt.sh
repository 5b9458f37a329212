#!/bin/bash
#: prompt    the prompt path (gemm_f16): its cuda_tests (PROMPT_FILTER) and step_loop_tests, then jitllm-bench pp on the
#:           Llama-3.2 shapes (PROMPT_MODELS) for each setting of PROMPT_ENVS (default: with it and
#:           without), alternating, twice; then the 1B's pp512 with each launch timed alone
#:
#: Builds cuda_tests, step_loop_tests, jitllm-bench and jitllm-mkmodel, and starts llama.cpp's build
#: when .peer is carried; carry .devshared (made by scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/prompt.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
#:   PROMPT_FILTER     cuda_tests' filter (default *Prompt*:*Prefill*:*TinyModels*:*AfterPrepare*:*TensorCore*)
#:   PROMPT_MODELS     Llama-3.2 shapes (default "1b 3b"); PROMPT_ARGS: jitllm-bench's (default "-p 512 -n 0 -r 3")
#:   PROMPT_ENVS       ';'-separated settings (default "JITLLM_CUDA_PROMPT_GEMM=1;JITLLM_CUDA_PROMPT_GEMM=0")
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
# shellcheck source=scripts/gpu/peer.sh
. scripts/gpu/peer.sh

# prompt: the prompt path against the decode kernels for prompts (docs/cuda.md, "Prompt products").
promptPath() {
  local m f round e envs args rc=0
  gtest cuda_tests --gtest_filter="${PROMPT_FILTER:-*Prompt*:*Prefill*:*TinyModels*:*AfterPrepare*:*TensorCore*}" || rc=1
  gtest step_loop_tests || rc=1
  read -ra args <<< "${PROMPT_ARGS:--p 512 -n 0 -r 3}"
  IFS=';' read -ra envs <<< "${PROMPT_ENVS:-JITLLM_CUDA_PROMPT_GEMM=1;JITLLM_CUDA_PROMPT_GEMM=0}"
  for m in ${PROMPT_MODELS:-1b 3b}; do
    f=$(makeModel "llama-3.2-$m" q4_k_m)
    for round in 1 2; do
      for e in "${envs[@]}"; do
        # shellcheck disable=SC2086 # e is NAME=VALUE words
        env $e timeout 150 "$BIN/jitllm-bench" "$f" --devices cuda:0 "${args[@]}" > "$LOGS/prompt.txt" 2>&1 || rc=1
        echo "$m round $round $e: $(grep -E "^(pp|tg)[0-9]" "$LOGS/prompt.txt" | paste -sd' ')"
      done
    done
  done | tee "$OUT/prompt.txt"
  f=$(makeModel llama-3.2-1b q4_k_m)
  JITLLM_CUDA_PROFILE=1 timeout 120 "$BIN/jitllm-bench" "$f" --devices cuda:0 -p 512 -n 0 -r 1 > "$LOGS/profile-prompt-1b.txt" 2>&1
  echo "1b pp512 on the prompt path, each launch timed alone:"
  topOps "$LOGS/profile-prompt-1b.txt" 14
  return $rc
}

gpuMain prompt startLlamaCpp "build cuda_tests step_loop_tests jitllm-bench jitllm-mkmodel" promptPath
