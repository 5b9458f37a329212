#!/bin/bash
#: serve     carried .carry-serve binaries (prepare-gpu-carry.sh --serve): load time and first TTFT
#:           on a cold and a warm kernel cache, in-process tg, then tools/bench/run SERVE_CASES
#:
#: Builds nothing; carry .devshared and .carry-serve (scripts/prepare-gpu-carry.sh --serve), and
#: .peer for llama.cpp, or start it first with peer.sh on the same warm machine, e.g.
#:   run(command="bash scripts/gpu/serve.sh", carry=[".devshared", ".carry-serve"], timeout_s=600)
#: Environment (all optional):
#:   SERVE_CASES       tools/bench/run's serve cases (default "cuda-1b-q4km-serve cuda-3b-q4km-serve")
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
# shellcheck source=scripts/gpu/peer.sh
. scripts/gpu/peer.sh

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

gpuMain serve startLlamaCpp serve
