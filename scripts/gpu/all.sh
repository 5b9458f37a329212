#!/bin/bash
#: all       tests, sanitize and bench
#:
#: One build for the three; carry .devshared, and .peer for llama.cpp (both made by
#: scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/all.sh", carry=[".devshared", ".peer"], timeout_s=600)
#: Environment (all optional): that of tests.sh, sanitize.sh and bench.sh (their -h), and
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
# The modes' steps; their scripts, sourced, run nothing.
# shellcheck source=scripts/gpu/tests.sh
. scripts/gpu/tests.sh
# shellcheck source=scripts/gpu/sanitize.sh
. scripts/gpu/sanitize.sh
# shellcheck source=scripts/gpu/bench.sh
. scripts/gpu/bench.sh

gpuMain all startLlamaCpp "build cuda_tests runtime_tests migration_tests backend_conformance_tests step_loop_tests jitllm-bench jitllm-mkmodel" runTests \
  "sanitize memcheck $MEMCHECK_FILTER" "sanitize racecheck $RACECHECK_FILTER" bench
