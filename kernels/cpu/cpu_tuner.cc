#include "kernels/cpu/cpu_tuner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/device.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/tensor_type.h"

namespace jitllm::cpu {

namespace {

// The 1B shape's FFN matrices: 2048 x 8192 q4_K (9 MiB each).
constexpr int64_t kRows = 2048, kCols = 8192;
constexpr int64_t kPrefillTokens = 32;
constexpr int kReps = 5;

struct RandomMatrices {
  quant::TensorType type = quant::TensorType::kQ4_K;
  std::vector<uint8_t> bytes;
  size_t matrixBytes = 0;
  size_t rowStride = 0;
  int64_t count = 0;
  WeightRef matrix(int64_t i) const {
    return WeightRef{type, bytes.data() + size_t(i) * matrixBytes, kRows, kCols, rowStride};
  }
};

// Sets every block's float16 scales to ordinary values: random halves would include NaN and
// subnormals, whose arithmetic may run at another speed.
template <class Block>
void fixScales(std::vector<uint8_t>& bytes, void (*fix)(Block&)) {
  auto* blocks = reinterpret_cast<Block*>(bytes.data());
  for (size_t b = 0; b < bytes.size() / sizeof(Block); b++) fix(blocks[b]);
}

// Blocks of `type` (q4_K, q6_K or q8_0) of random bits with ordinary scales.
RandomMatrices randomMatrices(size_t totalBytes, quant::TensorType type = quant::TensorType::kQ4_K) {
  RandomMatrices m;
  m.type = type;
  m.rowStride = *quant::rowBytes(type, kCols);
  m.matrixBytes = m.rowStride * size_t(kRows);
  m.count = std::max<int64_t>(1, int64_t(totalBytes / m.matrixBytes));
  m.bytes.resize(m.matrixBytes * size_t(m.count));
  std::mt19937_64 rng(7);
  for (size_t i = 0; i + 8 <= m.bytes.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(m.bytes.data() + i, &v, 8);
  }
  switch (type) {
    case quant::TensorType::kQ4_K:
      fixScales<quant::block_q4_K>(m.bytes, [](quant::block_q4_K& b) {
        b.d = 0x2C00;     // 1/16
        b.dmin = 0x2800;  // 1/32
      });
      break;
    case quant::TensorType::kQ6_K:
      fixScales<quant::block_q6_K>(m.bytes, [](quant::block_q6_K& b) { b.d = 0x2C00; });
      break;
    case quant::TensorType::kQ8_0:
      fixScales<quant::block_q8_0>(m.bytes, [](quant::block_q8_0& b) { b.d = 0x2C00; });
      break;
    default:
      break;
  }
  return m;
}

using Clock = std::chrono::steady_clock;

template <class F>
double minMilliseconds(F&& f) {
  f();  // warm-up
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < kReps; r++) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

// The minimum time of each of `runs` over kAlternations rounds that take them in turn, so that a
// machine whose speed drifts while it is measured (a shared VM) slows them alike: timed one after
// the other, the 512- and 256-bit kernels' choice followed the drift (this VM chose each on
// different runs).
constexpr int kAlternations = 9;
std::vector<double> alternatingMilliseconds(const std::vector<std::function<void()>>& runs) {
  for (const auto& run : runs) run();  // warm-up
  std::vector<double> best(runs.size(), std::numeric_limits<double>::infinity());
  for (int r = 0; r < kAlternations; r++) {
    for (size_t i = 0; i < runs.size(); i++) {
      const auto t0 = Clock::now();
      runs[i]();
      best[i] = std::min(best[i], std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  return best;
}
std::pair<double, double> alternatingMilliseconds(const std::function<void()>& a, const std::function<void()>& b) {
  const std::vector<double> t = alternatingMilliseconds(std::vector<std::function<void()>>{a, b});
  return {t[0], t[1]};
}

CpuDeviceOptions deviceOptions(Isa isa, int threads, const CpuTuning& tuning) {
  CpuDeviceOptions o;
  o.isa = isa;
  o.threads = threads;
  o.tuning = tuning;
  return o;
}

// One decode token through the first `count` matrices.
double decodeMs(CpuDevice& device, const RandomMatrices& m, int64_t count, const std::vector<float>& x,
                std::vector<float>& y) {
  return minMilliseconds([&] {
    for (int64_t i = 0; i < count; i++) device.matmul(m.matrix(i), x.data(), 1, y.data(), nullptr);
  });
}

double prefillMs(CpuDevice& device, const RandomMatrices& m, const std::vector<float>& x, std::vector<float>& y) {
  return minMilliseconds([&] { device.matmul(m.matrix(0), x.data(), kPrefillTokens, y.data(), nullptr); });
}

std::string format(const char* fmt, double a, double b = 0) {
  char line[160];
  std::snprintf(line, sizeof line, fmt, a, b);
  return line;
}

}  // namespace

CpuTuning measureCpuTuning(const CpuTopology& topology, Isa isa, const std::function<void(const std::string&)>& log) {
  CpuTuning tuning = defaultCpuTuning(topology);
  tuning.source = "measured";
  const size_t llc = std::max(topology.l3Bytes, topology.l2Bytes);
  // Past every cache, within reason (a server CPU's 300 MiB L3 would ask for 1.2 GB).
  const size_t workingSet = std::clamp<size_t>(4 * llc, size_t(64) << 20, size_t(1) << 30);
  const RandomMatrices m = randomMatrices(workingSet);
  std::vector<float> x(size_t(kPrefillTokens * kCols)), y(size_t(kPrefillTokens * kRows));
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);

  // Threads: each candidate's decode (always streamed: the working set is past the caches) and
  // prefill, scored by the sum of each relative to the best of its kind.
  std::vector<int> candidates = {topology.physicalCores};
  if (topology.logicalCpus != topology.physicalCores) candidates.push_back(topology.logicalCpus);
  std::vector<double> decode, prefill;
  CpuTuning streamed = tuning;
  streamed.cacheResidentBytes = size_t(1) << 20;
  for (int threads : candidates) {
    CpuDevice device(deviceOptions(isa, threads, streamed));
    decode.push_back(decodeMs(device, m, m.count, x, y));
    prefill.push_back(prefillMs(device, m, x, y));
    log("threads " + std::to_string(threads) +
        format(": decode %.2f ms, prefill %.2f ms", decode.back(), prefill.back()));
  }
  const double bestDecode = *std::min_element(decode.begin(), decode.end());
  const double bestPrefill = *std::min_element(prefill.begin(), prefill.end());
  size_t chosen = 0;
  for (size_t i = 1; i < candidates.size(); i++) {
    const double score = decode[i] / bestDecode + prefill[i] / bestPrefill;
    if (score < decode[chosen] / bestDecode + prefill[chosen] / bestPrefill) chosen = i;
  }
  tuning.threads = candidates[chosen];

  // The streaming threshold (only the AVX-512 VNNI decode reads the hint): working sets of 1, 2,
  // 4, ... matrices; the largest where decode without the hint is at least as fast as with it
  // (every larger one is then faster with it).
  if (isa == Isa::kAvx512Vnni || isa == Isa::kAvx512Bf16 || isa == Isa::kAvx512Amx) {
    CpuTuning resident = tuning;
    resident.cacheResidentBytes = size_t(1) << 40;
    CpuTuning hinted = tuning;
    hinted.cacheResidentBytes = size_t(1) << 20;
    CpuDevice plain(deviceOptions(isa, tuning.threads, resident));
    CpuDevice streaming(deviceOptions(isa, tuning.threads, hinted));
    size_t threshold = 0;
    for (int64_t count = 1; count <= m.count; count *= 2) {
      const double a = decodeMs(plain, m, count, x, y), b = decodeMs(streaming, m, count, x, y);
      const double mib = double(size_t(count) * m.matrixBytes) / double(1 << 20);
      log(format("weights %.0f MiB: decode %.3f ms", mib, a) + format(" in the caches' order, %.3f ms streamed", b));
      if (a <= b) threshold = size_t(count) * m.matrixBytes;
    }
    // Nothing faster without the hint: stream anything larger than one matrix.
    tuning.cacheResidentBytes = std::max(threshold, m.matrixBytes);
  }

  // AVX-512 VNNI: per type, decode and prefill on the 512-bit kernels against the 256-bit ones
  // (EVEX vpdpbusd on ymm), which give the same bits. The 256-bit ones take a product when they
  // are clearly faster (5 %), as on CPUs that split 512-bit operations in two.
  if (isa == Isa::kAvx512Vnni || isa == Isa::kAvx512Bf16) {
    CpuTuning wide = tuning, narrow = tuning;
    wide.narrowInt8 = 0;
    narrow.narrowInt8 = ~uint32_t(0);
    wide.cacheResidentBytes = narrow.cacheResidentBytes = size_t(1) << 20;  // decode streams
    CpuDevice wideDevice(deviceOptions(isa, tuning.threads, wide));
    CpuDevice narrowDevice(deviceOptions(isa, tuning.threads, narrow));
    // A quarter of the working set per type keeps the run short and still past the caches.
    for (quant::TensorType type : kNarrowableTypes) {
      const RandomMatrices t = randomMatrices(std::max(workingSet / 4, size_t(2) * llc), type);
      const auto decodeAll = [&](CpuDevice& device) {
        for (int64_t i = 0; i < t.count; i++) device.matmul(t.matrix(i), x.data(), 1, y.data(), nullptr);
      };
      const auto prefill = [&](CpuDevice& device) {
        device.matmul(t.matrix(0), x.data(), kPrefillTokens, y.data(), nullptr);
      };
      const auto [wd, nd] = alternatingMilliseconds([&] { decodeAll(wideDevice); }, [&] { decodeAll(narrowDevice); });
      const auto [wp, np] = alternatingMilliseconds([&] { prefill(wideDevice); }, [&] { prefill(narrowDevice); });
      log(std::string(quant::typeTraits(type).name) + format(": decode %.3f ms (512-bit), %.3f ms", wd, nd) +
          format(" (256-bit); prefill %.2f ms, %.2f ms", wp, np));
      if (nd < 0.95 * wd) tuning.narrowInt8 |= narrowInt8Bit(type, false);
      if (np < 0.95 * wp) tuning.narrowInt8 |= narrowInt8Bit(type, true);
    }
  }

  // How far ahead decode requests a streamed row's lines: each distance's decode of q8_0 and q4_K
  // rows over a working set past the caches (the row-streamed kernels; packed copies keep their
  // own), taken in turn, scored by the sum of each type's time relative to its best. Only the
  // distances the kernels were written with and longer ones: shorter ones never won anywhere.
  {
    const size_t distances[] = {2048, 4096, 8192, 16384};
    double score[std::size(distances)] = {};
    for (quant::TensorType type : {quant::TensorType::kQ8_0, quant::TensorType::kQ4_K}) {
      const RandomMatrices t = randomMatrices(std::max(workingSet / 4, size_t(2) * llc), type);
      std::vector<std::unique_ptr<CpuDevice>> devices;
      std::vector<std::function<void()>> runs;
      for (size_t distance : distances) {
        CpuTuning c = tuning;
        c.prefetchBytes = distance;
        c.cacheResidentBytes = size_t(1) << 20;  // decode streams
        devices.push_back(std::make_unique<CpuDevice>(deviceOptions(isa, tuning.threads, c)));
        runs.push_back([&t, &x, &y, device = devices.back().get()] {
          for (int64_t i = 0; i < t.count; i++) device->matmul(t.matrix(i), x.data(), 1, y.data(), nullptr);
        });
      }
      const std::vector<double> ms = alternatingMilliseconds(runs);
      const double best = *std::min_element(ms.begin(), ms.end());
      std::string line = std::string(quant::typeTraits(type).name) + " decode prefetching";
      for (size_t i = 0; i < ms.size(); i++) {
        score[i] += ms[i] / best;
        line += format(" %.0f KB ahead %.3f ms,", double(distances[i]) / 1024, ms[i]);
      }
      line.pop_back();
      log(line);
    }
    tuning.prefetchBytes = distances[std::min_element(std::begin(score), std::end(score)) - std::begin(score)];
  }

  // The prefill chunk (only the 256-bit kernels have one).
  if (isa == Isa::kAvx2 || isa == Isa::kAvxVnni) {
    double best = std::numeric_limits<double>::infinity();
    for (int64_t chunk : {256, 512, 1024, 2048}) {
      CpuTuning t = tuning;
      t.prefillChunk = chunk;
      CpuDevice device(deviceOptions(isa, tuning.threads, t));
      const double ms = prefillMs(device, m, x, y);
      log(format("prefill chunk %.0f: %.2f ms", double(chunk), ms));
      if (ms < best) {
        best = ms;
        tuning.prefillChunk = chunk;
      }
    }
  }
  return tuning;
}

namespace {

// An exclusive flock on a file, released (and the descriptor closed) on destruction.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) return;
    int rc;
    do {
      rc = ::flock(fd_, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

}  // namespace

CpuTuning loadOrMeasureCpuTuning(const std::string& cacheRoot, const CpuTopology& topology, bool allowed,
                                 const std::function<CpuTuning()>& measure,
                                 const std::function<void(const std::string&)>& report) {
  const std::string path = cpuTuningPath(cacheRoot, topology);
  std::error_code ec;
  if (!allowed || path.empty() || std::filesystem::exists(path, ec)) return loadCpuTuning(cacheRoot, topology);
  // Devices opened together in one process (cpu:0 and cpu:1) measure once too.
  static std::mutex measuring;
  const std::lock_guard<std::mutex> inProcess(measuring);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const FileLock acrossProcesses(path + ".lock");
  if (!acrossProcesses.held() || std::filesystem::exists(path, ec)) return loadCpuTuning(cacheRoot, topology);
  const auto start = std::chrono::steady_clock::now();
  CpuTuning tuning;
  try {
    tuning = measure();
  } catch (const std::exception& e) {
    // A device must open whatever the timing met (no memory for its working set, say): the
    // defaults, and the next run tries again.
    report(std::string("could not measure this CPU's kernel settings (") + e.what() + "); the defaults for now");
    return loadCpuTuning(cacheRoot, topology);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool kept = storeCpuTuning(cacheRoot, topology, tuning);
  char line[256];
  std::snprintf(line, sizeof line,
                "measured this CPU's kernel settings in %.1f s (%s): threads %d, cache_resident_bytes %zu, "
                "prefill_chunk %lld, prefetch_bytes %zu, narrow_int8 %u; ",
                seconds, topology.model.c_str(), tuning.threads, tuning.cacheResidentBytes,
                static_cast<long long>(tuning.prefillChunk), tuning.prefetchBytes, tuning.narrowInt8);
  report(line + (kept ? "kept in " + path + " (jitllm-bench --tune measures again)" : std::string("not kept")));
  return kept ? loadCpuTuning(cacheRoot, topology) : tuning;
}

CpuTuning thisCpusTuning() {
  const CpuTopology topology = detectCpuTopology();
  const char* env = std::getenv("JITLLM_CPU_TUNE");
  const bool allowed = !(env != nullptr && std::strcmp(env, "0") == 0);
  return loadOrMeasureCpuTuning(
      cacheRoot(), topology, allowed,
      [&] { return measureCpuTuning(topology, fastestIsa(detectCpuFeatures()), [](const std::string&) {}); },
      [](const std::string& line) { std::fprintf(stderr, "jitllm: %s\n", line.c_str()); });
}

}  // namespace jitllm::cpu
