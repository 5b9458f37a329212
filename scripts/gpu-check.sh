#!/bin/bash
# One call on the lent GPU machine (the device tool's `run`): build jitllm with CUDA, then MODE.
# `bash scripts/gpu-check.sh -h` lists the modes and the environment it reads.
set -uo pipefail

usage() {
  cat << 'EOF'
usage: bash scripts/gpu-check.sh [--dry-run] MODE      (one call of the device tool's `run`)
Builds jitllm (CUDA, Release) in /tmp/jitllm-build, then runs MODE; a summary on stdout, the logs
in $OUT/logs/, packed into $OUT/logs.tgz at the end (a call brings back 8 files at most). Carry
.devshared, and .peer for llama.cpp (both made by scripts/prepare-gpu-carry.sh), e.g.
  run(command="bash scripts/gpu-check.sh all", carry=[".devshared", ".peer"], timeout_s=600)
Modes:
  tests     all CUDA tests (cuda_tests), then runtime_tests, migration_tests, the backend
            conformance suite and the step loop's batching tests
  sanitize  compute-sanitizer memcheck, then racecheck, of cuda_tests, each stopped after SANITIZE_LIMIT
  bench     tools/bench/run CASES: jitllm-bench, llama-bench (built from .peer meanwhile) alternating
  peer      start building llama.cpp (llama-bench, llama-batched-bench) and return: it goes on after
            the call, for a later call on the still-warm machine (bench, serve) to use
  tiers     the service tiers' trace through a carried jitllmd (1B, cuda:0): fifo against tiers
  batch     in-process decode of B sessions at once (jitllm-bench -b BATCHES), per BATCH_ENVS setting;
            PROFILE_BATCH: each launch of such a step timed (carried .carry-serve binaries, else built)
  serve     carried .carry-serve binaries (prepare-gpu-carry.sh --serve): load time and first TTFT
            on a cold and a warm kernel cache, in-process tg, then tools/bench/run SERVE_CASES
  profile   GPU time per op (JITLLM_CUDA_PROFILE=1) of pp512 and tg64; with NCU_KERNEL, Nsight Compute
  prompt    the prompt path (gemm_f16): its cuda_tests (PROMPT_FILTER) and step_loop_tests, then jitllm-bench pp on the
            Llama-3.2 shapes (PROMPT_MODELS) for each setting of PROMPT_ENVS (default: with it and
            without), alternating, twice; then the 1B's pp512 with each launch timed alone
  archs     every architecture beyond llama (ARCH_SHAPES) in f16 and Q4_K_M: the same ids scored on
            cpu:0 and cuda:0, NMSE and top-1 between them; then the backend conformance suite
  migrate   migration tests; jitllm-migrate-bench cuda:0<->cuda:1 (two GPUs) and cuda:0<->cpu:0
  tp        tensor parallelism over two devices of one GPU: the split tests (cuda_tests), then
            jitllm-migrate-bench --tp on the 3B shape (TP_CONTEXTS) - the switch pause against context
  vulkan    carried binaries (.carry, .gl; see vulkan()): vulkan_tests, then vulkan:0 beside cuda:0
  all       tests, sanitize and bench
Options: -h, --help: this text; --dry-run: print the settings and MODE's steps, run nothing.
Environment (all optional):
  OUT               where the logs go (default /tmp/jitllm-gpu-out)
  TEST_FILTER       tests: cuda_tests' --gtest_filter (default *)
  MEMCHECK_FILTER   sanitize: memcheck's tests (default CudaOps.*:*Attention*:*TensorCore*:*Gather*:*BlocksMove*)
  RACECHECK_FILTER  sanitize: racecheck's tests (default *Attention*:*TensorCore*)
  SANITIZE_LIMIT    sanitize: seconds for each tool; a timeout is reported, not a failure (default 150)
  CASES             bench: tools/bench/run's cases or patterns (default "cuda-1b-q4km cuda-3b-q4km")
  BATCHES           batch: jitllm-bench -b (default 1,8,16,32,64); BATCH_TOKENS: its -n (default 64)
  BATCH_ENVS        batch: ';'-separated settings to compare, e.g. "JITLLM_CUDA_MMA=0;JITLLM_CUDA_MMA_TOKENS=32"
  PROFILE_BATCH     batch: batch sizes whose steps are profiled (JITLLM_CUDA_PROFILE=1), e.g. "32 64"
  SERVE_CASES       serve: tools/bench/run's serve cases (default "cuda-1b-q4km-serve cuda-3b-q4km-serve")
  REPS              bench: repetitions of each measurement instead of each case's REPS
  PROFILE_MODEL     profile: 1b or 3b, the Llama-3.2 shape in Q4_K_M with random weights (default 1b)
  NCU_KERNEL        profile: a regex of kernel names for Nsight Compute's full set (default: no ncu)
  NCU_SKIP          profile: launches of that kernel skipped first (default 0)
  NCU_ARGS          profile: jitllm-bench's arguments under Nsight Compute (default "-p 0 -n 4")
  PROMPT_FILTER     prompt: cuda_tests' filter (default *Prompt*:*Prefill*:*TinyModels*:*AfterPrepare*:*TensorCore*)
  PROMPT_MODELS     prompt: Llama-3.2 shapes (default "1b 3b"); PROMPT_ARGS: jitllm-bench's (default "-p 512 -n 0 -r 3")
  PROMPT_ENVS       prompt: ';'-separated settings (default "JITLLM_CUDA_PROMPT_GEMM=1;JITLLM_CUDA_PROMPT_GEMM=0")
  TP_CONTEXTS       tp: the bench's contexts (default 512,2048,8192)
  ARCH_SHAPES       archs: shapes to compare (default "qwen3-micro granite-micro phi3-micro phi4-micro gemma3-micro")
  BUILT_AT          vulkan: the checkout path the carried binaries were built at (default /work/main)
EOF
}

mode="" dry=0
for arg in "$@"; do
  case $arg in
    -h | --help) usage; exit 0 ;;
    --dry-run) dry=1 ;;
    -* | *\ *) usage >&2; exit 2 ;;
    *) [ -z "$mode" ] || { echo "gpu-check.sh: one mode at a time" >&2; exit 2; }; mode=$arg ;;
  esac
