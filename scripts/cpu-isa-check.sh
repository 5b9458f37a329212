#!/usr/bin/env bash
# The CPU kernels on every instruction set a machine has, side by side with llama.cpp built for
# AVX2 only (-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF), for machines where the tree is
# not built (the GPU machine, whose Xeon has AVX2, AVX-VNNI, AVX-512 VNNI and AMX):
#   scripts/prepare-gpu-carry.sh --cpu   # .carry-cpu (test and bench binaries), .devshared, .peer
#   run(command="bash scripts/cpu-isa-check.sh peer", carry=[".devshared", ".peer"])  # starts the
#       llama.cpp build, which goes on after the call (the three do not fit one call's 64 MiB)
#   run(command="bash scripts/cpu-isa-check.sh", carry=[".carry-cpu", ".devshared"])  # on the warm
#       machine, within a minute or two: waits for that build, then tests and measures
# or, where a machine is taken back soon after a call (status: idle_release_s), all in one call:
#   run(command="bash scripts/cpu-isa-check.sh all", carry=[".carry-cpu", ".devshared", ".peer"])
#       builds llama.cpp (AVX2) in the foreground, then tests and measures (NATIVE_PEER=1: and
#       starts a native build for scripts/cpu-arch-check.sh)
# or, quickest, with llama.cpp built on the dev VM (PEER_AVX2=/tmp/peer-avx2 prepare-gpu-carry.sh
# --cpu packs its bin/ into .carry-cpu):
#   run(command="bash scripts/cpu-isa-check.sh", carry=[".carry-cpu", ".devshared"])
# Writes its logs under $OUT. MODELS (default "q4_k_m q6_k q8_0") picks the 1B shapes; the tiny
# Q4_K_M runs too (TINY=0: not). ISAS (default "avx2 avxvnni avx512vnni avx512amx") the jitllm
# paths for the first model. Both engines run on cores 0-1 with 2 threads, alternating, ROUNDS (2)
# times. MICRO=0 skips the microbenchmark. TUNE=1 runs `jitllm-bench --tune` on avx2 and on the fastest path (all cores: SMT measured).
# With .carry-cpu/jitllm-bench-old (prepare-gpu-carry.sh's OLD_BENCH), OLD_MODELS (default
# "q4_k_m q6_k q8_0") run old against new on OLD_ISAS ("avx512vnni avx512amx"): no-regression rows.
set -uo pipefail
C=$PWD/.carry-cpu OUT=${OUT:-/tmp/cpu-isa-out} PEER=/tmp/peer-avx2 M=/tmp/cpu-isa-models
MODELS=${MODELS:-q4_k_m q6_k q8_0} ISAS=${ISAS:-avx2 avxvnni avx512vnni avx512amx} ROUNDS=${ROUNDS:-2}
TINY=${TINY:-1} TUNE=${TUNE:-0} OLD_MODELS=${OLD_MODELS:-q4_k_m q6_k q8_0} OLD_ISAS=${OLD_ISAS:-avx512vnni avx512amx}
mkdir -p "$OUT" "$M"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|L2|L3" | tee "$OUT/cpu.txt"
lscpu -e >> "$OUT/cpu.txt"
grep -o -w -E "avx2|avx_vnni|avx512f|avx512_vnni|avx512_bf16|amx_int8" /proc/cpuinfo | sort | uniq -c >> "$OUT/cpu.txt"

# llama.cpp for AVX2 only, built in the background (setsid: it survives the call that starts it).
PEER_LOG=/tmp/peer-avx2-setup.log
# .carry-cpu/bin.tar.xz (prepare-gpu-carry.sh --cpu) holds the binaries, and peer-avx2.tar.xz
# (its PEER_AVX2=dir) a llama.cpp AVX2 build made on the dev VM: no build here, no .peer to carry.
if [ -f "$C/peer-avx2.tar.xz" ] && [ ! -x $PEER/bin/llama-bench ]; then
  mkdir -p $PEER && tar -C $PEER -xJf "$C/peer-avx2.tar.xz" && echo "llama.cpp (AVX2) from the carry"
fi
if [ -f "$C/bin.tar.xz" ] && [ ! -x "$C/bin/jitllm-bench" ]; then tar -C "$C" -xJf "$C/bin.tar.xz"; fi
[ -d "$C/bin" ] && C=$C/bin
peerArgs() {
  echo "JITLLM_PEER_DIR=$PEER JITLLM_PEER_BUNDLE=/tmp/peer-src/llama.cpp.bundle PEER_TARGETS=llama-bench" \
    "PEER_CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF'"
}
if { [ "${1:-}" = peer ] || [ "${1:-}" = all ]; } && [ ! -x $PEER/bin/llama-bench ]; then
  [ -f .peer/llama.cpp.bundle ] || { echo "carry .peer to build llama.cpp" >&2; exit 1; }
  rm -rf /tmp/peer-src && mkdir -p /tmp/peer-src && cp -r .devshared/peer .peer/llama.cpp.bundle /tmp/peer-src/
  : > $PEER_LOG
  if [ "$1" = all ]; then
    # NATIVE_PEER=1: also llama.cpp built for this CPU, in the background, for
    # scripts/cpu-arch-check.sh in the next call (setsid: it survives this one).
    if [ "${NATIVE_PEER:-0}" = 1 ] && [ ! -x /tmp/peer-native/bin/llama-bench ]; then
      setsid bash -c "JITLLM_PEER_DIR=/tmp/peer-native JITLLM_PEER_BUNDLE=/tmp/peer-src/llama.cpp.bundle \
        PEER_TARGETS=llama-bench bash /tmp/peer-src/peer/setup > /tmp/peer-native-setup.log 2>&1; \
        echo exit \$? >> /tmp/peer-native-setup.log" < /dev/null > /dev/null 2>&1 &
    fi
    # In the foreground: the measurements below wait for it anyway.
    bash -c "$(peerArgs) timeout 360 bash /tmp/peer-src/peer/setup" >> $PEER_LOG 2>&1
    echo "exit $?" >> $PEER_LOG
    tail -2 $PEER_LOG
  else
    setsid bash -c "$(peerArgs) bash /tmp/peer-src/peer/setup >> $PEER_LOG 2>&1; echo exit \$? >> $PEER_LOG" \
      < /dev/null > /dev/null 2>&1 &
    echo "llama.cpp (AVX2) build started; log $PEER_LOG"
    exit 0
  fi
