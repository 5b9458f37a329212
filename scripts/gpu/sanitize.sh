#!/bin/bash
#: sanitize  compute-sanitizer memcheck, then racecheck, of cuda_tests, each stopped after SANITIZE_LIMIT
#:
#: Builds cuda_tests; carry .devshared (made by scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/sanitize.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
#:   MEMCHECK_FILTER   memcheck's tests (default CudaOps.*:*Attention*:*TensorCore*:*Gather*:*BlocksMove*)
#:   RACECHECK_FILTER  racecheck's tests (default *Attention*:*TensorCore*)
#:   SANITIZE_LIMIT    seconds for each tool; a timeout is reported, not a failure (default 150)
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

# sanitize TOOL FILTER: compute-sanitizer's TOOL over the cuda_tests matching FILTER.
sanitize() {
  local tool=$1 rc=0
  timeout "$SANITIZE_LIMIT" compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 10 \
    "$BIN/cuda_tests" --gtest_filter="$2" > "$LOGS/$tool.log" 2>&1 || rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |Invalid|out of bounds|hazard" "$LOGS/$tool.log" | head -8
  [ $rc = 124 ] && { echo "$tool: stopped after $SANITIZE_LIMIT s, $(grep -c '^\[       OK \]' "$LOGS/$tool.log") tests done"; return 0; }
  echo "$tool: exit $rc"
  return $rc
}

gpuMain sanitize "build cuda_tests" "sanitize memcheck $MEMCHECK_FILTER" "sanitize racecheck $RACECHECK_FILTER"
