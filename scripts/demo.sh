#!/usr/bin/env bash
# The main job: install what jitllm needs, build it, and generate text from a model on the CPU.
#   scripts/demo.sh [MODEL.gguf] [PROMPT]
# MODEL defaults to ../shared/models/stories260K.gguf when that exists; otherwise name one.
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

"$ROOT/scripts/install-deps.sh"
cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$ROOT/build" --target jitllm-run jitllm-bench jitllm-mkmodel
echo "== jitllm-run $MODEL -p \"$PROMPT\" -n 200"
"$ROOT/build/bin/jitllm-run" "$MODEL" -p "$PROMPT" -n 200