elif [ "${1:-}" = peer ]; then
  echo "llama.cpp (AVX2) is built already"
  exit 0
fi
waitPeer() {
  local waited=0
  while [ -f $PEER_LOG ] && ! grep -q "^exit" $PEER_LOG && [ $waited -lt 300 ]; do sleep 5; waited=$((waited + 5)); done
  [ -f $PEER_LOG ] && cp $PEER_LOG "$OUT/peer-setup.log"
  [ -x $PEER/bin/llama-bench ] || echo "no llama.cpp (run this script's peer mode first): jitllm alone"
}

# The goldens are found where the binaries were built.
mkdir -p /work/main && [ -e /work/main/tests ] || ln -sfn "$PWD/tests" /work/main/tests
"$C/quant_tests" 2>&1 | grep -vE "^\[ +(RUN|OK) " > "$OUT/quant_tests.log"; tail -4 "$OUT/quant_tests.log"
# The activations (swiglu, geglu) on every ISA here, against float64.
"$C/cpu_tests" 2>&1 | grep -vE "^\[ +(RUN|OK) " > "$OUT/cpu_tests.log"; tail -2 "$OUT/cpu_tests.log"
"$C/runtime_tests" --gtest_filter='*EveryKernelVariant*:Model.TheThreadCount*' > "$OUT/runtime_tests.log" 2>&1
tail -2 "$OUT/runtime_tests.log"
if [ "${MICRO:-1}" = 1 ]; then
  REPS=10 PREFILL=2 taskset -c 0 "$C/matmul_microbench" 2048 8192 > "$OUT/microbench.log" 2>&1; cat "$OUT/microbench.log"
fi

if [ "$TUNE" = 1 ]; then
  JITLLM_ISA=avx2 JITLLM_CACHE_DIR=$OUT/tuned-avx2 "$C/jitllm-bench" --tune 2>&1 | tee -a "$OUT/tune.log"
  JITLLM_CACHE_DIR=$OUT/tuned "$C/jitllm-bench" --tune 2>&1 | tee -a "$OUT/tune.log"
fi
tiny=
[ "$TINY" = 1 ] && tiny=$M/tiny-q4_k_m.gguf
for q in $(echo $MODELS $OLD_MODELS | tr ' ' '\n' | sort -u); do
  "$C/jitllm-mkmodel" llama-3.2-1b $q $M/1b-$q.gguf --shared .devshared > /dev/null
done
[ -n "$tiny" ] && "$C/jitllm-mkmodel" tiny q4_k_m $tiny --shared .devshared > /dev/null
jit() { taskset -c 0,1 "${BENCH:-$C/jitllm-bench}" "$1" -t 2 -p 128 -n 32 -r 2 2>&1 | grep -E "^(pp|tg)" | tr '\n' ' '; }
if [ -x "$C/jitllm-bench-old" ]; then
  for q in $OLD_MODELS; do
    for isa in $OLD_ISAS; do
      for r in $(seq $ROUNDS); do
        echo "1b-$q $isa old: $(JITLLM_ISA=$isa BENCH=$C/jitllm-bench-old jit $M/1b-$q.gguf)"
        echo "1b-$q $isa new: $(JITLLM_ISA=$isa jit $M/1b-$q.gguf)"
      done
    done
  done 2>&1 | tee "$OUT/no-regression.log"
fi
waitPeer
peer() { LD_LIBRARY_PATH=$PEER/bin taskset -c 0,1 $PEER/bin/llama-bench -m "$1" -t 2 -p 128 -n 32 -r 2 2>&1 |
  awk -F'|' '/pp128|tg32/ {gsub(/ /, "", $7); split($8, v, " "); printf "%s %s ", $7, v[1]}'; }
{
  first=1
  for f in $(for q in $MODELS; do echo $M/1b-$q.gguf; done) $tiny; do
    for r in $(seq $ROUNDS); do
      isas=avx2; [ $first = 1 ] && isas=$ISAS
      for isa in $isas; do echo "$(basename $f) jitllm $isa: $(JITLLM_ISA=$isa jit $f)"; done
      [ -x $PEER/bin/llama-bench ] && echo "$(basename $f) llama.cpp avx2: $(peer $f)"
    done
    first=0
  done
} 2>&1 | tee "$OUT/side-by-side.log"
