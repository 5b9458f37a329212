#!/usr/bin/env bash
# Decode speed and time to first token through jitllmd (over its socket, via jitllmctl) against
# jitllm-run in-process, same model, same prompt, side by side in one run.
#   tools/bench/daemon_vs_inprocess.sh [MODEL] [TOKENS] [REPS]
# Defaults: ../shared/models/stories260K.gguf, 200 tokens, 5 repetitions, 2 threads each.
# The daemon runs as this user on a private socket and is stopped at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=$(realpath "${1:-$ROOT/../shared/models/stories260K.gguf}")
N=${2:-200}
REPS=${3:-5}
THREADS=${THREADS:-2}
BIN=$ROOT/build/bin
PROMPT="Once upon a time"
DIR=$(mktemp -d)
SOCK=$DIR/jitllmd.sock
"$BIN/jitllmd" --socket "$SOCK" --threads "$THREADS" --log-level warn 2>"$DIR/jitllmd.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 100); do [[ -S $SOCK ]] && break; sleep 0.05; done
"$BIN/jitllmctl" --socket "$SOCK" load "$MODEL" --name bench >/dev/null
echo "# $(date -u +%Y-%m-%d) $(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, $(basename "$MODEL"), $N tokens, $REPS reps"
echo "| run | in-process TTFT ms | daemon TTFT ms | daemon TTFT, client wall ms | in-process tok/s | daemon tok/s | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$REPS"); do
  ip=$("$BIN/jitllm-run" "$MODEL" -p "$PROMPT" -n "$N" --threads "$THREADS" | sed -n 's/^timing: prompt [0-9]* tok \([0-9.]*\) s.*(\([0-9.]*\) tok\/s)$/\1 \2/p')
  read -r ipPrompt ipRate <<<"$ip"
  start=$(date +%s.%N)
  json=$("$BIN/jitllmctl" --socket "$SOCK" --json run bench "$PROMPT" -n "$N" | tail -1)
  wall=$(echo "($(date +%s.%N) - $start) * 1000" | bc -l)
  dTtft=$(echo "$json" | sed -n 's/.*"timeToFirstTokenMs":\([0-9.e+-]*\).*/\1/p')
  dRate=$(echo "$json" | sed -n 's/.*"tokensPerSecond":\([0-9.e+-]*\).*/\1/p')
  dTotal=$(echo "$json" | sed -n 's/.*"totalMs":\([0-9.e+-]*\).*/\1/p')
  printf "| %d | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f |\n" "$r" "$(echo "$ipPrompt * 1000" | bc -l)" "$dTtft" \
    "$(echo "$wall - $dTotal + $dTtft" | bc -l)" "$ipRate" "$dRate" "$(echo "$dRate / $ipRate" | bc -l)"
done
