#!/bin/bash
# Prepares what a call on the lent GPU machine (the device tool's `run`) carries beside the
# repository, since that machine has no ../shared and no package registry:
#   .devshared/  stories260K.gguf, the llama vocab files (and qwen2's with --archs) and ../shared/peer,
#                which scripts/gpu/ points JITLLM_SHARED_DIR and --shared at;
#   .peer/       llama.cpp's source as a git bundle (from the npm package node-llama-cpp, through
#                ../shared/peer/setup --bundle), for the side-by-side runs that build llama.cpp there.
# Both are ignored by git (this script adds them to .git/info/exclude), so a fresh checkout lacks
# them; run this once per checkout, then name them in the call's carry:
#   .carry-serve/ (--serve) the daemon and tools built here, with the libraries the GPU machine lacks;
#   .carry-cpu/ (--cpu) the CPU kernels' test and bench binaries built here (scripts/cpu-isa-check.sh;
#     PEER_AVX2=dir adds a llama.cpp AVX2 build made here);
#   .carry-ab/ (--ab DIR) this build's GPU tests, daemon and benches (new/), the same benches and
#     daemon from another commit's build in DIR/bin (old/), for scripts/gpu/ab.sh;
#   bash scripts/prepare-gpu-carry.sh [--no-peer] [--serve] [--cpu] [--archs]  (the size check counts what is named)
#   run(command="bash scripts/gpu-check.sh all", carry=[".devshared", ".peer"], timeout_s=600)
# A call's carried tree is limited to 64 MiB; this checks the total.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${JITLLM_SHARED_DIR:-../shared}
[ -f "$SHARED/models/stories260K.gguf" ] || { echo "no $SHARED/models/stories260K.gguf" >&2; exit 1; }

noPeer=0 serve=0 cpu=0 archs=0 ab=""
while (($#)); do
  arg=$1
  shift
  case $arg in
    --ab) ab=${1:?--ab needs a build directory of another commit}; shift ;;
    --no-peer) noPeer=1 ;;
    --serve) serve=1 ;;
    --cpu) cpu=1 ;;
    --archs) archs=1 ;;
    *) echo "usage: scripts/prepare-gpu-carry.sh [--no-peer] [--serve] [--cpu] [--archs] [--ab DIR]" >&2; exit 2 ;;
  esac
done

mkdir -p .devshared/models .devshared/vocab
cp "$SHARED/models/stories260K.gguf" .devshared/models/
# Only the vocab files the GPU tests use: all of them would push a call with .peer past 64 MiB.
cp "$SHARED"/vocab/ggml-vocab-llama-bpe.gguf* "$SHARED"/vocab/ggml-vocab-llama-spm.gguf* .devshared/vocab/
# --archs: qwen2's too (gpu-check.sh archs' qwen3 shapes), 6 MB that do not fit beside .peer.
rm -f .devshared/vocab/ggml-vocab-qwen2.gguf
if ((archs)); then cp "$SHARED"/vocab/ggml-vocab-qwen2.gguf .devshared/vocab/; fi
rm -rf .devshared/peer && cp -r "$SHARED/peer" .devshared/peer
chmod -R u+w .devshared

if ((!noPeer)) && [ ! -f .peer/llama.cpp.bundle ]; then
  bash "$SHARED/peer/setup" --bundle .peer > /dev/null
  # The bundle holds llama.cpp's vocab files, docs and benches (34 MB): building llama-bench and
  # llama-batched-bench needs none of them. One commit without them packs into ~12 MB, which
  # leaves the tree (its goldens) room beside .devshared.
  slim=$(mktemp -d)
  git -c advice.detachedHead=false clone -q .peer/llama.cpp.bundle "$slim/src"
  (cd "$slim/src" && git checkout -q --orphan slim && git rm -rq --cached models docs benches &&
    git -c user.name=jitllm -c user.email=jitllm@localhost commit -qm "llama.cpp without models, docs, benches" &&
    git bundle create -q "$slim/llama.cpp.bundle" HEAD slim) && mv "$slim/llama.cpp.bundle" .peer/llama.cpp.bundle
  rm -rf "$slim"
fi