done
[ -n "$mode" ] || { usage >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 1

OUT=${OUT:-/tmp/jitllm-gpu-out} SHARED=$PWD/.devshared B=/tmp/jitllm-build MODELS=/tmp/jitllm-bench-models PEER=/tmp/peer
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

# llama.cpp (CUDA, sm_90: llama-bench, llama-batched-bench) from the carried bundle into $PEER, in
# its own process session so that it outlives this call when a later call on the still-warm machine
# is to use it ("peer" mode); waitLlamaCpp waits for it, whoever started it. Log: $PEER_LOG.
PEER_LOG=/tmp/peer-setup.log
startLlamaCpp() {
  [ -x $PEER/bin/llama-batched-bench ] && { echo "llama.cpp: already built in $PEER"; return 0; }
  [ -f $PEER_LOG ] && ! grep -q "^exit" $PEER_LOG && { echo "llama.cpp: a build is under way"; return 0; }
  [ -f .peer/llama.cpp.bundle ] || { echo "no .peer/llama.cpp.bundle carried: llama.cpp is left out"; return 0; }
  : > $PEER_LOG
  # Copies of what it reads: a later call replaces this working tree while it builds.
  rm -rf /tmp/peer-src && mkdir -p /tmp/peer-src && cp -r "$SHARED/peer" .peer/llama.cpp.bundle /tmp/peer-src/
  setsid bash -c "JITLLM_PEER_DIR=$PEER JITLLM_PEER_BUNDLE=/tmp/peer-src/llama.cpp.bundle \
    PEER_TARGETS='llama-bench llama-batched-bench' PEER_CMAKE_ARGS='-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90' \
    bash /tmp/peer-src/peer/setup >> $PEER_LOG 2>&1; echo exit \$? >> $PEER_LOG" < /dev/null > /dev/null 2>&1 &
}

waitLlamaCpp() {
  [ -f $PEER_LOG ] || return 0
  local waited=0
  while ! grep -q "^exit" $PEER_LOG && ((waited < 480)); do sleep 2; waited=$((waited + 2)); done
  cp $PEER_LOG "$LOGS/peer-setup.log"
  echo "llama.cpp: $(grep "^exit" $PEER_LOG || echo "still building after ${waited} s") at $((SECONDS - start)) s"
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

runTests() {
  local rc=0
  gtest cuda_tests --gtest_filter="${TEST_FILTER:-*}" || rc=1
  gtest runtime_tests || rc=1
  gtest migration_tests || rc=1
  gtest backend_conformance_tests || rc=1
  gtest step_loop_tests || rc=1
  return $rc
}

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

bench() {
  local args=(--logs "$LOGS/bench") cases
  [ -n "${REPS:-}" ] && args+=(-r "$REPS")
  waitLlamaCpp
  [ -x $PEER/bin/llama-bench ] || args+=(--jitllm-only)
  read -ra cases <<< "$CASES"
  JITLLM_BIN=$BIN JITLLM_SHARED_DIR=$SHARED JITLLM_BENCH_MODELS=$MODELS LLAMA_BENCH=$PEER/bin/llama-bench \
    tools/bench/run "${args[@]}" "${cases[@]}" | tee "$OUT/bench.md"
}

# The ops' lines of a JITLLM_CUDA_PROFILE log, most GPU time first.
topOps() { awk '{ for (i = 2; i < NF; i++) if ($i == "calls") print $(i + 1) "\t" $0 }' "$1" | sort -rn | cut -f2 | head -"$2"; }

profile() {
  local m model ncu args
  m=$PROFILE_MODEL
  model=$(makeModel "llama-3.2-$m" q4_k_m)
  echo "$m pp512, each launch timed alone:"
  JITLLM_CUDA_PROFILE=1 timeout 120 "$BIN/jitllm-bench" "$model" --devices cuda:0 -p 512 -n 0 -r 2 > "$LOGS/profile-pp-$m.txt" 2>&1
  topOps "$LOGS/profile-pp-$m.txt" 20
  echo "$m tg64, each launch timed alone:"
  JITLLM_CUDA_PROFILE=1 timeout 120 "$BIN/jitllm-bench" "$model" --devices cuda:0 -p 0 -n 64 -r 1 > "$LOGS/profile-tg-$m.txt" 2>&1
  topOps "$LOGS/profile-tg-$m.txt" 20
  [ -n "${NCU_KERNEL:-}" ] || return 0
  ncu=$(command -v ncu || find /opt/nvidia/nsight-compute -maxdepth 2 -name ncu -type f 2> /dev/null | head -1)
  read -ra args <<< "${NCU_ARGS:--p 0 -n 4}"
  JITLLM_CUDA_GRAPHS=0 timeout 300 "$ncu" --set full --import-source yes --clock-control none -k "regex:$NCU_KERNEL" \
    --launch-skip "${NCU_SKIP:-0}" --launch-count 1 -o "$LOGS/ncu" "$BIN/jitllm-bench" "$model" --devices cuda:0 "${args[@]}" -r 1 \
    > "$LOGS/ncu.log" 2>&1 || { tail -5 "$LOGS/ncu.log"; return 1; }
  "$ncu" --import "$LOGS/ncu.ncu-rep" --page details > "$LOGS/ncu-details.txt" 2>&1
  grep -E "^  [A-Za-z_]+.*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L2 Hit|Mem Busy" \
    "$LOGS/ncu-details.txt" | sed 's/  */ /g' | head -40
}

# useCarried: the binaries of .carry-serve (prepare-gpu-carry.sh --serve) as $BIN, with their
# libraries on the loader's path; fails when none were carried.
useCarried() {
  [ -x "$PWD/.carry-serve/jitllmd" ] || return 1
  BIN=$PWD/.carry-serve
  export LD_LIBRARY_PATH=$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# Serving through jitllmd with the carried binaries (.carry-serve: the daemon needs Cap'n Proto and
# libsystemd, which this machine lacks; scripts/prepare-gpu-carry.sh --serve builds them).
serve() {
  local bin one cache rc=0 args=(--logs "$LOGS/serve")
  useCarried || { echo "no .carry-serve carried (scripts/prepare-gpu-carry.sh --serve)"; return 1; }
  bin=$BIN
  one=$(makeModel llama-3.2-1b q4_k_m)
  makeModel llama-3.2-3b q4_k_m > /dev/null
  # load, and the first request after it returns: on a cold kernel cache, then a warm one.
  rm -rf /tmp/jitllm-serve-cache
  for cache in cold warm; do
    JITLLM_CACHE_DIR=/tmp/jitllm-serve-cache timeout 200 "$bin/jitllm-serve-bench" --start "$one" --devices cuda:0 \
      -c 1 -p 16 -n 32 > "$LOGS/serve-load-$cache.txt" 2>&1 || rc=1
    grep "^# load" "$LOGS/serve-load-$cache.txt" | sed "s/^/$cache kernel cache: /"
  done
  # One stream in-process, for the daemon's single-stream ratio.
  timeout 150 "$bin/jitllm-bench" "$one" --devices cuda:0 -p 16 -n 256 -r 3 > "$LOGS/inprocess-1b.txt" 2>&1 || rc=1
  grep -E "^(pp|tg)[0-9]+ " "$LOGS/inprocess-1b.txt" | sed "s/^/in-process 1b: /"
  waitLlamaCpp
  [ -x $PEER/bin/llama-batched-bench ] || args+=(--jitllm-only)
  JITLLM_BIN=$bin JITLLM_SHARED_DIR=$SHARED JITLLM_BENCH_MODELS=$MODELS LLAMA_BATCHED_BENCH=$PEER/bin/llama-batched-bench \
    JITLLM_CACHE_DIR=/tmp/jitllm-serve-cache tools/bench/run "${args[@]}" "${SERVE_CASES[@]}" | tee "$OUT/serve.md" || rc=1
  # The same runs' full figures (TTFT, TPOT, decode rate, device busy) are in the jitllm logs.
  grep -h '^{"clients"' "$LOGS"/serve/*-jitllm.log 2> /dev/null | tee "$OUT/serve-jitllm.jsonl"
  return $rc
}

# tiers: the service tiers' trace (docs/tiers.md) through a carried jitllmd on cuda:0 with the 1B
# shape, first come first served (tier_scheduling = off) against tiers (on), alternating, twice.
# TIER_TRACE_ARGS: jitllm-serve-bench --make-trace options (a load that keeps the GPU busy).
tiers() {
  local bin one trace mode round rc=0
  useCarried || { echo "no .carry-serve carried (scripts/prepare-gpu-carry.sh --serve)"; return 1; }
  bin=$BIN
  one=$(makeModel llama-3.2-1b q4_k_m)
  trace=$OUT/tiers-trace.jsonl
  # shellcheck disable=SC2086 # the options are words
  "$bin/jitllm-serve-bench" --make-trace "$trace" ${TIER_TRACE_ARGS:---duration 20 --interactive-rate 4 \
    --interactive-prompt 64 --interactive-tokens 128 --batch-jobs 16 --batch-rate 16 --batch-prompt 2048 \
    --batch-tokens 64 --seed 1} | tee "$OUT/tiers.txt"
  for round in 1 2; do
    for mode in off on; do
      echo "== round $round, tier_scheduling $mode" | tee -a "$OUT/tiers.txt"
      JITLLM_CACHE_DIR=/tmp/jitllm-serve-cache timeout 240 "$bin/jitllm-serve-bench" --start "$one" --devices cuda:0 \
        --tier-scheduling $mode --trace "$trace" > "$LOGS/tiers-$mode-$round.txt" 2>&1 || rc=1
      grep -E "^\| (batch|interactive|standard) " "$LOGS/tiers-$mode-$round.txt" | tee -a "$OUT/tiers.txt"
      grep -c "request at" "$LOGS/tiers-$mode-$round.txt" | sed "s/^/failed requests: /" | tee -a "$OUT/tiers.txt"
    done
  done
  return $rc
}

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

# archs: each shape's logits on cuda:0 against cpu:0 (float32 files compared in plain python3).
archs() {
  local shape type f rc=0
  # 64 ids, all below 32000 (every shape's vocabulary): past gemma3-micro's 24-token window.
  local ids
  ids=$(cat tests/goldens/gemma3/tokens.txt)
  for shape in ${ARCH_SHAPES:-qwen3-micro granite-micro phi3-micro phi4-micro gemma3-micro}; do
    for type in f16 q4_k_m; do
      f=$(makeModel "$shape" "$type")
      for dev in cpu:0 cuda:0; do
        rm -f "$OUT/$dev.bin"
        timeout 120 "$BIN/jitllm-run" "$f" -t "$ids" --score --logits "$OUT/$dev.bin" --devices $dev \
          > "$LOGS/archs-$shape-$type-${dev/:/}.log" 2>&1 || { echo "$shape $type on $dev failed"; rc=1; }
      done
      python3 - "$OUT/cpu:0.bin" "$OUT/cuda:0.bin" "$shape $type" "$(wc -w <<< "$ids")" << 'PYEOF'
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read()); b.frombytes(open(sys.argv[2], "rb").read())
n = int(sys.argv[4])
v = len(a) // n
err = sum((x - y) ** 2 for x, y in zip(a, b))
mean = sum(a) / len(a)
ref = sum((x - mean) ** 2 for x in a)
top = sum(max(range(v), key=lambda i: a[p * v + i]) == max(range(v), key=lambda i: b[p * v + i]) for p in range(n))
print(f"{sys.argv[3]}: cuda:0 vs cpu:0 nmse {err / ref:.3e} top1 {top}/{n}")
PYEOF
    done
  done 2>&1 | tee "$LOGS/archs.txt"
  gtest backend_conformance_tests || rc=1
  return $rc
}

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

# The Vulkan backend on NVIDIA's driver, with no build here (no Vulkan SDK on this machine): where it
# is built with Vulkan and CUDA (docs/vulkan.md, "Running elsewhere"), carry .carry/ (`strip -o .carry/X
# build-vk/bin/X` for X in jitllm-bench jitllm-mkmodel vulkan_tests) and .gl/ (Debian's libvulkan1).
vulkan() {
  local f m round dev rc=0 built=${BUILT_AT:-/work/main}
  BIN=$PWD/.carry
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  [ -e /usr/share/vulkan/icd.d/nvidia_icd.json ] || [ -e /etc/vulkan/icd.d/nvidia_icd.json ] ||
    export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
  # The test binaries hold their checkout's absolute paths (../shared, tests/goldens): link both here.
  [ "$(readlink -f "$built")" = "$PWD" ] || { mkdir -p "$(dirname "$built")" && ln -sfn "$PWD" "$built"; }
  [ -e "$(dirname "$PWD")/shared" ] || ln -sfn "$SHARED" "$(dirname "$PWD")/shared"
  mkdir -p build-vk
  gtest vulkan_tests || rc=1
  for m in 1b 3b; do
    f=$(makeModel "llama-3.2-$m" q4_k_m)
    for round in 1 2; do
      for dev in vulkan:0 cuda:0; do
        timeout 200 "$BIN/jitllm-bench" "$f" --devices $dev -p 512 -n 128 -r 3 2>&1 | tee -a "$LOGS/vulkan-bench.txt" |
          grep -E "^# (pp|tg)|error" | sed "s/^/$m $dev r$round: /"
      done
    done
  done
  return $rc
}

case $mode in
  tests) steps=("build cuda_tests runtime_tests migration_tests backend_conformance_tests step_loop_tests" runTests) ;;
  sanitize) steps=("build cuda_tests" "sanitize memcheck $MEMCHECK_FILTER" "sanitize racecheck $RACECHECK_FILTER") ;;
  bench) steps=(startLlamaCpp "build jitllm-bench jitllm-mkmodel" bench) ;;
  profile) steps=("build jitllm-bench jitllm-mkmodel" profile) ;;
  peer) steps=(startLlamaCpp) ;;
  batch) steps=(batch) ;;
  serve) steps=(startLlamaCpp serve) ;;
  tiers) steps=(tiers) ;;
  migrate) steps=("build cuda_tests migration_tests jitllm-migrate-bench jitllm-mkmodel" migrate) ;;
  tp) steps=("build cuda_tests jitllm-migrate-bench jitllm-bench jitllm-mkmodel" tp) ;;
  prompt) steps=(startLlamaCpp "build cuda_tests step_loop_tests jitllm-bench jitllm-mkmodel" promptPath) ;;
  archs) steps=("build jitllm-run jitllm-mkmodel backend_conformance_tests" archs) ;;
  vulkan) steps=(vulkan) ;;
  all) steps=(startLlamaCpp "build cuda_tests runtime_tests migration_tests backend_conformance_tests step_loop_tests jitllm-bench jitllm-mkmodel" runTests
    "sanitize memcheck $MEMCHECK_FILTER" "sanitize racecheck $RACECHECK_FILTER" bench) ;;
  *) echo "gpu-check.sh: unknown mode: $mode" >&2; usage >&2; exit 2 ;;
esac

# What a step needs, checked before a build spends minutes: the carried files, bench's case names.
[ -d "$SHARED/vocab" ] || echo "warning: no .devshared/vocab (carry .devshared: scripts/prepare-gpu-carry.sh)" >&2
if [[ " ${steps[*]} " == *" bench "* ]]; then
  read -ra cases <<< "$CASES"
  tools/bench/run --dry-run --jitllm-only "${cases[@]}" > /dev/null 2>&1 ||
    { echo "gpu-check.sh: CASES: unknown case in \"$CASES\" (tools/bench/run --list)" >&2; exit 2; }
fi
if ((dry)); then
  for v in OUT TEST_FILTER SERVE_CASES MEMCHECK_FILTER RACECHECK_FILTER SANITIZE_LIMIT CASES REPS PROFILE_MODEL NCU_KERNEL NCU_SKIP \
    NCU_ARGS BUILT_AT; do echo "$v=${!v:-}"; done
  for step in "${steps[@]}"; do echo "step: $step"; done
  exit 0
fi

mkdir -p "$LOGS"
packLogs() { tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"; }
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
