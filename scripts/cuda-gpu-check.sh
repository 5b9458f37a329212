#!/bin/bash
# One call on a lent GPU machine (the device tool's `run`): build, run the CUDA tests, a memory
# check of the ops, and the decode/prefill benchmark on a random-weight Llama-3.2-1B Q4_K_M.
# Logs go to $OUT. Needs the vocab files and stories260K in .devshared/ (carried; see docs/cuda.md).
#   bash scripts/cuda-gpu-check.sh [tests|bench|all|all3b|migrate|stream]
# migrate: the migration tests (CPU and CUDA) and jitllm-migrate-bench between the GPUs found
# (cuda:0,cuda:1 on a two-GPU machine) and between cuda:0 and the CPU.
# mma: all CUDA tests, a memory check of the tensor-core prefill test, pp512 with JITLLM_CUDA_MMA=0/1.
# decode: all CUDA tests, memcheck of the ops, 1B/3B pp512+tg128 with PDL and fusion on and off.
# profile: all CUDA tests, memcheck, pp512/tg128 1B+3B, per-op prefill profiles, ncu of prefill products.
# peer: GPU-to-GPU block moves and the migration tests through them, memcheck.
# ab: all CUDA and migration tests, racecheck + memcheck of attention and the integer products,
# (RACE=0: no racecheck), then 1B/3B pp512+tg128 by default and under each of $AB ("NAME=VALUE ..."), a 1B prefill profile.
# quick: the 1B's pp512 + tg128 and its per-op prefill profile only.
# depth: tests ($FILTER), memcheck, then tg128 from an empty context and after 4096 tokens beside llama.cpp
# (jitllm with fp32 and fp16 KV pages; KVS=f32: fp32 only), then $AB.
# verify: the CUDA tests matching $FILTER, then jitllm-bench $ARGS on $MODELS by default and under each of $AB
# (PROFILE=1: and each setting's per-op prefill profile).
# host: a decode step's GPU time (its graph) against the host's parts of it, 1B and 3B, under each of $AB.
# costs: [tests matching $FILTER], the GPU time of a decode step's graph (the 1B, or MODEL=3b) against its
# tokens' wall-clock time, tg128 with each kind of decode launch left out (what it costs in the graph), then $AB.
# final: llama.cpp built meanwhile; all CUDA tests, racecheck ($RACE_LIMIT s) + memcheck ($RACE_FILTER,
# $MEMCHECK_FILTER), decode A/Bs ($TUNE_DEFINES, $DECODE_ROWS), 1B A/Bs of $AB, side by side.
# prefill: prefill kernels' tests + compute-sanitizer (memcheck, racecheck, synccheck), pp512, profiles [NCU=1].
# tune: jitllm-bench over the integer kernels' rows per warp (TUNE="decode,prefill ..."), then a profile.
# ncu: Nsight Compute's counters for one decode step's matrix products (one layer and the head).
# ncu-lines: Nsight Compute's full set on one launch of $KERNEL (attention_split), stalls by source line
# (the tables in one lines-KERNEL-SKIP.tgz; run it again with another NCU_SKIP for another launch).
# ops: single ops timed alone (jitllm-opbench): decode attention of the 1B and 3B shapes over
# $CONTEXTS (128,1024,4096) with fp32 and fp16 KV, and the 1B's decode products, by default and
# under each $AB setting ("A=1+B=2" sets both), alternating, twice - a kernel's A/B without a
# model step's noise. KVS="f32" (default "f32 f16"): the KV precisions; PRODUCTS=0: attention only.
# phases: attention_split's blocks timed phase by phase (JL_ATTN_TIMING) after 4096 tokens, 1B and 3B:
# medians in cycles, for the blocks that fold and the others.
# stream: the streaming tests, then the Llama-3.1-8B shape (Q4_K_M) all resident on cuda:0 against
# cuda:0 capped at 2 GB with the blocks that do not fit streamed through it, or run on the CPU.
set -o pipefail
what=${1:-all}
OUT=${OUT:-/tmp/jitllm-gpu-out}
mkdir -p "$OUT"
SHARED=$PWD/.devshared
B=/tmp/jitllm-build
export JITLLM_CACHE_DIR=/tmp/jitllm-cache
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
start=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DJITLLM_FUZZ=OFF -DJITLLM_VULKAN=OFF \
  -DJITLLM_SHARED_DIR="$SHARED" -DCMAKE_CXX_FLAGS="-include cstdint" > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j16 --target cuda_tests runtime_tests migration_tests jitllm-bench jitllm-mkmodel jitllm-run \
    jitllm-migrate-bench jitllm-opbench >> "$OUT/build.log" 2>&1 ||
  { tail -60 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
# llama.cpp (CUDA, sm_90) from the carried .peer bundle into /tmp/peer, in the background; $peer
# is its process.
buildLlamaCppInBackground() {
  ( JITLLM_PEER_DIR=/tmp/peer JITLLM_PEER_BUNDLE=$PWD/.peer/llama.cpp.bundle PEER_TARGETS="llama-bench" \
      PEER_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" bash "$SHARED/peer/setup" > "$OUT/peer-setup.log" 2>&1
    echo "exit $?" >> "$OUT/peer-setup.log" ) &
  peer=$!
}
# compute-sanitizer's TOOL over the cuda_tests matching FILTER (log in $OUT/LOG), then its summary.
sanitize() {
  local tool=$1 filter=$2 log=$3 limit=${4:-120}
  timeout "$limit" compute-sanitizer --tool "$tool" --print-limit 10 $B/bin/cuda_tests --gtest_filter="$filter" \
    > "$OUT/$log" 2>&1
  echo "$tool exit $?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|out of bounds|hazard" "$OUT/$log" | head -6
}
# Random-weight Llama-3.2 SIZE (1b, 3b) Q4_K_M at /tmp/SIZE.gguf.
makeLlama() {
  $B/bin/jitllm-mkmodel llama-3.2-$1 q4_k_m /tmp/$1.gguf --shared "$SHARED" > /dev/null 2>&1 || echo "mkmodel failed"
}
# The cuda_tests matching FILTER (log in $OUT/cuda_tests.log), their outcome and failures in at most LINES lines.
cudaTests() {
  $B/bin/cuda_tests --gtest_filter="$1" 2>&1 | tee "$OUT/cuda_tests.log" |
    grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" | head -"$2"
}
# jitllm-bench on /tmp/MODEL.gguf (ARGS, -r 3) once per environment setting given ("NAME=VALUE", or
# "A=1+B=2" for two at once),
# each line of results labelled with the model and the setting and appended to $OUT/LOG.
benchEach() {
  local m=$1 log=$2 args=$3 cfg
  shift 3
  for cfg in "$@"; do
    env ${cfg//+/ } timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 $args -r 3 2>&1 |
      tee -a "$OUT/$log" | grep -E "^# (pp|tg)" | sed "s/^/$m $cfg /"
  done
}
# The A/B settings of $TUNE_DEFINES (JITLLM_CUDA_DEFINES values) and $DECODE_ROWS (the integer
# decode kernels' rows per warp; 0: by matrix height), one per line.
tuneSettings() {
  local d
  for d in $TUNE_DEFINES; do echo "JITLLM_CUDA_DEFINES=$d"; done
  for d in $DECODE_ROWS; do echo "JITLLM_CUDA_INT_DECODE_ROWS=$d"; done
}
if [ "$what" = stream ]; then
  $B/bin/cuda_tests --gtest_filter='*Stream*:*Filling*' 2>&1 | tee "$OUT/cuda_stream_tests.log" |
    grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" | head -20
  $B/bin/jitllm-mkmodel llama-3.1-8b q4_k_m /tmp/8b.gguf --shared "$SHARED" > /dev/null || echo "mkmodel failed"
  echo "model: $(du -h /tmp/8b.gguf | cut -f1)  mkmodel+tests: $(( $(date +%s) - start )) s"
  for args in "--device cuda:0" "--device cuda:0@2G,cpu:0 --fit stream" "--device cuda:0@2G,cpu:0 --fit cpu"; do
    echo "== jitllm-bench /tmp/8b.gguf $args -p 512 -n 64 -r 2"
    timeout 240 $B/bin/jitllm-bench /tmp/8b.gguf $args -p 512 -n 64 -r 2 2>&1 | tee -a "$OUT/bench-8b-stream.txt" |
      grep -E "^fit|^#|error"
  done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = mma ]; then
  # All CUDA tests, a memory check of the tensor-core test, then prefill with and without them.
  cudaTests '*' 60
  echo "tests: $(( $(date +%s) - start )) s"
  timeout 120 compute-sanitizer --tool memcheck --print-limit 20 $B/bin/cuda_tests --gtest_filter='*TensorCore*' \
    > "$OUT/memcheck-mma.log" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|Invalid|out of bounds" "$OUT/memcheck-mma.log" | head -10
  for m in 1b 3b; do
    makeLlama $m
    for mma in 0 1 0 1; do
      echo "== $m JITLLM_CUDA_MMA=$mma"
      JITLLM_CUDA_MMA=$mma timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 32 -r 3 2>&1 |
        tee -a "$OUT/bench-mma.txt" | grep -E "^# (pp|tg)"
    done
  done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = decode ]; then
  # All CUDA tests, a memory check of the ops, then decode with each launch-saving path on and off
  # (JITLLM_CUDA_PDL, JITLLM_CUDA_FUSE: docs/cuda.md) on the 1B and 3B shapes, kernel defines to
  # try ($TUNE_DEFINES, JITLLM_CUDA_DEFINES values), and a profile. With .peer/llama.cpp.bundle
  # carried, llama.cpp (CUDA) builds meanwhile and runs side by side with jitllm at the end.
  [ -f .peer/llama.cpp.bundle ] && buildLlamaCppInBackground
  cudaTests '*' 60
  echo "tests: $(( $(date +%s) - start )) s"
  timeout 150 compute-sanitizer --tool memcheck --print-limit 20 $B/bin/cuda_tests \
    --gtest_filter='CudaOps.*:*AttentionOverAThousand*' > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?"; grep -E "ERROR SUMMARY|Invalid|out of bounds" "$OUT/memcheck.log" | head -10
  for m in 1b 3b; do
    makeLlama $m
    for cfg in JITLLM_CUDA_PDL=1 JITLLM_CUDA_PDL=0 JITLLM_CUDA_FUSE=0 JITLLM_CUDA_PDL=1; do
      echo "== $m $cfg"
      env $cfg timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 |
        tee -a "$OUT/bench-decode.txt" | grep -E "^# (pp|tg)"
    done
  done
  for d in $TUNE_DEFINES; do
    for m in 1b 3b; do
      echo "== $m JITLLM_CUDA_DEFINES=$d"
      JITLLM_CUDA_DEFINES=$d timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 0 -n 128 -r 3 2>&1 |
        tee -a "$OUT/bench-tune.txt" | grep -E "^# (pp|tg)"
    done
  done
  JITLLM_CUDA_PROFILE=1 $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 0 -n 64 -r 1 2>&1 | grep -E "calls" |
    sort -k4 -n -r | head -30
  if [ -n "${peer:-}" ]; then
    wait $peer
    tail -1 "$OUT/peer-setup.log"
    echo "llama.cpp built: $(( $(date +%s) - start )) s"
    for m in 1b 3b; do
      for round in 1 2; do
        timeout 150 /tmp/peer/bin/llama-bench -m /tmp/$m.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3 2>&1 |
          tee -a "$OUT/llama-bench-$m.txt" | grep -E "pp512|tg128" | sed "s/^/$m llama.cpp r$round: /"
        timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 |
          tee -a "$OUT/jitllm-bench-$m.txt" | grep -E "^# (pp|tg)" | sed "s/^/$m jitllm r$round: /"
      done
    done
  fi
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = profile ]; then
  # All CUDA tests, a memory check of the ops, where prefill's time goes (each launch timed alone,
  # 1B and 3B, pp512) and Nsight Compute's counters for the prefill products.
  cudaTests '*' 60
  echo "tests: $(( $(date +%s) - start )) s"
  sanitize memcheck 'CudaOps.*' memcheck.log 150
  for m in 1b 3b; do
    makeLlama $m
    timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 | tee -a "$OUT/bench.txt" |
      grep -E "^# (pp|tg)" | sed "s/^/$m /"
    echo "== $m prefill profile (pp512, each launch alone)"
    JITLLM_CUDA_PROFILE=1 timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 0 -r 2 2>&1 |
      tee "$OUT/profile-prefill-$m.txt" | grep -E "calls" | sort -k4 -n -r | head -24
  done
  echo "== 1b decode profile"
  JITLLM_CUDA_PROFILE=1 $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 0 -n 64 -r 1 2>&1 | grep -E "calls" |
    sort -k4 -n -r | head -24
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  secs="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis"
  JITLLM_CUDA_GRAPHS=0 timeout 200 $NCU --clock-control none -k regex:matmul --launch-skip ${NCU_SKIP:-0} \
    --launch-count 8 $secs $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 512 -n 0 -r 1 > "$OUT/ncu-prefill.txt" 2>&1
  grep -E "matmul|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Grid Size|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Executed Ipc A|Stall|Pipe" \
    "$OUT/ncu-prefill.txt" | sed 's/  */ /g' | head -200
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = peer ]; then
  # GPU to GPU block moves (moveBlocksTo, copyToDevice) and the migration tests through them - on
  # one GPU between two devices of it, on two GPUs between them - with a memory check.
  $B/bin/cuda_tests --gtest_filter='*BlocksMove*:*Migrat*:*Gather*:*TwoDevicesOfOneGpu*:*TwoGpus*' 2>&1 |
    tee "$OUT/cuda_peer_tests.log" | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |migration|target:|Failure|Expected|Which is" | head -40
  $B/bin/migration_tests 2>&1 | tail -2
  sanitize memcheck '*BlocksMove*:*TwoDevicesOfOneGpu*' memcheck-peer.log 150
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = ab ]; then
  cudaTests '*' 40
  $B/bin/migration_tests 2>&1 | tail -2
  echo "tests: $(( $(date +%s) - start )) s"
  [ "${RACE:-1}" = 1 ] && sanitize racecheck '*Attention*:*TensorCore*' racecheck.log 90
  sanitize memcheck '*Attention*:*TensorCore*:CudaOps.Matmul*:CudaOps.Grouped*:*BlocksMove*' memcheck.log 150
  for m in 1b 3b; do
    makeLlama $m
    benchEach $m bench-ab.txt "-p 512 -n 128" JITLLM_DEFAULT=1 $AB
  done
  JITLLM_CUDA_PROFILE=1 timeout 100 $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 512 -n 0 -r 2 2>&1 |
    tee "$OUT/profile-prefill-1b.txt" | grep -E "calls" | sort -k4 -n -r | head -14
  JITLLM_CUDA_PROFILE=1 timeout 100 $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 0 -n 64 -r 1 2>&1 |
    tee "$OUT/profile-decode-1b.txt" | grep -E "calls" | sort -k4 -n -r | head -14
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = costs ]; then
  # What each kind of decode launch costs inside the step's graph: tg128 of $MODEL (1b) with the
  # launches whose names start with each of the default list's entries left out (JITLLM_CUDA_SKIP:
  # wrong values, the same step otherwise; leaving a producer out also loses the quantization fused
  # into it), then the settings of $AB.
  [ -n "${FILTER:-}" ] && cudaTests "$FILTER" 30
  m=${MODEL:-1b}
  dim=$([ "$m" = 3b ] && echo 3072 || echo 2048)  # the Llama-3.2 shape's embedding
  makeLlama $m
  # The GPU's time for each step's graph against the token's wall-clock time.
  JITLLM_CUDA_GRAPH_TIMES=1 timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 0 -n 128 -r 3 2>&1 |
    tee "$OUT/graph-times.txt" | grep -E "^# tg|graph of|host per"
  skips=("matmul_int_group t1 q4_K 8192" "matmul_int_group t1 q4_K $dim" "matmul_int q4_K ${dim}x$dim"
    "matmul_int q6_K ${dim}x8192" "matmul_int q4_K ${dim}x8192" "matmul_int q6_K 128256" attention rmsNorm ropeStore
    swiglu getRows copy)
  settings=(JITLLM_DEFAULT=1)
  for s in "${skips[@]}"; do settings+=("JITLLM_CUDA_SKIP=$s"); done
  benchEach $m bench-costs.txt "-p 0 -n 128" "${settings[@]}" JITLLM_DEFAULT=1 $AB
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = host ]; then
  # Where a decode step's wall-clock time goes: the GPU's time for its graph, the host's for the
  # flush, the wait, the read-back and everything between a read-back and the next flush
  # (JITLLM_CUDA_GRAPH_TIMES), by default and under each setting of $AB, 1B then 3B.
  for m in 1b 3b; do
    makeLlama $m
    for cfg in JITLLM_DEFAULT=1 $AB; do
      env JITLLM_CUDA_GRAPH_TIMES=1 "$cfg" timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 0 -n 128 -r 3 \
        2>&1 | tee -a "$OUT/host-$m.txt" | grep -E "^# tg|graph of|host per" | sed "s/^/$m $cfg /"
    done
  done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = verify ]; then
  # A short check of one change: the CUDA tests matching $FILTER, then jitllm-bench $ARGS on each of
  # $MODELS (default 1b) by default and under each setting of $AB.
  cudaTests "${FILTER:-*}" 30
  for m in ${MODELS:-1b}; do
    makeLlama $m
    benchEach $m bench-verify.txt "${ARGS:--p 0 -n 128}" JITLLM_DEFAULT=1 $AB
    # PROFILE=1: then each setting's per-op prefill profile (pp512, each launch alone), its top lines.
    [ "${PROFILE:-0}" = 1 ] && for cfg in JITLLM_DEFAULT=1 $AB; do
      echo "== $m $cfg: per-op prefill profile"
      env ${cfg//+/ } JITLLM_CUDA_PROFILE=1 timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 0 \
        -r 2 2>&1 | tee "$OUT/profile-$m-${cfg//[^A-Za-z0-9_]/_}.txt" | grep -E "calls" | sort -k4 -n -r | head -8
    done
  done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = quick ]; then
  # The 1B's pp512 + tg128 and where its prefill's time goes, nothing else (a few minutes of device time).
  makeLlama 1b
  benchEach 1b bench-quick.txt "-p 512 -n 128" JITLLM_DEFAULT=1
  JITLLM_CUDA_PROFILE=1 timeout 100 $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 512 -n 0 -r 2 2>&1 |
    tee "$OUT/profile-prefill-1b.txt" | grep -E "calls" | sort -k4 -n -r | head -14
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = final ]; then
  # One call for a session's record: llama.cpp (CUDA) builds in the background from the carried
  # .peer bundle while all CUDA tests and compute-sanitizer (racecheck of the shared-memory
  # kernels, memcheck of the ops) run, then decode A/Bs ($TUNE_DEFINES, $DECODE_ROWS), then
  # llama.cpp and jitllm side by side on the same files (a second round and context depth 4096
  # while the call's time allows). Needs .devshared and .peer carried.
  buildLlamaCppInBackground
  cudaTests '*' 40
  echo "tests: $(( $(date +%s) - start )) s"
  # RACE_LIMIT seconds (150: on 2026-12-03 the prefill attention test alone took 68 s under
  # racecheck, and the 90 s before ran out).
  sanitize racecheck "${RACE_FILTER:-*Attention*:*TensorCore*}" racecheck.log ${RACE_LIMIT:-150}
  sanitize memcheck "${MEMCHECK_FILTER:-*Attention*:*TensorCore*:*Gather*:*BlocksMove*}" memcheck.log 90
  for m in 1b 3b; do
    makeLlama $m
    mapfile -t settings < <(tuneSettings)
    benchEach $m bench-tune.txt "-p 0 -n 128" "${settings[@]}"
  done
  # $AB ("NAME=VALUE ...") against the default on the 1B, prefill and decode.
  [ -n "${AB:-}" ] && benchEach 1b bench-ab.txt "-p 512 -n 128" JITLLM_DEFAULT=1 $AB
  wait $peer
  tail -1 "$OUT/peer-setup.log"
  echo "llama.cpp built: $(( $(date +%s) - start )) s"
  for round in 1 2; do
    for m in 1b 3b; do
      [ $round = 2 ] && [ $(( $(date +%s) - start )) -gt ${ROUND2_BEFORE:-440} ] && break 2
      timeout 100 /tmp/peer/bin/llama-bench -m /tmp/$m.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3 2>&1 |
        tee -a "$OUT/llama-bench-$m.txt" | grep -E "pp512|tg128" | sed "s/^/$m llama.cpp r$round: /"
      timeout 60 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 |
        tee -a "$OUT/jitllm-bench-$m.txt" | grep -E "^# (pp|tg)" | sed "s/^/$m jitllm r$round: /"
    done
  done
  for m in 1b 3b; do
    [ $(( $(date +%s) - start )) -gt ${DEPTH_BEFORE:-500} ] && break
    timeout 60 /tmp/peer/bin/llama-bench -m /tmp/$m.gguf -ngl 99 -fa 1 -p 0 -n 128 -d 4096 -r 3 2>&1 |
      tee -a "$OUT/llama-bench-$m.txt" | grep -E "tg128" | sed "s/^/$m llama.cpp: /"
    timeout 60 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 0 -n 128 -d 4096 -r 3 2>&1 |
      tee -a "$OUT/jitllm-bench-$m.txt" | grep -E "^# tg" | sed "s/^/$m jitllm: /"
  done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = depth ]; then
  # Decode from an empty context and after 4096 tokens, side by side with llama.cpp (built in the
  # background meanwhile from the carried .peer bundle), after the CUDA tests matching $FILTER and
  # a memcheck of $MEMCHECK_FILTER; a failed test stops the call there. Then jitllm under each
  # setting of $AB, from an empty context. Needs .devshared and .peer carried.
  buildLlamaCppInBackground
  tests=$(cudaTests "${FILTER:-*Attention*:CudaDevices.*}" 30)
  echo "$tests"
  if grep -q "FAILED" <<< "$tests"; then
    kill $peer 2>/dev/null
    exit 1
  fi
  sanitize memcheck "${MEMCHECK_FILTER:-*AttentionOver*}" memcheck.log 120
  for m in 1b 3b; do makeLlama $m; done
  wait $peer
  tail -1 "$OUT/peer-setup.log"
  echo "llama.cpp built: $(( $(date +%s) - start )) s"
  for m in 1b 3b; do
    timeout 100 /tmp/peer/bin/llama-bench -m /tmp/$m.gguf -ngl 99 -fa 1 -p 0 -n 128 -d 0,4096 -r 3 2>&1 |
      tee -a "$OUT/llama-bench-$m.txt" | grep -E "tg128" | sed "s/^/$m llama.cpp: /"
    # jitllm's default KV cache is fp32; llama.cpp's is fp16 (its pages hold half the bytes).
    for d in 0 4096; do
      for kv in ${KVS:-f32 f16}; do
        timeout 60 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 0 -n 128 -d $d -r 3 --kv $kv 2>&1 |
          tee -a "$OUT/jitllm-bench-$m.txt" | grep -E "^# tg" | sed "s/^/$m jitllm kv $kv: /"
      done
    done
  done
  for m in 1b 3b; do [ -n "${AB:-}" ] && benchEach $m bench-ab.txt "-p 0 -n 128" JITLLM_DEFAULT=1 $AB; done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = prefill ]; then
  # Prefill's kernels: their tests ($FILTER), compute-sanitizer memcheck, racecheck and synccheck
  # of $SANITIZE (shared-memory pipelines), pp512 + tg128 (with JITLLM_CUDA_MMA=0 too when AB=1),
  # where prefill's time goes, and with NCU=1 Nsight Compute's counters for the first layer's
  # products and a prefill attention launch.
  $B/bin/cuda_tests --gtest_filter="${FILTER:-*TensorCore*:*Prefill*:*TeacherForced*:CudaOps.*}" 2>&1 |
    tee "$OUT/cuda_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|token " | head -40
  for tool in memcheck racecheck synccheck; do sanitize $tool "${SANITIZE:-*TensorCore*}" $tool.log; done
  echo "tests: $(( $(date +%s) - start )) s"
  for m in 1b 3b; do
    makeLlama $m
    benchEach $m bench-prefill.txt "-p 512 -n 128" JITLLM_CUDA_MMA=1 ${AB:+JITLLM_CUDA_MMA=0 JITLLM_CUDA_MMA=1}
    mapfile -t settings < <(DECODE_ROWS= tuneSettings)
    benchEach $m bench-tune.txt "-p 512 -n 128" "${settings[@]}"
    mapfile -t settings < <(TUNE_DEFINES= tuneSettings)
    benchEach $m bench-rows.txt "-p 0 -n 128" "${settings[@]}"
    JITLLM_CUDA_PROFILE=1 timeout 100 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 0 -r 2 2>&1 |
      tee "$OUT/profile-prefill-$m.txt" | grep -E "calls" | sort -k4 -n -r | head -16
  done
  if [ -n "${NCU:-}" ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    secs="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis"
    JITLLM_CUDA_GRAPHS=0 timeout 150 $NCU --clock-control none -k regex:"matmul|attention" --launch-skip 0 --launch-count 9 \
      $secs $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 512 -n 0 -r 1 > "$OUT/ncu-prefill.txt" 2>&1
    grep -E "^  [a-z_]+ \(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Executed Ipc A|Mem Pipes" \
      "$OUT/ncu-prefill.txt" | sed 's/  */ /g' | head -150
  fi
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = tune ]; then
  # The integer kernels' rows per warp ("decode prefill" pairs in $TUNE), then a profile.
  makeLlama 1b
  for cfg in ${TUNE:-"0,0"}; do
    echo "== decode rows ${cfg%,*}, prefill rows ${cfg#*,} (0: default)"
    JITLLM_CUDA_INT_DECODE_ROWS=${cfg%,*} JITLLM_CUDA_INT_PREFILL_ROWS=${cfg#*,} \
      $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 | grep -E "^# (pp|tg)"
  done
  for fuse in 0 1; do
    echo "== JITLLM_CUDA_FUSE=$fuse"
    JITLLM_CUDA_FUSE=$fuse $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 0 -n 128 -r 3 2>&1 | grep -E "^# tg"
  done
  # Decode only (each launch timed alone, so nothing is fused here).
  JITLLM_CUDA_PROFILE=1 $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 0 -n 64 -r 1 2>&1 | grep -E "calls" |
    sort -k4 -n -r | head -40
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = ncu ]; then
  # Hardware counters of the decode matrix products (one layer's seven and the output head).
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  makeLlama 1b
  secs="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis"
  JITLLM_CUDA_GRAPHS=0 timeout 300 $NCU --clock-control none -k regex:matmul_int --launch-skip ${NCU_SKIP:-80} \
    --launch-count 8 $secs $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 0 -n 4 -r 1 > "$OUT/ncu-layer.txt" 2>&1
  JITLLM_CUDA_GRAPHS=0 timeout 200 $NCU --clock-control none -k regex:attention --launch-skip 20 --launch-count 2 $secs \
    $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 0 -n 4 -r 1 > "$OUT/ncu-head.txt" 2>&1
  grep -E "matmul|Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Grid Size|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Executed Ipc A" \
    "$OUT/ncu-layer.txt" "$OUT/ncu-head.txt" | sed 's/  */ /g' | head -230
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = ncu-lines ]; then
  # Where one kernel's warps stall, line by line: Nsight Compute's full set (PC sampling included)
  # on one launch of $KERNEL (a regex; attention_split unless set) in jitllm-bench $ARGS on $MODEL
  # (1b), the kernels compiled with line info and their sources written out
  # (JITLLM_CUDA_SOURCE_DIR; an empty kernel cache, so every module is compiled and written). The
  # report, its details and its per-line table (CSV) go to $OUT.
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  m=${MODEL:-1b}
  makeLlama $m
  export JITLLM_CACHE_DIR=/tmp/jitllm-cache-lines JITLLM_CUDA_SOURCE_DIR=/tmp/jitllm-sources
  rm -rf "$JITLLM_CACHE_DIR" "$JITLLM_CUDA_SOURCE_DIR"
  JITLLM_CUDA_GRAPHS=0 timeout 300 "$NCU" --set full --import-source yes --clock-control none \
    -k regex:"${KERNEL:-attention_split}" --launch-skip "${NCU_SKIP:-40}" --launch-count 1 -o "$OUT/lines" \
    $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 ${ARGS:--p 0 -n 4 -d 4096} -r 1 > "$OUT/ncu-lines.log" 2>&1
  "$NCU" --import "$OUT/lines.ncu-rep" --page details > "$OUT/lines-details.txt" 2>&1
  "$NCU" --import "$OUT/lines.ncu-rep" --page source --csv --print-source cuda > "$OUT/lines-source.csv" 2>&1
  # (On 2026-12-02 the CUDA-source CSV came without metric columns; the SASS view has them per
  # instruction, each with its source line when line info is there.)
  "$NCU" --import "$OUT/lines.ncu-rep" --page source --csv --print-source sass > "$OUT/lines-sass.csv" 2>&1
  "$NCU" --import "$OUT/lines.ncu-rep" --page raw --csv > "$OUT/lines-raw.csv" 2>&1
  head -3 "$OUT/lines-sass.csv" | cut -c1-600
  grep -E "Duration|Registers Per|Achieved Occupancy|No Eligible|Warp Cycles Per Issued" "$OUT/lines-details.txt" |
    sed 's/  */ /g'
  head -2 "$OUT/lines-source.csv" | cut -c1-400
  # One file back per launch looked at (the device tool returns a handful of files a call): the
  # report's tables in lines-KERNEL-SKIP.tgz; the report itself only with KEEP_REP=1.
  name=$(echo "${KERNEL:-attention_split}-${NCU_SKIP:-40}" | tr -c 'A-Za-z0-9_.\n-' '_')
  [ "${KEEP_REP:-0}" = 1 ] || rm -f "$OUT/lines.ncu-rep"
  rm -f "$OUT/lines-raw.csv"
  (cd "$OUT" && tar czf "lines-$name.tgz" lines-details.txt lines-source.csv lines-sass.csv ncu-lines.log &&
    rm -f lines-details.txt lines-source.csv lines-sass.csv ncu-lines.log)
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = ops ]; then
  # jitllm-opbench OP ARGS on cuda:0 under the environment settings CFG ("A=1+B=2": both), its
  # result lines labelled.
  opbench() {
    local cfg=$1
    shift
    env ${cfg//+/ } timeout 120 $B/bin/jitllm-opbench "$@" --device cuda:0 -r ${REPS:-200} 2>&1 |
      grep -E "^(attention|matmul) |error" | sed "s/^/$cfg /" | tee -a "$OUT/ops.txt"
  }
  # Each setting's runs alternate with the others', so a drift of the machine hits them alike.
  for round in 1 2; do
    for cfg in JITLLM_DEFAULT=1 $AB; do
      for kv in ${KVS:-f32 f16}; do
        opbench "$cfg" attention --heads 32 --kv-heads 8 --head-dim 64 --context ${CONTEXTS:-128,1024,4096} --kv $kv
        opbench "$cfg" attention --heads 24 --kv-heads 8 --head-dim 128 --context ${CONTEXTS:-128,1024,4096} --kv $kv
      done
      [ "${PRODUCTS:-1}" = 0 ] && continue
      for shape in "q4_K 8192 2048" "q4_K 2048 8192" "q6_K 2048 8192" "q4_K 2048 2048" "q6_K 128256 2048"; do
        set -- $shape
        opbench "$cfg" matmul --type $1 --rows $2 --cols $3
      done
    done
  done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = phases ]; then
  # Decode attention's blocks, phase by phase (attention.cuh: JL_ATTN_TIMING prints each sampled
  # block's intervals in cycles); the medians per model, folding blocks apart from the others.
  for m in ${MODELS:-1b 3b}; do
    makeLlama $m
    JITLLM_CUDA_GRAPHS=0 JITLLM_CUDA_DEFINES=JL_ATTN_TIMING=1${DEFINES:+,$DEFINES} timeout 100 \
      $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 0 -n 2 -d ${DEPTH:-4096} -r 1 > "$OUT/phases-$m.txt" 2>&1
    python3 - "$OUT/phases-$m.txt" "$m" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("ATT ")]