# --serve: .carry-serve/, the daemon and its tools built here (the GPU machine has no Cap'n Proto
# or libsystemd to build them), stripped, with the shared libraries they need that the GPU
# machine lacks in .carry-serve/lib (gpu-check.sh serve puts it on LD_LIBRARY_PATH).
if ((serve)); then
  tools=(jitllmd jitllm-serve-bench jitllm-bench jitllm-mkmodel)
  [ -f build/build.ninja ] || { echo "--serve needs the release build in build/ (scripts/demo.sh makes it)" >&2; exit 1; }
  cmake --build build --target "${tools[@]}" > /dev/null
  rm -rf .carry-serve && mkdir -p .carry-serve/lib
  for t in "${tools[@]}"; do strip -o ".carry-serve/$t" "build/bin/$t"; done
  # Everything but the C and C++ runtimes (newer there) and the CUDA toolkit's own libraries.
  for t in "${tools[@]}"; do ldd "build/bin/$t"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so|/usr/local/cuda' |
    while read -r lib; do cp -L "$lib" .carry-serve/lib/; done
  strip --strip-unneeded .carry-serve/lib/*.so*
fi

# --cpu: .carry-cpu/, the binaries scripts/cpu-isa-check.sh runs there (only the C/C++ runtimes and
# NVRTC, which that machine has, are linked dynamically).
if ((cpu)); then
  bins=(quant_tests cpu_tests runtime_tests matmul_microbench jitllm-bench jitllm-mkmodel)
  [ -f build/build.ninja ] || { echo "--cpu needs the release build in build/" >&2; exit 1; }
  cmake --build build --target "${bins[@]}" > /dev/null
  rm -rf .carry-cpu && mkdir -p .carry-cpu/bin
  for t in "${bins[@]}"; do strip -o ".carry-cpu/bin/$t" "build/bin/$t"; done
  # OLD_BENCH=path: an earlier jitllm-bench (built from another commit) for cpu-isa-check.sh's
  # no-regression rows.
  if [ -n "${OLD_BENCH:-}" ]; then strip -o .carry-cpu/bin/jitllm-bench-old "$OLD_BENCH"; fi
  # PEER_AVX2=dir: llama.cpp built here for AVX2 only (../shared/peer/setup with
  # cpu-isa-check.sh's PEER_CMAKE_ARGS), whose bin/ travels so that the call need not build it
  # (minutes of device time); it runs there with its own libraries beside it.
  if [ -n "${PEER_AVX2:-}" ]; then
    [ -x "$PEER_AVX2/bin/llama-bench" ] || { echo "PEER_AVX2: no $PEER_AVX2/bin/llama-bench" >&2; exit 1; }
    tar -C "$PEER_AVX2" -cJf .carry-cpu/peer-avx2.tar.xz bin
  fi
  # Packed (a quarter of the size), so that the binaries, .devshared and .peer fit one call and
  # cpu-isa-check.sh's `all` builds llama.cpp and measures in one (an idle machine is soon taken
  # back). cpu-isa-check.sh unpacks it.
  tar -C .carry-cpu -cJf .carry-cpu/bin.tar.xz bin && rm -rf .carry-cpu/bin
fi

# --ab DIR: .carry-ab/, scripts/gpu/ab.sh's two sides, stripped: new/ from build/ (the GPU tests,
# the daemon, the benches), old/ from DIR/bin (the daemon and the benches), lib/ what the daemons
# need that the GPU machine lacks.
if [ -n "$ab" ]; then
  benches=(jitllmd jitllm-serve-bench jitllm-bench jitllm-mkmodel)
  tests=(cuda_tests runtime_tests migration_tests backend_conformance_tests step_loop_tests)
  cmake --build build --target "${benches[@]}" "${tests[@]}" > /dev/null
  rm -rf .carry-ab && mkdir -p .carry-ab/new .carry-ab/old .carry-ab/lib
  for t in "${benches[@]}" "${tests[@]}"; do strip -o ".carry-ab/new/$t" "build/bin/$t"; done
  for t in "${benches[@]}"; do strip -o ".carry-ab/old/$t" "$ab/bin/$t"; done
  for t in .carry-ab/new/jitllmd .carry-ab/old/jitllmd; do ldd "$t"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so|/usr/local/cuda' |
    while read -r lib; do cp -L "$lib" .carry-ab/lib/; done
  strip --strip-unneeded .carry-ab/lib/*.so*
  # Packed in one archive: the two sides share most of their bytes, which xz's window finds (105 MB
  # of binaries in 12 MB), so that they fit beside the tree; ab.sh unpacks it.
  tar -C .carry-ab -cf - new old lib | xz -9 -T2 > .carry-ab.tar.xz && rm -rf .carry-ab && mkdir .carry-ab &&
    mv .carry-ab.tar.xz .carry-ab/ab.tar.xz
fi

exclude=.git/info/exclude
mkdir -p "$(dirname "$exclude")" && touch "$exclude"
for path in /.devshared/ /.peer/ /.carry-serve/ /.carry-cpu/ /.carry-ab/; do
  grep -qxF "$path" "$exclude" || echo "$path" >> "$exclude"
done

# What a call copies: the files git does not ignore, and the carried paths.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
paths=(.devshared)
((noPeer)) || paths+=(.peer)
((serve)) && paths+=(.carry-serve)
((cpu)) && paths+=(.carry-cpu)
[ -n "$ab" ] && paths+=(.carry-ab)
carried=$(du -scb "${paths[@]}" | tail -1 | cut -f1)
mib=$(((tree + carried) / 1048576))
echo "carry: ${paths[*]}; with the tree ${mib} MiB of the 64 MiB a call takes"
[ "$mib" -lt 63 ] || { echo "too large for one call: carry less (--no-peer)" >&2; exit 1; }
