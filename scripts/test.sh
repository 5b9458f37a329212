#!/usr/bin/env bash
# Builds jitllm and runs the whole test suite; what CI runs (.ci/run).
#   scripts/test.sh
# 1. installs the dependencies (idempotent), 2. an ASan+UBSan build runs the unit tests,
# 3. the release build runs everything (unit, fidelity against llama.cpp goldens, fuzzers for a
# bounded time) and ends with ctest's summary. Exit status: non-zero if anything failed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${JOBS:-$(nproc)}
# Each stage's start, with the minutes since the script began: where CI's time goes.
stage() { echo "== $1 (at $((SECONDS / 60)) min $((SECONDS % 60)) s)"; }
stage "dependencies"
"$ROOT/scripts/install-deps.sh"

stage "sanitizer build (ASan + UBSan)"
cmake -S "$ROOT" -B "$ROOT/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DJITLLM_SANITIZE=ON -DJITLLM_FUZZ=OFF >/dev/null
cmake --build "$ROOT/build-asan" -j "$JOBS"
log="$ROOT/build-asan/ctest.log"
# Labels say what runs where: `slow` tests (NVRTC compiling every CUDA kernel variant for every
# architecture, ~2 minutes each under ASan, whose code of ours other tests exercise) and the
# fidelity and fuzz runs belong to the release run below.
stage "sanitizer tests"
if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir "$ROOT/build-asan" -j "$JOBS" --output-on-failure -L asan -LE "fidelity|fuzz|slow" \
      >"$log" 2>&1; then
  cat "$log"
  echo "sanitizer tests FAILED" >&2
  exit 1
fi
tail -3 "$log"

stage "release build"
cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$ROOT/build" -j "$JOBS"
stage "release tests"
ctest --test-dir "$ROOT/build" -j "$JOBS" --output-on-failure
