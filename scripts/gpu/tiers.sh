#!/bin/bash
#: tiers     the service tiers' trace through a carried jitllmd (1B, cuda:0): fifo against tiers
#:
#: Builds nothing; carry .devshared and .carry-serve (scripts/prepare-gpu-carry.sh --serve), e.g.
#:   run(command="bash scripts/gpu/tiers.sh", carry=[".devshared", ".carry-serve"], timeout_s=600)
#: Environment (all optional):
#:   TIER_TRACE_ARGS   jitllm-serve-bench --make-trace's options, a load that keeps the GPU busy (default
#:                     "--duration 20 --interactive-rate 4 --interactive-prompt 64 --interactive-tokens 128
#:                     --batch-jobs 16 --batch-rate 16 --batch-prompt 2048 --batch-tokens 64 --seed 1")
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

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

gpuMain tiers tiers
