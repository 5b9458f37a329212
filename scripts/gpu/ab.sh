#!/bin/bash
#: ab        carried binaries of two commits side by side (.carry-ab: new/ and old/, made by
#:           scripts/prepare-gpu-carry.sh --ab OLD_BIN_DIR): the new tests' verdicts, then
#:           jitllm-bench and jitllm-serve-bench alternating old and new, AB_ROUNDS rounds
#:
#: Builds nothing; carry .devshared and .carry-ab, e.g.
#:   run(command="AB_STEPS='tests bench' bash scripts/gpu/ab.sh", carry=[".devshared", ".carry-ab"], timeout_s=600)
#: Environment (all optional):
#:   AB_STEPS          which of tests, bench, serve (default "tests bench")
#:   AB_ROUNDS         alternating rounds of each measurement (default 2)
#:   AB_MODELS         Llama-3.2 shapes in Q4_K_M for bench (default "1b 3b"); serve takes the first
#:   AB_CLIENTS        serve: jitllm-serve-bench -c (default 1,8,32)
#:   BUILT_AT          the checkout path the carried tests were built at (default /work/main)
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

CARRY=$PWD/.carry-ab
read -ra AB_STEP_LIST <<< "${AB_STEPS:-tests bench}"
AB_ROUNDS=${AB_ROUNDS:-2}
read -ra AB_MODEL_LIST <<< "${AB_MODELS:-1b 3b}"
AB_CLIENTS=${AB_CLIENTS:-1,8,32}

# The carried tests hold their checkout's absolute paths (../shared, tests/goldens): link both here.
linkCheckout() {
  local built=${BUILT_AT:-/work/main}
  [ "$(readlink -f "$built")" = "$PWD" ] || { mkdir -p "$(dirname "$built")" && ln -sfn "$PWD" "$built"; }
  [ -e "$(dirname "$built")/shared" ] || ln -sfn "$SHARED" "$(dirname "$built")/shared"
}

abTests() {
  local t rc=0
  linkCheckout
  BIN=$CARRY/new
  for t in cuda_tests runtime_tests migration_tests backend_conformance_tests step_loop_tests; do
    [ -x "$BIN/$t" ] && { gtest "$t" || rc=1; }
  done
  return $rc
}

abBench() {
  local m f round side
  BIN=$CARRY/new
  for m in "${AB_MODEL_LIST[@]}"; do
    f=$(makeModel "llama-3.2-$m" q4_k_m)
    for ((round = 1; round <= AB_ROUNDS; round++)); do
      for side in old new; do
        timeout 200 "$CARRY/$side/jitllm-bench" "$f" --devices cuda:0 -p 512 -n 128 -r 3 > "$LOGS/bench-$m-$side-$round.txt" 2>&1
        grep -E "^(pp|tg)[0-9]+ |error" "$LOGS/bench-$m-$side-$round.txt" | tr '\n' ' ' | sed "s/^/$m $side r$round: /"
        echo
      done
    done
  done
}

abServe() {
  local f round side
  BIN=$CARRY/new
  export LD_LIBRARY_PATH=$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  f=$(makeModel "llama-3.2-${AB_MODEL_LIST[0]}" q4_k_m)
  for ((round = 1; round <= AB_ROUNDS; round++)); do
    for side in old new; do
      PATH=$CARRY/$side:$PATH timeout 240 "$CARRY/$side/jitllm-serve-bench" --start "$f" --devices cuda:0 --warmup \
        -c "$AB_CLIENTS" -p 16 -n 256 > "$LOGS/serve-$side-$round.txt" 2>&1
      grep -E "^\| [0-9]|^# (jitllm|check)|error" "$LOGS/serve-$side-$round.txt" | sed "s/^/serve $side r$round: /" | head -12
    done
  done
}

if [ "$dry" != 1 ]; then
  [ -f "$CARRY/ab.tar.xz" ] || { echo "no .carry-ab carried (scripts/prepare-gpu-carry.sh --ab)" >&2; exit 1; }
  [ -d "$CARRY/new" ] || tar -C "$CARRY" -xJf "$CARRY/ab.tar.xz"
fi
steps=()
for s in "${AB_STEP_LIST[@]}"; do
  case $s in
    tests) steps+=(abTests) ;;
    bench) steps+=(abBench) ;;
    serve) steps+=(abServe) ;;
    *) echo "AB_STEPS: unknown step '$s' (tests, bench, serve)" >&2; exit 2 ;;
  esac
done
gpuMain ab "${steps[@]}"
