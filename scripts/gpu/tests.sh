#!/bin/bash
#: tests     all CUDA tests (cuda_tests), then runtime_tests, migration_tests, the backend
#:           conformance suite and the step loop's batching tests
#:
#: Builds those tests; carry .devshared (made by scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/tests.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
#:   TEST_FILTER       cuda_tests' --gtest_filter (default *)
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

runTests() {
  local rc=0
  gtest cuda_tests --gtest_filter="${TEST_FILTER:-*}" || rc=1
  gtest runtime_tests || rc=1
  gtest migration_tests || rc=1
  gtest backend_conformance_tests || rc=1
  gtest step_loop_tests || rc=1
  return $rc
}

gpuMain tests "build cuda_tests runtime_tests migration_tests backend_conformance_tests step_loop_tests" runTests
