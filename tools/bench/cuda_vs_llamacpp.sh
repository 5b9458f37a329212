#!/bin/bash
# jitllm against llama.cpp on one NVIDIA GPU, side by side in one call of the device tool:
# builds jitllm (CUDA) and llama.cpp (CUDA, from the carried git bundle - the GPU machine has no
# registry), makes random-weight Llama-3.2-1B and 3B shapes in Q4_K_M with jitllm-mkmodel, and runs
# both engines' benchmarks on the same files, alternating engines, with the same -p/-n/-r.
#
# Carry .devshared (vocab/, models/, and peer/ = a copy of ../shared/peer) and .peer (made here by
# `../shared/peer/setup --bundle .peer`):
#   run(command="bash tools/bench/cuda_vs_llamacpp.sh", carry=[".devshared", ".peer"])
# Env: MODELS (default "1b 3b"), DEPTHS (decode at these context depths too, default "4096").
# Logs and results go to $OUT.
set -o pipefail
OUT=${OUT:-/tmp/jitllm-gpu-out}
mkdir -p "$OUT"
SHARED=$PWD/.devshared
B=/tmp/jitllm-build
PEER=/tmp/peer
export JITLLM_CACHE_DIR=/tmp/jitllm-cache
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

# llama.cpp builds in the background (its CUDA kernels take minutes); jitllm beside it.
(
  JITLLM_PEER_DIR=$PEER JITLLM_PEER_BUNDLE=$PWD/.peer/llama.cpp.bundle PEER_TARGETS="llama-bench" \
    PEER_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" bash "$SHARED/peer/setup" > "$OUT/peer-setup.log" 2>&1
  echo "exit $?" >> "$OUT/peer-setup.log"
) &
peer=$!
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DJITLLM_FUZZ=OFF -DJITLLM_VULKAN=OFF \
  -DJITLLM_SHARED_DIR="$SHARED" -DCMAKE_CXX_FLAGS="-include cstdint" > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j8 --target jitllm-bench jitllm-mkmodel >> "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
echo "jitllm built: $(elapsed)"
for m in ${MODELS:-1b 3b}; do
  $B/bin/jitllm-mkmodel llama-3.2-$m q4_k_m /tmp/$m.gguf --shared "$SHARED" > /dev/null || echo "mkmodel $m failed"
done
wait $peer
tail -2 "$OUT/peer-setup.log"
echo "llama.cpp built: $(elapsed)"
LB=$PEER/bin/llama-bench
for m in ${MODELS:-1b 3b}; do
  echo "== llama-3.2-$m Q4_K_M ($(du -h /tmp/$m.gguf | cut -f1))"
  for round in 1 2; do
    timeout 150 $LB -m /tmp/$m.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3 2>&1 | tee -a "$OUT/llama-bench-$m.txt" |
      grep -E "pp512|tg128" | sed "s/^/llama.cpp r$round: /"
    timeout 150 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 512 -n 128 -r 3 2>&1 |
      tee -a "$OUT/jitllm-bench-$m.txt" | grep -E "^# (pp|tg)" | sed "s/^/jitllm r$round: /"
  done
  for d in ${DEPTHS-4096}; do
    timeout 150 $LB -m /tmp/$m.gguf -ngl 99 -fa 1 -p 0 -n 128 -d "$d" -r 3 2>&1 | tee -a "$OUT/llama-bench-$m.txt" |
      grep -E "tg128" | sed "s/^/llama.cpp d$d: /"
    timeout 150 $B/bin/jitllm-bench /tmp/$m.gguf --device cuda:0 -p 0 -n 128 -d "$d" -r 3 2>&1 |
      tee -a "$OUT/jitllm-bench-$m.txt" | grep -E "^# tg" | sed "s/^/jitllm d$d: /"
  done
done
echo "total: $(elapsed)"
