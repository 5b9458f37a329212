// Measures this CPU's CpuTuning (cpu_tuning.h) by timing the device's own matrix products on
// random q4_K weights, the type most models people run are made of:
//   threads         every physical core against every logical CPU (SMT siblings in), for decode
//                   (weights streamed from memory) and prefill, each relative to its best;
//   cache_resident  decode with the streaming hint on and off over working sets from L2-sized to
//                   four times the last-level cache: the largest set still faster without it;
//   prefill_chunk   the 256-bit prefill's column chunk (avx2 / avxvnni only).
// A run takes a few seconds and about 4x the last-level cache of memory (64 MiB to 1 GiB).
// Timings are the minimum of several repetitions, so a busy machine skews them less.
//
// Thread-safety: one call at a time per process is sensible (it loads every core).
#pragma once

#include <functional>
#include <string>

#include "kernels/cpu/cpu_topology.h"
#include "kernels/cpu/cpu_tuning.h"
#include "kernels/cpu/gemm/isa.h"

namespace jitllm::cpu {

// `log` receives one line per measurement ("threads 2: decode 12.3 ms, prefill 45.6 ms").
CpuTuning measureCpuTuning(const CpuTopology& topology, Isa isa, const std::function<void(const std::string&)>& log);

}  // namespace jitllm::cpu
