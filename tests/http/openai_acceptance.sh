#!/usr/bin/env bash
# Issue 29's acceptance: OpenAI's official Node.js client (the `openai` npm package, installed here
# from the npm registry into a cache) drives a jitllmd serving stories260K on its HTTP Unix socket
# and a loopback port; the texts must equal jitllmctl's for the same greedy requests, the usage
# counts must be right, and /metrics (parsed by python3-prometheus-client) must have moved by
# exactly what the requests did.
#   openai_acceptance.sh BIN_DIR SHARED_DIR [NPM_CACHE_DIR]
# Skips (exit 77, which ctest reports as skipped) only when npm cannot install the package.
set -euo pipefail
BIN=$1 SHARED=$2 CACHE=${3:-${TMPDIR:-/tmp}/jitllm-openai-npm}
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=stories260K
OPENAI_VERSION=4  # v4 takes an http.Agent (httpAgent), which is how it reaches a Unix socket

mkdir -p "$CACHE"
if [[ ! -f "$CACHE/node_modules/openai/package.json" ]]; then
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "SKIPPED: node/npm are not installed (scripts/install-deps.sh installs them)"; exit 77
  fi
  if ! timeout 300 npm install --no-audit --no-fund --prefix "$CACHE" "openai@$OPENAI_VERSION" >"$CACHE/npm.log" 2>&1; then
    cat "$CACHE/npm.log"
    echo "SKIPPED: npm could not install openai@$OPENAI_VERSION (no registry?)"; exit 77
  fi
fi

WORK=$(mktemp -d)
DAEMON=
cleanup() {
  [[ -n "$DAEMON" ]] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN/jitllmd" --socket "$WORK/rpc.sock" --devices cpu:0 --threads 1 --model-dir "$SHARED/models" \
  --http "unix:$WORK/http.sock" --http "127.0.0.1:$PORT" --scheduler-interval-ms 0 2>"$WORK/jitllmd.log" &
DAEMON=$!
for _ in $(seq 600); do
  curl -sf --unix-socket "$WORK/http.sock" http://localhost/health >/dev/null 2>&1 && break
  kill -0 "$DAEMON" 2>/dev/null || { cat "$WORK/jitllmd.log"; echo "FAIL: jitllmd exited"; exit 1; }
  sleep 0.1
done
metrics() { curl -sf --unix-socket "$WORK/http.sock" http://localhost/metrics; }
metrics >"$WORK/metrics-before.txt"

# The model is not loaded: the first request loads it by name from the model dir. The script runs
# from the cache, where Node's module resolution finds the package.
cp "$HERE/openai_client.mjs" "$CACHE/openai_client.mjs"
node "$CACHE/openai_client.mjs" "$WORK/http.sock" "$PORT" "$MODEL" \
  >"$WORK/node.json" 2>"$WORK/node.err" || { cat "$WORK/node.err" "$WORK/jitllmd.log" | tail -40; echo "FAIL: openai client"; exit 1; }
metrics >"$WORK/metrics-after.txt"

# jitllmctl, over Cap'n Proto, for the same greedy requests.
"$BIN/jitllmctl" --socket "$WORK/rpc.sock" --json run "$MODEL" "Once upon a time" -n 48 >"$WORK/ctl-run.json"
echo "Tell me a story" | "$BIN/jitllmctl" --socket "$WORK/rpc.sock" --json chat "$MODEL" -n 48 >"$WORK/ctl-chat.json"

/usr/bin/python3 "$HERE/check_acceptance.py" "$WORK" "$MODEL"

# And it stops cleanly (SIGTERM: drained, exit 0 - under a sanitizer, no report either).
kill -TERM "$DAEMON"
status=0
wait "$DAEMON" || status=$?
DAEMON=
if ((status != 0)); then
  tail -40 "$WORK/jitllmd.log"
  echo "FAIL: jitllmd exited with status $status on SIGTERM"
  exit 1
fi
echo "ok   jitllmd stopped cleanly"
