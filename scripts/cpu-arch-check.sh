#!/usr/bin/env bash
# The new architectures' CPU rows (issue 30: qwen3-0.6b and gemma3-1b Q4_K_M, decode and prefill)
# side by side with llama.cpp built for the same CPU, on a machine where the tree is not built (the
# GPU machine's Xeon), right after `NATIVE_PEER=1 bash scripts/cpu-isa-check.sh all` started the
# native llama.cpp build on that warm machine:
#   scripts/prepare-gpu-carry.sh --cpu --archs --no-peer
#   run(command="bash scripts/cpu-arch-check.sh", carry=[".carry-cpu", ".devshared"])
# Both engines on cores 0-1 with 2 threads, alternating, ROUNDS (3) times:
#   jitllm-bench M -t 2 -p 128 -n 32 -r 2      llama-bench -m M -t 2 -p 128 -n 32 -r 2
# jitllm on its best path here (JITLLM_ISA unset). Logs under $OUT.
set -uo pipefail
C=$PWD/.carry-cpu OUT=${OUT:-/tmp/cpu-arch-out} PEER=/tmp/peer-native M=/tmp/cpu-isa-models
ROUNDS=${ROUNDS:-3} SHAPES=${SHAPES:-qwen3-0.6b gemma3-1b}
mkdir -p "$OUT" "$M"
if [ -f "$C/bin.tar.xz" ] && [ ! -x "$C/bin/jitllm-bench" ]; then tar -C "$C" -xJf "$C/bin.tar.xz"; fi
[ -d "$C/bin" ] && C=$C/bin
lscpu | grep -E "Model name|^CPU\(s\)|L2|L3" | tee "$OUT/cpu.txt"
for s in $SHAPES; do "$C/jitllm-mkmodel" $s q4_k_m $M/$s-q4_k_m.gguf --shared .devshared > /dev/null & done
waited=0
while [ -f /tmp/peer-native-setup.log ] && ! grep -q "^exit" /tmp/peer-native-setup.log && [ $waited -lt 400 ]; do
  sleep 5
  waited=$((waited + 5))
done
wait
[ -f /tmp/peer-native-setup.log ] && cp /tmp/peer-native-setup.log "$OUT/"
[ -x $PEER/bin/llama-bench ] || echo "no native llama.cpp in $PEER (cpu-isa-check.sh all with NATIVE_PEER=1 first)"
jit() { taskset -c 0,1 "$C/jitllm-bench" "$1" -t 2 -p 128 -n 32 -r 2 2>&1 | grep -E "^(pp|tg)" | tr '\n' ' '; }
peer() { LD_LIBRARY_PATH=$PEER/bin taskset -c 0,1 $PEER/bin/llama-bench -m "$1" -t 2 -p 128 -n 32 -r 2 2>&1 |
  awk -F'|' '/pp128|tg32/ {gsub(/ /, "", $7); split($8, v, " "); printf "%s %s ", $7, v[1]}'; }
{
  # The device line names jitllm's path here (the first run also measures this CPU's tuning).
  taskset -c 0,1 "$C/jitllm-bench" $M/$(echo $SHAPES | cut -d' ' -f1)-q4_k_m.gguf -t 2 -p 16 -n 4 -r 1 2>&1 | head -3
  for r in $(seq $ROUNDS); do
    for s in $SHAPES; do
      f=$M/$s-q4_k_m.gguf
      echo "$s round $r jitllm: $(jit $f)| llama.cpp native: $([ -x $PEER/bin/llama-bench ] && peer $f)"
    done
  done
} 2>&1 | tee "$OUT/arch-side-by-side.log"
