#!/usr/bin/env bash
# Side-by-side CPU speed of jitllm and llama.cpp on the same GGUF files, in one run.
#   tools/bench/compare_llamacpp.sh [THREADS] [REPS]      (defaults: 2 threads, 5 repetitions)
# For each model it alternates llama-bench and jitllm-bench (pp128 and tg64, the same -t/-r), so
# both see the same machine state, and prints a markdown table with the ratios.
# Needs: a Release build in build/ (scripts/demo.sh makes one) and llama.cpp's tools from
# ../shared/peer/setup. On a CPU with AMX, llama.cpp v0.4.0's AMX kernels crash on quantized
# models; tests/goldens/make_goldens.sh builds a -mno-amx-int8 copy, which is used when present.
# Models: ../shared/models/stories260K.gguf, and random-weight ones made here with jitllm-mkmodel
# (cached in $MODELS, default /tmp/jitllm-bench-models): tiny q4_k_m, llama-3.2-1b q4_k_m/q6_k/q8_0.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=$(cd "$ROOT/../shared" && pwd)
THREADS=${1:-2}
REPS=${2:-5}
MODELS=${MODELS:-/tmp/jitllm-bench-models}
PEER=${JITLLM_PEER_DIR:-$HOME/.cache/jitllm-peer}
[[ -x ${PEER}-noamx/bin/llama-bench ]] && PEER=${PEER}-noamx
BIN=$ROOT/build/bin
mkdir -p "$MODELS"
make() {  # make SHAPE TYPE -> path
  local out="$MODELS/$1-$2.gguf"
  [[ -f $out ]] || "$BIN/jitllm-mkmodel" "$1" "$2" "$out" --shared "$SHARED" >&2
  echo "$out"
}
ROWS=("stories260K f32|$SHARED/models/stories260K.gguf")
for spec in "tiny q4_k_m" ${EXTRA_SHAPES:-"llama-3.2-1b q4_k_m" "llama-3.2-1b q6_k" "llama-3.2-1b q8_0"}; do
  ROWS+=("$spec|$(make $spec)")
done
echo "# $(date -u +%Y-%m-%d) $(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, $REPS reps, llama.cpp from $PEER"
echo "| model | llama.cpp pp128 | jitllm pp128 | ratio | llama.cpp tg64 | jitllm tg64 | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for row in "${ROWS[@]}"; do
  name=${row%%|*}; file=${row#*|}
  l=$("$PEER/bin/llama-bench" -m "$file" -t "$THREADS" -p 128 -n 64 -r "$REPS" -o csv 2>/dev/null |
      awk -F, 'NR>1 { gsub(/"/, ""); print $(NF-1) }' | tr '\n' ' ')
  read -r lpp ltg <<<"$l"
  j=$("$BIN/jitllm-bench" "$file" -t "$THREADS" -p 128 -n 64 -r "$REPS" | awk '/^pp|^tg/ { print $2 }' | tr '\n' ' ')
  read -r jpp jtg <<<"$j"
  printf "| %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n" "$name" "$lpp" "$jpp" \
    "$(echo "$jpp / $lpp" | bc -l)" "$ltg" "$jtg" "$(echo "$jtg / $ltg" | bc -l)"
done
