#!/usr/bin/env bash
# The CPU's prompt path side by side: for each model, alternating, jitllm-bench with the prompt path
# off (JITLLM_CPU_PROMPT_BYTES=0), then on (the default), then llama-bench, all with 2 threads:
#   jitllm-bench M -t 2 -p 128 -n 32 -r 2      llama-bench -m M -t 2 -p 128 -n 32 -r 2
# usage: scripts/cpu-prompt-bench.sh [native|avx2] ROUNDS MODEL.gguf...
#   native: jitllm's best path here, llama.cpp from ../shared/peer/setup (~/.cache/jitllm-peer/bin)
#   avx2:   JITLLM_ISA=avx2, llama.cpp built for AVX2 only, made once by
#           JITLLM_PEER_DIR=/tmp/peer-avx2 PEER_TARGETS=llama-bench PEER_CMAKE_ARGS='-DGGML_NATIVE=OFF
#           -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF' ../shared/peer/setup
# PEER_BIN overrides llama.cpp's bin directory; JITLLM_BIN jitllm's (default build/bin).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:?native or avx2}
rounds=${2:?rounds}
shift 2
bin=${JITLLM_BIN:-build/bin}
if [ "$mode" = avx2 ]; then
  peer=${PEER_BIN:-/tmp/peer-avx2/bin}
  export JITLLM_ISA=avx2
else
  peer=${PEER_BIN:-$HOME/.cache/jitllm-peer/bin}
fi
[ -x "$peer/llama-bench" ] || { echo "no llama-bench in $peer" >&2; exit 1; }
rates() { grep -E "^(pp|tg)" | tr '\n' ' '; }
for r in $(seq "$rounds"); do
  for m in "$@"; do
    off=$(JITLLM_CPU_PROMPT_BYTES=0 "$bin/jitllm-bench" "$m" -t 2 -p 128 -n 32 -r 2 2>&1 | rates)
    on=$("$bin/jitllm-bench" "$m" -t 2 -p 128 -n 32 -r 2 2>&1 | rates)
    peerRates=$("$peer/llama-bench" -m "$m" -t 2 -p 128 -n 32 -r 2 2>&1 | grep -E "pp128|tg32" |
      awk -F'|' '{print $7 $8}' | tr -s ' ' | tr '\n' ' ')
    echo "$mode round $r $(basename "$m") | prompt path off: $off| on: $on| llama.cpp: $peerRates"
  done
done
