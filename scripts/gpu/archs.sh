#!/bin/bash
#: archs     every architecture beyond llama (ARCH_SHAPES) in f16 and Q4_K_M: the same ids scored on
#:           cpu:0 and cuda:0, NMSE and top-1 between them; then the backend conformance suite
#:
#: Builds jitllm-run, jitllm-mkmodel and backend_conformance_tests; carry .devshared with qwen2's
#: vocab (scripts/prepare-gpu-carry.sh --archs), e.g.
#:   run(command="bash scripts/gpu/archs.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
#:   ARCH_SHAPES       shapes to compare (default "qwen3-micro granite-micro phi3-micro phi4-micro gemma3-micro")
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

# archs: each shape's logits on cuda:0 against cpu:0 (float32 files compared in plain python3).
archs() {
  local shape type f rc=0
  # 64 ids, all below 32000 (every shape's vocabulary): past gemma3-micro's 24-token window.
  local ids
  ids=$(cat tests/goldens/gemma3/tokens.txt)
  for shape in ${ARCH_SHAPES:-qwen3-micro granite-micro phi3-micro phi4-micro gemma3-micro}; do
    for type in f16 q4_k_m; do
      f=$(makeModel "$shape" "$type")
      for dev in cpu:0 cuda:0; do
        rm -f "$OUT/$dev.bin"
        timeout 120 "$BIN/jitllm-run" "$f" -t "$ids" --score --logits "$OUT/$dev.bin" --devices $dev \
          > "$LOGS/archs-$shape-$type-${dev/:/}.log" 2>&1 || { echo "$shape $type on $dev failed"; rc=1; }
      done
      python3 - "$OUT/cpu:0.bin" "$OUT/cuda:0.bin" "$shape $type" "$(wc -w <<< "$ids")" << 'PYEOF'
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read()); b.frombytes(open(sys.argv[2], "rb").read())
n = int(sys.argv[4])
v = len(a) // n
err = sum((x - y) ** 2 for x, y in zip(a, b))
mean = sum(a) / len(a)
ref = sum((x - mean) ** 2 for x in a)
top = sum(max(range(v), key=lambda i: a[p * v + i]) == max(range(v), key=lambda i: b[p * v + i]) for p in range(n))
print(f"{sys.argv[3]}: cuda:0 vs cpu:0 nmse {err / ref:.3e} top1 {top}/{n}")
PYEOF
    done
  done 2>&1 | tee "$LOGS/archs.txt"
  gtest backend_conformance_tests || rc=1
  return $rc
}

gpuMain archs "build jitllm-run jitllm-mkmodel backend_conformance_tests" archs
