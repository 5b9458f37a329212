#!/bin/bash
# What every script of scripts/gpu/ (one a mode of the lent GPU machine) shares; each sources it
# first, with its arguments: -h (the script's `#:` lines, then what follows here), --dry-run, the
# settings, the CUDA Release build in /tmp/jitllm-build, the helpers of several modes, and gpuMain,
# which checks, prints or runs a mode's steps, its logs in $OUT/logs packed into $OUT/logs.tgz.
declare -F gpuMain > /dev/null && return 0  # once: all.sh and others source further modes' scripts
set -uo pipefail

# usage: the running script's `#:` lines, then what every mode shares.
usage() {
  echo "usage: bash scripts/gpu/${0##*/} [--dry-run]      (one call of the device tool's \`run\`)"
  sed -n 's/^#: \{0,1\}//p' "$0"
  cat << 'EOT'
  OUT               where the logs go (default /tmp/jitllm-gpu-out)
Options: -h, --help: this text; --dry-run: print the settings and the steps, run nothing.
A summary on stdout, the logs in $OUT/logs/, packed into $OUT/logs.tgz at the end (a call brings back
8 files at most); what is built goes to /tmp/jitllm-build (CUDA, Release). bash scripts/gpu-check.sh
MODE runs the same; its -h lists the modes.
EOT
}

dry=0
for arg in "$@"; do
  case $arg in
    -h | --help) usage; exit 0 ;;
    --dry-run) dry=1 ;;
    *) usage >&2; exit 2 ;;
  esac
done
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

# The settings; --dry-run prints these (every mode all of them, as the one gpu-check.sh did).
OUT=${OUT:-/tmp/jitllm-gpu-out} SHARED=$PWD/.devshared B=/tmp/jitllm-build MODELS=/tmp/jitllm-bench-models
LOGS=$OUT/logs BIN=$B/bin
MEMCHECK_FILTER=${MEMCHECK_FILTER:-CudaOps.*:*Attention*:*TensorCore*:*Gather*:*BlocksMove*}
RACECHECK_FILTER=${RACECHECK_FILTER:-*Attention*:*TensorCore*}
SANITIZE_LIMIT=${SANITIZE_LIMIT:-150}
CASES=${CASES:-cuda-1b-q4km cuda-3b-q4km}
read -ra SERVE_CASES <<< "${SERVE_CASES:-cuda-1b-q4km-serve cuda-3b-q4km-serve}"
PROFILE_MODEL=${PROFILE_MODEL:-1b}
export JITLLM_CACHE_DIR=/tmp/jitllm-cache
start=$SECONDS failed=()

# build TARGET...: configure once, build the targets; a failed build ends the call.
build() {
  if ! cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DJITLLM_FUZZ=OFF -DJITLLM_VULKAN=OFF \
    -DJITLLM_SHARED_DIR="$SHARED" -DCMAKE_CXX_FLAGS="-include cstdint" > "$LOGS/build.log" 2>&1 ||
    ! cmake --build $B -j"$(nproc)" --target "$@" >> "$LOGS/build.log" 2>&1; then
    tail -40 "$LOGS/build.log"
    exit 1
  fi
}

# makeModel SHAPE TYPE: a random-weight model, made once; prints its path (tools/bench/run's cache).
makeModel() {
  local f=$MODELS/$1-$2.gguf
  mkdir -p $MODELS
  [ -f "$f" ] || "$BIN/jitllm-mkmodel" "$1" "$2" "$f" --shared "$SHARED" > /dev/null || echo "mkmodel $1 $2 failed" >&2
  echo "$f"
}

# gtest NAME [ARGS...]: the test binary NAME, its log in $LOGS/NAME.log, its verdict and failures.
gtest() {
  local name=$1 rc=0
  shift
  timeout 480 "$BIN/$name" "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is" "$LOGS/$name.log" | head -40
  echo "$name: exit $rc"
  return $rc
}

# The ops' lines of a JITLLM_CUDA_PROFILE log, most GPU time first.
topOps() { awk '{ for (i = 2; i < NF; i++) if ($i == "calls") print $(i + 1) "\t" $0 }' "$1" | sort -rn | cut -f2 | head -"$2"; }

# useCarried: the binaries of .carry-serve (prepare-gpu-carry.sh --serve) as $BIN, with their
# libraries on the loader's path; fails when none were carried.
useCarried() {
  [ -x "$PWD/.carry-serve/jitllmd" ] || return 1
  BIN=$PWD/.carry-serve
  export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

packLogs() { tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"; }

# gpuMain MODE STEP...: where the mode's script runs (not where all.sh sources it), check what the
# steps need before a build spends minutes (the carried files, bench's case names), then print the
# settings and steps (--dry-run) or run each step, a summary line for each and one at the end.
gpuMain() {
  [ "${BASH_SOURCE[1]}" = "$0" ] || return 0
  local mode=$1 steps=("${@:2}") cases v step words
  [ -d "$SHARED/vocab" ] || echo "warning: no .devshared/vocab (carry .devshared: scripts/prepare-gpu-carry.sh)" >&2
  if [[ " ${steps[*]} " == *" bench "* ]]; then
    read -ra cases <<< "$CASES"
    tools/bench/run --dry-run --jitllm-only "${cases[@]}" > /dev/null 2>&1 ||
      { echo "${0##*/}: CASES: unknown case in \"$CASES\" (tools/bench/run --list)" >&2; exit 2; }
  fi
  if ((dry)); then
    for v in OUT TEST_FILTER SERVE_CASES MEMCHECK_FILTER RACECHECK_FILTER SANITIZE_LIMIT CASES REPS PROFILE_MODEL NCU_KERNEL NCU_SKIP \
      NCU_ARGS BUILT_AT; do echo "$v=${!v:-}"; done
    for step in "${steps[@]}"; do echo "step: $step"; done
    exit 0
  fi

  mkdir -p "$LOGS"
  trap packLogs EXIT
  trap 'exit 143' TERM
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | tee "$LOGS/gpu.txt"
  for step in "${steps[@]}"; do
    read -ra words <<< "$step"  # (no glob: a test filter's * stays as it is)
    echo "== $step ($((SECONDS - start)) s)"
    "${words[@]}" || failed+=("$step")
  done
  echo "== $mode done in $((SECONDS - start)) s; ${#failed[@]} step(s) failed${failed[*]:+: ${failed[*]}}"
  [ ${#failed[@]} = 0 ]
}
