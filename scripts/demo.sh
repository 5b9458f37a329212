#!/usr/bin/env bash
# The main job: install what jitllm needs, build it, start jitllmd as this user, load a model and
# stream a reply through jitllmctl, then stop the daemon.
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
echo "== starting jitllmd as $(id -un) on $SOCK"
"$BIN/jitllmd" --socket "$SOCK" --log-level warn &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 200); do [[ -S $SOCK ]] && break; sleep 0.05; done
CTL=("$BIN/jitllmctl" --socket "$SOCK")
echo "== jitllmctl load $MODEL --name demo"
"${CTL[@]}" load "$MODEL" --name demo
echo "== jitllmctl run demo \"$PROMPT\" -n 200"
"${CTL[@]}" run demo "$PROMPT" -n 200
echo
echo "== jitllmctl ps"
"${CTL[@]}" ps
