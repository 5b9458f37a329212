#include "kernels/cpu/cpu_tuning.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "base/atomic_file.h"

namespace jitllm::cpu {

namespace {

constexpr size_t kMaxFileBytes = 4096;

}  // namespace

CpuTuning defaultCpuTuning(const CpuTopology& topology) {
  CpuTuning t;
  t.threads = std::max(1, topology.physicalCores);
  return t;
}

uint32_t narrowInt8Bit(quant::TensorType type, bool prefill) {
  for (size_t i = 0; i < std::size(kNarrowableTypes); i++) {
    if (kNarrowableTypes[i] == type) return uint32_t(1) << (2 * i + (prefill ? 1 : 0));
  }
  return 0;
}

bool runsNarrow(const CpuTuning& tuning, quant::TensorType type, int64_t tokens) {
  return (tuning.narrowInt8 & narrowInt8Bit(type, tokens >= kNarrowPrefillTokens)) != 0;
}

std::string formatCpuTuning(const CpuTuning& t) {
  std::ostringstream out;
  out << "threads " << t.threads << "\n"
      << "cache_resident_bytes " << t.cacheResidentBytes << "\n"
      << "prefill_chunk " << t.prefillChunk << "\n"
      << "prefetch_bytes " << t.prefetchBytes << "\n"
      << "narrow_int8 " << t.narrowInt8 << "\n";
  return out.str();
}

CpuTuning parseCpuTuning(std::string_view text, const CpuTuning& defaults) {
  CpuTuning t = defaults;
  bool used = false;
  std::istringstream lines{std::string(text.substr(0, kMaxFileBytes))};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string name;
    long long value = 0;
    std::string rest;
    if (!(in >> name >> value) || (in >> rest)) continue;
    if (name == "threads" && value >= 1 && value <= 4096) {
      t.threads = int(value);
      used = true;
    } else if (name == "cache_resident_bytes" && value >= (1ll << 20) && value <= (1ll << 40)) {
      t.cacheResidentBytes = size_t(value);
      used = true;
    } else if (name == "prefill_chunk" && value >= 64 && value <= 16384 && value % 32 == 0) {
      t.prefillChunk = value;
      used = true;
    } else if (name == "prefetch_bytes" && value >= 0 && value <= (1ll << 16) && value % 64 == 0) {
      t.prefetchBytes = size_t(value);
      used = true;
    } else if (name == "narrow_int8" && value >= 0 && value < (1ll << (2 * std::size(kNarrowableTypes)))) {
      t.narrowInt8 = uint32_t(value);
      used = true;
    }
  }
  if (used) t.source = "measured";
  return t;
}

std::string cpuTuningPath(const std::string& cacheRoot, const CpuTopology& topology) {
  if (cacheRoot.empty()) return {};
  return cacheRoot + "/cpu/" + topology.key() + ".v" + std::to_string(kCpuTuningVersion) + ".txt";
}

CpuTuning loadCpuTuning(const std::string& cacheRoot, const CpuTopology& topology) {
  const CpuTuning defaults = defaultCpuTuning(topology);
  const std::string path = cpuTuningPath(cacheRoot, topology);
  if (path.empty()) return defaults;
  std::ifstream in(path);
  if (!in) return defaults;
  std::string text(kMaxFileBytes, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  return parseCpuTuning(text, defaults);
}

bool storeCpuTuning(const std::string& cacheRoot, const CpuTopology& topology, const CpuTuning& tuning) {
  const std::string path = cpuTuningPath(cacheRoot, topology);
  if (path.empty()) return false;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return false;
  return writeFileAtomically(path, formatCpuTuning(tuning));
}

}  // namespace jitllm::cpu
