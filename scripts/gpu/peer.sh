#!/bin/bash
#: peer      start building llama.cpp (llama-bench, llama-batched-bench) and return: it goes on after
#:           the call, for a later call on the still-warm machine (bench, serve) to use
#:
#: Carry .devshared and .peer (both made by scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="bash scripts/gpu/peer.sh", carry=[".devshared", ".peer"], timeout_s=600)
#: Environment (all optional):
# bench.sh, serve.sh, prompt.sh and all.sh source this script for startLlamaCpp and waitLlamaCpp.
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

# llama.cpp (CUDA, sm_90: llama-bench, llama-batched-bench) from the carried bundle into $PEER, in
# its own process session so that it outlives this call when a later call on the still-warm machine
# is to use it ("peer" mode); waitLlamaCpp waits for it, whoever started it. Log: $PEER_LOG.
PEER=/tmp/peer PEER_LOG=/tmp/peer-setup.log
startLlamaCpp() {
  [ -x $PEER/bin/llama-batched-bench ] && { echo "llama.cpp: already built in $PEER"; return 0; }
  [ -f $PEER_LOG ] && ! grep -q "^exit" $PEER_LOG && { echo "llama.cpp: a build is under way"; return 0; }
  [ -f .peer/llama.cpp.bundle ] || { echo "no .peer/llama.cpp.bundle carried: llama.cpp is left out"; return 0; }
  : > $PEER_LOG
  # Copies of what it reads: a later call replaces this working tree while it builds.
  rm -rf /tmp/peer-src && mkdir -p /tmp/peer-src && cp -r "$SHARED/peer" .peer/llama.cpp.bundle /tmp/peer-src/
  setsid bash -c "JITLLM_PEER_DIR=$PEER JITLLM_PEER_BUNDLE=/tmp/peer-src/llama.cpp.bundle \
    PEER_TARGETS='llama-bench llama-batched-bench' PEER_CMAKE_ARGS='-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90' \
    bash /tmp/peer-src/peer/setup >> $PEER_LOG 2>&1; echo exit \$? >> $PEER_LOG" < /dev/null > /dev/null 2>&1 &
}

waitLlamaCpp() {
  [ -f $PEER_LOG ] || return 0
  local waited=0
  while ! grep -q "^exit" $PEER_LOG && ((waited < 480)); do sleep 2; waited=$((waited + 2)); done
  cp $PEER_LOG "$LOGS/peer-setup.log"
  echo "llama.cpp: $(grep "^exit" $PEER_LOG || echo "still building after ${waited} s") at $((SECONDS - start)) s"
}

gpuMain peer startLlamaCpp