for folds in ("0", "1"):
    group = [r for r in rows if r[4] == folds]
    if not group:
        continue
    names = [r[i] for r in group[:1] for i in range(9, len(r), 2)]
    medians = {n: statistics.median(int(r[r.index(n) + 1]) for r in group) for n in names}
    ns = statistics.median((int(r[8]) - int(r[6])) % 2**32 for r in group)
    print(sys.argv[2], "folding" if folds == "1" else "other", len(group), "blocks; cycles:",
          " ".join(f"{n} {v:.0f}" for n, v in medians.items()), f"; block {ns:.0f} ns")
PY
  done
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" = migrate ]; then
  $B/bin/cuda_tests --gtest_filter='*Migrat*' 2>&1 | tee "$OUT/cuda_migration_tests.log" |
    grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |migration|Failure|Expected|Which is" | head -60
  $B/bin/migration_tests 2>&1 | tail -3
  $B/bin/jitllm-mkmodel tiny q4_k_m /tmp/tiny.gguf --shared "$SHARED" > /dev/null
  $B/bin/jitllm-mkmodel llama-3.2-1b q4_k_m /tmp/1b.gguf --shared "$SHARED" > /dev/null
  gpus=$(nvidia-smi -L | wc -l)
  if [ "$gpus" -ge 2 ]; then
    echo "== tiny cuda:0,cuda:1"
    timeout 120 $B/bin/jitllm-migrate-bench /tmp/tiny.gguf --devices cuda:0,cuda:1 --sessions 4 --repeat 4 \
      2>&1 | tee "$OUT/migrate-tiny-cuda-cuda.txt"
    echo "== 1b cuda:0,cuda:1"
    timeout 150 $B/bin/jitllm-migrate-bench /tmp/1b.gguf --devices cuda:0,cuda:1 --sessions 1 --repeat 2 \
      --contexts 512,2048,8192 2>&1 | tee "$OUT/migrate-1b-cuda-cuda.txt"
  fi
  echo "== tiny cuda:0,cpu:0"
  timeout 100 $B/bin/jitllm-migrate-bench /tmp/tiny.gguf --devices cuda:0,cpu:0 --sessions 4 --repeat 2 \
    --contexts 512,2048,8192 2>&1 | tee "$OUT/migrate-tiny-cuda-cpu.txt"
  echo "total: $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$what" != bench ]; then
  $B/bin/cuda_tests 2>&1 | tee "$OUT/cuda_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |nmse|sm_|Failure|error|Expected|Which is|actual|differ|budget|compil" | head -150
  echo "tests: $(( $(date +%s) - start )) s"
  if [ "$what" = tests ] && command -v compute-sanitizer > /dev/null; then
    timeout 180 compute-sanitizer --tool memcheck --print-limit 20 $B/bin/cuda_tests --gtest_filter='CudaOps.*' \
      > "$OUT/memcheck.log" 2>&1
    echo "memcheck exit $?"; grep -E "ERROR SUMMARY|Invalid|out of bounds" "$OUT/memcheck.log" | head -20
  fi
fi
if [ "$what" != tests ]; then
  makeLlama 1b
  $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 | tee "$OUT/bench-1b.txt"
  JITLLM_CUDA_PROFILE=1 $B/bin/jitllm-bench /tmp/1b.gguf --device cuda:0 -p 512 -n 32 -r 1 > "$OUT/profile-1b.txt" 2>&1
  grep -A40 "kernel time by op" "$OUT/profile-1b.txt" | sort -t'%' -k1 | tail -25
  if [ "$what" = all3b ]; then
    makeLlama 3b
    $B/bin/jitllm-bench /tmp/3b.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 | tee "$OUT/bench-3b.txt"
  fi
fi
echo "total: $(( $(date +%s) - start )) s"
