#!/bin/bash
#: profile   GPU time per op (JITLLM_CUDA_PROFILE=1) of pp512 and tg64; with NCU_KERNEL, Nsight Compute
#:
#: Builds jitllm-bench and jitllm-mkmodel; carry .devshared (made by scripts/prepare-gpu-carry.sh), e.g.
#:   run(command="NCU_KERNEL=mmq bash scripts/gpu/profile.sh", carry=[".devshared"], timeout_s=600)
#: Environment (all optional):
#:   PROFILE_MODEL     1b or 3b, the Llama-3.2 shape in Q4_K_M with random weights (default 1b)
#:   NCU_KERNEL        a regex of kernel names for Nsight Compute's full set (default: no ncu)
#:   NCU_SKIP          launches of that kernel skipped first (default 0)
#:   NCU_ARGS          jitllm-bench's arguments under Nsight Compute (default "-p 0 -n 4")
# shellcheck source=scripts/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

profile() {
  local m model ncu args
  m=$PROFILE_MODEL
  model=$(makeModel "llama-3.2-$m" q4_k_m)
  echo "$m pp512, each launch timed alone:"
  JITLLM_CUDA_PROFILE=1 timeout 120 "$BIN/jitllm-bench" "$model" --devices cuda:0 -p 512 -n 0 -r 2 > "$LOGS/profile-pp-$m.txt" 2>&1
  topOps "$LOGS/profile-pp-$m.txt" 20
  echo "$m tg64, each launch timed alone:"
  JITLLM_CUDA_PROFILE=1 timeout 120 "$BIN/jitllm-bench" "$model" --devices cuda:0 -p 0 -n 64 -r 1 > "$LOGS/profile-tg-$m.txt" 2>&1
  topOps "$LOGS/profile-tg-$m.txt" 20
  [ -n "${NCU_KERNEL:-}" ] || return 0
  ncu=$(command -v ncu || find /opt/nvidia/nsight-compute -maxdepth 2 -name ncu -type f 2> /dev/null | head -1)
  read -ra args <<< "${NCU_ARGS:--p 0 -n 4}"
  JITLLM_CUDA_GRAPHS=0 timeout 300 "$ncu" --set full --import-source yes --clock-control none -k "regex:$NCU_KERNEL" \
    --launch-skip "${NCU_SKIP:-0}" --launch-count 1 -o "$LOGS/ncu" "$BIN/jitllm-bench" "$model" --devices cuda:0 "${args[@]}" -r 1 \
    > "$LOGS/ncu.log" 2>&1 || { tail -5 "$LOGS/ncu.log"; return 1; }
  "$ncu" --import "$LOGS/ncu.ncu-rep" --page details > "$LOGS/ncu-details.txt" 2>&1
  grep -E "^  [A-Za-z_]+.*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L2 Hit|Mem Busy" \
    "$LOGS/ncu-details.txt" | sed 's/  */ /g' | head -40
}

gpuMain profile "build jitllm-bench jitllm-mkmodel" profile
