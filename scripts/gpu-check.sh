#!/bin/bash
# One call on the lent GPU machine (the device tool's `run`): MODE's own script, scripts/gpu/MODE.sh,
# which builds what it needs of jitllm (CUDA) and runs MODE; they share scripts/gpu/common.sh.
# `bash scripts/gpu-check.sh -h` lists the modes, `bash scripts/gpu/MODE.sh -h` the environment MODE reads.
set -uo pipefail
dir=$(dirname "$0")/gpu
modes="tests sanitize bench peer tiers batch serve profile prompt archs migrate tp vulkan all"

usage() {
  cat << 'EOF2'
usage: bash scripts/gpu-check.sh [--dry-run] MODE      (one call of the device tool's `run`)
Runs scripts/gpu/MODE.sh, whose -h tells what it builds and carries and the environment it reads: a
summary on stdout, the logs in $OUT/logs/ (OUT: default /tmp/jitllm-gpu-out), packed into $OUT/logs.tgz
at the end (a call brings back 8 files at most). Carry .devshared, and .peer for llama.cpp (both made
by scripts/prepare-gpu-carry.sh), e.g.
  run(command="bash scripts/gpu-check.sh all", carry=[".devshared", ".peer"], timeout_s=600)
Modes:
EOF2
  for m in $modes; do sed -n '/^#:$/q; s/^#: /  /p' "$dir/$m.sh"; done
  echo "Options: -h, --help: this text; --dry-run: print the settings and MODE's steps, run nothing."
}

mode="" dry=()
for arg in "$@"; do
  case $arg in
    -h | --help) usage; exit 0 ;;
    --dry-run) dry=(--dry-run) ;;
    -* | *\ *) usage >&2; exit 2 ;;
    *) [ -z "$mode" ] || { echo "gpu-check.sh: one mode at a time" >&2; exit 2; }; mode=$arg ;;
  esac
done
[ -n "$mode" ] || { usage >&2; exit 2; }
[[ " $modes " == *" $mode "* ]] || { echo "gpu-check.sh: unknown mode: $mode" >&2; usage >&2; exit 2; }
exec bash "$dir/$mode.sh" "${dry[@]}"
