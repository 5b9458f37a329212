#!/usr/bin/env bash
# Time to first token of a conversation's second turn, with idle sessions (jitllmd's default) and
# without (idle_sessions = 0): the second prompt is the first one, its reply and a few more words,
# as a chat client sends it. Each setting gets its own jitllmd, started here.
#   tools/bench/followup_ttft.sh MODEL.gguf [THREADS] [REPEATS_OF_THE_SENTENCE]
# CTX (default 4096): the session's context limit, at most the model's trained context.
set -euo pipefail
model=$(realpath "$1")
threads=${2:-2}
repeats=${3:-30}
bin=$(dirname "$0")/../../build/bin
dir=$(mktemp -d)
daemon=""
stopDaemon() {
  [ -n "$daemon" ] || return 0
  kill "$daemon" 2> /dev/null || true
  wait "$daemon" 2> /dev/null || true
  daemon=""
}
trap 'stopDaemon; rm -rf "$dir"' EXIT
prompt=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog near the river bank.'] * $repeats))")
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }
for idle in 4 0; do
  echo "idle_sessions = $idle" > "$dir/conf"
  "$bin/jitllmd" --config "$dir/conf" --socket "$dir/s" --devices cpu:0 --threads "$threads" \
    --model-dir "$(dirname "$model")" --log-level warn > "$dir/log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S "$dir/s" ] && break; sleep 0.1; done
  ctl="$bin/jitllmctl --socket $dir/s"
  $ctl load "$model" --name m --ctx "${CTX:-4096}" > /dev/null
  first=$($ctl --json run m "$prompt" -n 16)
  reply=$(echo "$first" | field "['text']")
  second=$($ctl --json run m "$prompt$reply And then" -n 16)
  printf 'idle_sessions=%s  turn 1: %s prompt tokens, TTFT %.0f ms   turn 2: %s prompt tokens (%s reused), TTFT %.0f ms\n' \
    "$idle" "$(echo "$first" | field "['stats']['promptTokens']")" "$(echo "$first" | field "['stats']['timeToFirstTokenMs']")" \
    "$(echo "$second" | field "['stats']['promptTokens']")" "$(echo "$second" | field "['stats']['reusedTokens']")" \
    "$(echo "$second" | field "['stats']['timeToFirstTokenMs']")"
  stopDaemon
  rm -f "$dir/s"
done
