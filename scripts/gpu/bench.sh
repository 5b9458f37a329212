#!/bin/bash
#: bench     tools/bench/run CASES: jitllm-bench, llama-bench (built from .peer meanwhile) alternating
#:
#: Builds jitllm-bench and jitllm-mkmodel; carry .devshared, and .peer for llama.cpp (both made by
#: scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/bench.sh", carry=[".devshared", ".peer"], timeout_s=600)
#: Environment (all optional):
#:   CASES             tools/bench/run's cases or patterns (default "cuda-1b-q4km cuda-3b-q4km")
#:   REPS              repetitions of each measurement instead of each case's REPS
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
# shellcheck source=scripts/gpu/peer.sh
. scripts/gpu/peer.sh

bench() {
  local args=(--logs "$LOGS/bench") cases
  [ -n "${REPS:-}" ] && args+=(-r "$REPS")
  waitLlamaCpp
  [ -x $PEER/bin/llama-bench ] || args+=(--jitllm-only)
  read -ra cases <<< "$CASES"
  JITLLM_BIN=$BIN JITLLM_SHARED_DIR=$SHARED JITLLM_BENCH_MODELS=$MODELS LLAMA_BENCH=$PEER/bin/llama-bench \
    tools/bench/run "${args[@]}" "${cases[@]}" | tee "$OUT/bench.md"
}

gpuMain bench startLlamaCpp "build jitllm-bench jitllm-mkmodel" bench
