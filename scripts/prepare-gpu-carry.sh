#!/bin/bash
# Prepares what a call on the lent GPU machine (the device tool's `run`) carries beside the
# repository, since that machine has no ../shared and no package registry:
#   .devshared/  stories260K.gguf, the llama vocab files and ../shared/peer (its setup and tools),
#                which scripts/gpu-check.sh points JITLLM_SHARED_DIR and --shared at;
#   .peer/       llama.cpp's source as a git bundle (from the npm package node-llama-cpp, through
#                ../shared/peer/setup --bundle), for the side-by-side runs that build llama.cpp there.
# Both are ignored by git (this script adds them to .git/info/exclude), so a fresh checkout lacks
# them; run this once per checkout, then name them in the call's carry:
#   bash scripts/prepare-gpu-carry.sh [--no-peer]
#   run(command="bash scripts/gpu-check.sh all", carry=[".devshared", ".peer"], timeout_s=600)
# A call's carried tree is limited to 64 MiB; this checks the total.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${JITLLM_SHARED_DIR:-../shared}
[ -f "$SHARED/models/stories260K.gguf" ] || { echo "no $SHARED/models/stories260K.gguf" >&2; exit 1; }

mkdir -p .devshared/models .devshared/vocab
cp "$SHARED/models/stories260K.gguf" .devshared/models/
# Only the vocab files the GPU tests use: all of them would push a call with .peer past 64 MiB.
cp "$SHARED"/vocab/ggml-vocab-llama-bpe.gguf* "$SHARED"/vocab/ggml-vocab-llama-spm.gguf* .devshared/vocab/
rm -rf .devshared/peer && cp -r "$SHARED/peer" .devshared/peer
chmod -R u+w .devshared

if [ "${1:-}" != --no-peer ] && [ ! -f .peer/llama.cpp.bundle ]; then
  bash "$SHARED/peer/setup" --bundle .peer > /dev/null
fi

exclude=.git/info/exclude
mkdir -p "$(dirname "$exclude")" && touch "$exclude"
for path in /.devshared/ /.peer/; do
  grep -qxF "$path" "$exclude" || echo "$path" >> "$exclude"
done

# What a call copies: the files git does not ignore, and the carried paths.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
paths=(.devshared)
[ -d .peer ] && paths+=(.peer)
carried=$(du -scb "${paths[@]}" | tail -1 | cut -f1)
mib=$(((tree + carried) / 1048576))
echo "carry: .devshared$([ -d .peer ] && echo ' .peer'); with the tree ${mib} MiB of the 64 MiB a call takes"
[ "$mib" -lt 63 ] || { echo "too large for one call: carry .devshared alone (--no-peer)" >&2; exit 1; }
