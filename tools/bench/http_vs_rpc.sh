#!/usr/bin/env bash
# What HTTP streaming costs next to Cap'n Proto (issue 29's target: HTTP aggregate tok/s >= 0.95x
# RPC's at 8 clients on CPU, TTFT at most 1 ms more): one jitllmd with one model, the same load on
# each transport - C clients at once, P-token prompts, N tokens each (end of text ignored) - from
# jitllm-serve-bench, whose HTTP clients (--http) run on the same one-thread KJ loop as its RPC
# clients, so both sides cost the machine alike. The two alternate R times (a shared machine's
# noise hits both); each line is one side's best of 3 rounds after a warm-up.
#   tools/bench/http_vs_rpc.sh [MODEL.gguf] [-c 8] [-p 16] [-n 128] [-r 5] [--threads T]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
MODEL=${1:-$ROOT/../shared/models/stories260K.gguf}
shift || true
C=8 P=16 N=128 R=5 THREADS=0
while (($#)); do
  case $1 in
    -c) C=$2; shift 2 ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d)
DAEMON=
trap '[[ -n "$DAEMON" ]] && kill "$DAEMON" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
"$BIN/jitllmd" --socket "$WORK/rpc.sock" --devices cpu:0 --threads "$THREADS" --http "unix:$WORK/http.sock" \
  --preload "bench=$MODEL" --scheduler-interval-ms 0 --log-level warn 2>"$WORK/log" &
DAEMON=$!
for _ in $(seq 600); do
  curl -sf --unix-socket "$WORK/http.sock" http://localhost/health >/dev/null 2>&1 && break
  sleep 0.1
done
echo "# $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "$(basename "$MODEL"), $C clients, $P prompt tokens, $N generated each"
bench() { "$BIN/jitllm-serve-bench" --socket "$WORK/rpc.sock" --model bench -c "$C" -p "$P" -n "$N" -r 3 --warmup --json "$@" | tail -1; }
for _ in $(seq "$R"); do
  bench
  bench --http "$WORK/http.sock"
done
