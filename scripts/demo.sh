#!/usr/bin/env bash
# The main job: install what jitllm needs, build it, start jitllmd as this user with two CPU
# devices, load a model and stream a reply through jitllmctl while the model's layers move from
# cpu:0 to cpu:1 and back (live migration: the pause and "0 tokens recomputed" are printed, and
# the reply is compared with one that never moved), then stop the daemon.
#   scripts/demo.sh [MODEL.gguf] [PROMPT]
# MODEL defaults to ../shared/models/stories260K.gguf when that exists; otherwise name one.
# Installing needs root (apt-get); the daemon and the client run as whoever runs this.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEFAULT_MODEL="$ROOT/../shared/models/stories260K.gguf"
MODEL=${1:-}
PROMPT=${2:-Once upon a time}
if [[ -z $MODEL ]]; then
  if [[ -f $DEFAULT_MODEL ]]; then
    MODEL=$DEFAULT_MODEL
  else
    echo "usage: $0 MODEL.gguf [PROMPT]   (no $DEFAULT_MODEL here to default to)" >&2
    exit 2
  fi
fi
[[ -f $MODEL ]] || { echo "$0: no such model: $MODEL" >&2; exit 2; }
MODEL=$(realpath "$MODEL")

if [[ $(id -u) == 0 ]]; then "$ROOT/scripts/install-deps.sh"; fi
cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$ROOT/build" --target jitllmd jitllmctl jitllm-run jitllm-bench jitllm-mkmodel
BIN=$ROOT/build/bin

if [[ ! -x $BIN/jitllmd ]]; then  # built without the daemon's dependencies: the engine alone
  echo "== jitllm-run $MODEL -p \"$PROMPT\" -n 200   (jitllmd not built: run scripts/install-deps.sh as root)"
  exec "$BIN/jitllm-run" "$MODEL" -p "$PROMPT" -n 200
fi

DIR=$(mktemp -d "${XDG_RUNTIME_DIR:-/tmp}/jitllm-demo.XXXXXX")
SOCK=$DIR/jitllmd.sock
# A short send queue per reply, so a reader that takes its time sees tokens arrive a few at a time.
echo "max_queued_tokens = 4" >"$DIR/jitllmd.conf"
echo "== starting jitllmd as $(id -un) on $SOCK with devices cpu:0,cpu:1"
"$BIN/jitllmd" --socket "$SOCK" --devices cpu:0,cpu:1 --config "$DIR/jitllmd.conf" --log-level warn &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 200); do [[ -S $SOCK ]] && break; sleep 0.05; done
CTL=("$BIN/jitllmctl" --socket "$SOCK")
echo "== jitllmctl load $MODEL --name demo --devices cpu:0"
"${CTL[@]}" load "$MODEL" --name demo --devices cpu:0
echo "== jitllmctl run demo \"$PROMPT\" -n 200   (undisturbed, for comparison)"
"${CTL[@]}" run demo "$PROMPT" -n 200 | tee "$DIR/undisturbed.txt"
echo
echo "== the same reply again, read slowly (--read-delay-ms 15), while its layers move cpu:0 -> cpu:1 -> cpu:0"
"${CTL[@]}" run demo "$PROMPT" -n 200 --read-delay-ms 15 >"$DIR/moved.txt" &
READER=$!
# Migrate once the reply is streaming (its session is in ps).
for _ in $(seq 400); do
  "${CTL[@]}" ps demo 2>/dev/null | grep -qE 'decode|waiting' && break
  sleep 0.01
done
"${CTL[@]}" migrate demo cpu:1 | sed 's/^/   /'
"${CTL[@]}" ps -l demo | sed 's/^/   /'
"${CTL[@]}" migrate demo cpu:0 | sed 's/^/   /'
wait $READER
echo "== the reply that streamed while its layers moved:"
cat "$DIR/moved.txt"
if cmp -s "$DIR/undisturbed.txt" "$DIR/moved.txt"; then
  echo "== identical to the undisturbed reply, token for token: 0 tokens recomputed"
else
  echo "== DIFFERENT from the undisturbed reply" >&2
  diff "$DIR/undisturbed.txt" "$DIR/moved.txt" >&2 || true
  exit 1
fi
echo "== jitllmctl events (migrations)"
"${CTL[@]}" events | grep migration || true
