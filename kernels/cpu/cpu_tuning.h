// The settings of the CPU device that are measured once per CPU rather than fixed: how many
// threads run the kernels, above how many bytes of weights decode treats them as streaming from
// memory, and the column chunk of the 256-bit prefill. None of them changes a result's bits (each
// (row, token) is summed in one order whatever they are: matmul.h), which is what makes tuning
// safe; they only change the time.
//
// File: <cache root>/cpu/<CpuTopology::key()>.txt, one "name value" a line, kept with the kernel
// cache (cacheRoot(): $JITLLM_CACHE_DIR, ...). `jitllm-bench --tune` measures and writes it
// (cpu_tuner.h). A line that does not parse, or a value out of range, is ignored (the default
// stays), so a damaged file costs only speed.
//
// Thread-safety: pure functions; storeCpuTuning writes atomically (temporary file + rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/cpu/cpu_topology.h"

namespace jitllm::cpu {

struct CpuTuning {
  // Kernel threads of a CPU device that was not given a count.
  int threads = 1;
  // Weights a device multiplies in total above which decode streams them (WeightView::streamed).
  size_t cacheResidentBytes = size_t(64) << 20;
  // Columns per chunk of the avx2 / avxvnni token-vector prefill (WeightView::prefillChunk).
  int64_t prefillChunk = 512;
  // Where the values came from: "measured" (a file) or "default".
  std::string source = "default";

  bool operator==(const CpuTuning&) const = default;
};

// Before any measurement: every physical core (SMT siblings share one core's execution units and
// caches, and matrix kernels that keep them busy gain little from a second thread on them; the
// tuner measures it), the thresholds the kernels were written with.
CpuTuning defaultCpuTuning(const CpuTopology& topology);

std::string formatCpuTuning(const CpuTuning& tuning);
// The values of `text` over `defaults` (source "measured" when at least one line was used).
CpuTuning parseCpuTuning(std::string_view text, const CpuTuning& defaults);

// The file for `topology` under `cacheRoot` ("" when the root is empty: no disk cache).
std::string cpuTuningPath(const std::string& cacheRoot, const CpuTopology& topology);
// The defaults, overridden by the file when there is one.
CpuTuning loadCpuTuning(const std::string& cacheRoot, const CpuTopology& topology);
// Writes the file (creating the directories); false when it cannot.
bool storeCpuTuning(const std::string& cacheRoot, const CpuTopology& topology, const CpuTuning& tuning);

}  // namespace jitllm::cpu
