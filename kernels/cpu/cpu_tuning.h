// The settings of the CPU device that are measured once per CPU rather than fixed: how many
// threads run the kernels, above how many bytes of weights decode treats them as streaming from
// memory, how far ahead decode requests a streamed row's cache lines, the column chunk of the
// 256-bit prefill, and which products an AVX-512 VNNI CPU runs on
// the 256-bit integer kernels instead (on CPUs that split 512-bit operations in two, like AMD's Zen
// 4, they can be the faster ones). None of them changes a result's bits (each
// (row, token) is summed in one order whatever they are: matmul.h), which is what makes tuning
// safe; they only change the time.
//
// File: <cache root>/cpu/<CpuTopology::key()>.v<kCpuTuningVersion>.txt, one "name value" a line,
// kept with the kernel cache (cacheRoot(): $JITLLM_CACHE_DIR, ...). The version moves when the
// kernels change what is worth measuring, so a machine measures again after such an upgrade rather
// than keep settings timed on kernels it no longer runs. `jitllm-bench --tune` measures and writes it
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
#include "kernels/quant/tensor_type.h"

namespace jitllm::cpu {

struct CpuTuning {
  // Kernel threads of a CPU device that was not given a count.
  int threads = 1;
  // Weights a device multiplies in total above which decode streams them (WeightView::streamed).
  size_t cacheResidentBytes = size_t(64) << 20;
  // Columns per chunk of the avx2 / avxvnni token-vector prefill (WeightView::prefillChunk).
  int64_t prefillChunk = 512;
  // Bytes ahead of the row being multiplied that decode requests into L2 (WeightView::prefetchBytes);
  // 0: each kernel's own distance.
  size_t prefetchBytes = 0;
  // On an AVX-512 VNNI CPU, the (type, phase) pairs whose products run on the 256-bit integer
  // kernels (same bits: the integer contract of matmul_int8.inc): a bit per narrowInt8Bit.
  uint32_t narrowInt8 = 0;
  // Where the values came from: "measured" (a file) or "default".
  std::string source = "default";

  bool operator==(const CpuTuning&) const = default;
};

// The version of the measurements in a tuning file's name (see the top of this file).
constexpr int kCpuTuningVersion = 2;

// Before any measurement: every physical core (SMT siblings share one core's execution units and
// caches, and matrix kernels that keep them busy gain little from a second thread on them; the
// tuner measures it), the thresholds the kernels were written with.
CpuTuning defaultCpuTuning(const CpuTopology& topology);

// The types with both a 512-bit and a 256-bit integer kernel: q4_K, q6_K, q8_0.
constexpr quant::TensorType kNarrowableTypes[] = {quant::TensorType::kQ4_K, quant::TensorType::kQ6_K,
                                                  quant::TensorType::kQ8_0};
// A product of `tokens` tokens is prefill from this many on (the kernels' prefill tiles).
constexpr int64_t kNarrowPrefillTokens = 8;
// CpuTuning::narrowInt8's bit for (type, phase): decode 2i, prefill 2i + 1 for kNarrowableTypes[i];
// 0 (no bit) for other types.
uint32_t narrowInt8Bit(quant::TensorType type, bool prefill);
// Whether a product of `tokens` tokens of `type` takes the 256-bit kernels under `tuning`.
bool runsNarrow(const CpuTuning& tuning, quant::TensorType type, int64_t tokens);

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
