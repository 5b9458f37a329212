// The CPU's tuning: its topology read from sysfs, the tuning file (format, damage, location),
// the device taking its thread count from the file, and one real measurement.
#include "kernels/cpu/cpu_tuning.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/cpu/cpu_topology.h"
#include "kernels/cpu/cpu_tuner.h"
#include "kernels/cpu/gemm/isa.h"
#include "kernels/quant/quantize.h"
#include "kernels/quant/tensor_type.h"
#include "tests/scoped_test_state.h"

namespace jitllm::cpu {
namespace {

using jitllm::testing::ScopedEnv;
using jitllm::testing::TempDir;

namespace fs = std::filesystem;

void writeFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

TEST(CpuTopology, CpuListsParseAsTheKernelWritesThem) {
  EXPECT_EQ(parseCpuList("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parseCpuList("0"), (std::vector<int>{0}));
  EXPECT_EQ(parseCpuList("x,3-1,5,-2,7-"), (std::vector<int>{5}));
  EXPECT_TRUE(parseCpuList("").empty());
}

TEST(CpuTopology, SmtSiblingsCountOnceAsPhysicalCores) {
  TempDir sys;
  writeFile(fs::path(sys.path()) / "online", "0-3,6");
  // cpu0/cpu2 and cpu1/cpu3 are sibling pairs; cpu6 is alone on the second package's core 0.
  const int core[] = {0, 1, 0, 1, -1, -1, 0}, package[] = {0, 0, 0, 0, -1, -1, 1};
  for (int c : {0, 1, 2, 3, 6}) {
    const fs::path dir = fs::path(sys.path()) / ("cpu" + std::to_string(c)) / "topology";
    writeFile(dir / "core_id", std::to_string(core[c]));
    writeFile(dir / "physical_package_id", std::to_string(package[c]));
  }
  const fs::path cache = fs::path(sys.path()) / "cpu0" / "cache";
  writeFile(cache / "index0" / "level", "1");
  writeFile(cache / "index0" / "type", "Data");
  writeFile(cache / "index0" / "size", "48K");
  writeFile(cache / "index1" / "level", "1");
  writeFile(cache / "index1" / "type", "Instruction");
  writeFile(cache / "index1" / "size", "32K");
  writeFile(cache / "index2" / "level", "2");
  writeFile(cache / "index2" / "type", "Unified");
  writeFile(cache / "index2" / "size", "2048K");
  writeFile(cache / "index3" / "level", "3");
  writeFile(cache / "index3" / "type", "Unified");
  writeFile(cache / "index3" / "size", "30M");
  const CpuTopology t = detectCpuTopology(sys.path());
  EXPECT_EQ(t.logicalCpus, 5);
  EXPECT_EQ(t.physicalCores, 3);
  EXPECT_EQ(t.l2Bytes, size_t(2048) << 10);
  EXPECT_EQ(t.l3Bytes, size_t(30) << 20);
  EXPECT_NE(t.key().find("-c3t5-l2-2048k-l3-30720k"), std::string::npos) << t.key();
  EXPECT_EQ(defaultCpuTuning(t).threads, 3) << "every physical core, SMT siblings left out";
}

TEST(CpuTopology, KeysAreFileNamesWhateverTheModelIsCalled) {
  CpuTopology t;
  t.model = "Intel(R) Xeon(R) Platinum 8480+ /../../etc";
  const std::string key = t.key();
  EXPECT_EQ(key.find('/'), std::string::npos) << key;
  EXPECT_EQ(key.find(".."), std::string::npos) << key;
  EXPECT_EQ(key.rfind("intel-r-xeon-r-platinum-8480-etc-c1t1", 0), 0u) << key;
}

TEST(CpuTuning, TheFileRoundTripsAndDamageCostsOnlyTheDamagedLines) {
  CpuTopology topology;
  topology.physicalCores = 4;
  const CpuTuning defaults = defaultCpuTuning(topology);
  EXPECT_EQ(defaults.source, "default");
  CpuTuning t = defaults;
  t.threads = 7;
  t.cacheResidentBytes = size_t(96) << 20;
  t.prefillChunk = 1024;
  t.prefetchBytes = 12288;
  t.narrowInt8 = narrowInt8Bit(quant::TensorType::kQ4_K, true) | narrowInt8Bit(quant::TensorType::kQ8_0, false);
  const CpuTuning back = parseCpuTuning(formatCpuTuning(t), defaults);
  EXPECT_EQ(back.threads, 7);
  EXPECT_EQ(back.cacheResidentBytes, size_t(96) << 20);
  EXPECT_EQ(back.prefillChunk, 1024);
  EXPECT_EQ(back.prefetchBytes, 12288u);
  EXPECT_EQ(back.narrowInt8, t.narrowInt8);
  EXPECT_TRUE(runsNarrow(back, quant::TensorType::kQ4_K, kNarrowPrefillTokens));
  EXPECT_FALSE(runsNarrow(back, quant::TensorType::kQ4_K, 1)) << "q4_K decode stays on the 512-bit kernels";
  EXPECT_TRUE(runsNarrow(back, quant::TensorType::kQ8_0, 1));
  EXPECT_FALSE(runsNarrow(back, quant::TensorType::kQ5_0, 1)) << "no 512-bit kernel to leave";
  EXPECT_EQ(back.source, "measured");

  const CpuTuning damaged = parseCpuTuning(
      "threads 0\nthreads 3 4\nprefill_chunk 1000\ncache_resident_bytes 12\nunknown 5\n\x01\x02 garbage\n"
      "prefill_chunk 2048\nnarrow_int8 64\nnarrow_int8 -1\nprefetch_bytes 100\nprefetch_bytes 131072\n"
      "prefetch_bytes -64\n",
      defaults);
  EXPECT_EQ(damaged.narrowInt8, 0u) << "bits past the three types, or negative, are refused";
  EXPECT_EQ(damaged.threads, defaults.threads);
  EXPECT_EQ(damaged.cacheResidentBytes, defaults.cacheResidentBytes);
  EXPECT_EQ(damaged.prefillChunk, 2048);
  EXPECT_EQ(damaged.prefetchBytes, 0u) << "not whole cache lines, past 64 KB, or negative: the kernels' own";
  EXPECT_EQ(parseCpuTuning("nonsense", defaults), defaults);
}

TEST(CpuTuning, KeptUnderTheCacheRootPerTopologyAndOffWithoutOne) {
  TempDir root;
  CpuTopology a, b;
  a.physicalCores = 2;
  b.physicalCores = 3;
  CpuTuning t = defaultCpuTuning(a);
  t.threads = 5;
  ASSERT_TRUE(storeCpuTuning(root.path(), a, t));
  EXPECT_EQ(loadCpuTuning(root.path(), a).threads, 5);
  EXPECT_EQ(loadCpuTuning(root.path(), b).threads, 3) << "another CPU's measurements are not ours";
  EXPECT_FALSE(storeCpuTuning("", a, t));
  EXPECT_EQ(loadCpuTuning("", a), defaultCpuTuning(a));
  // A file of an earlier version (timed on kernels this build no longer runs) is not read: the
  // first run after an upgrade measures again.
  const std::string path = cpuTuningPath(root.path(), b);
  EXPECT_NE(path.find(".v" + std::to_string(kCpuTuningVersion) + ".txt"), std::string::npos) << path;
  std::ofstream(root.path() + "/cpu/" + b.key() + ".txt") << "threads 9\n";
  EXPECT_EQ(loadCpuTuning(root.path(), b).threads, 3) << "an unversioned file is an earlier version's";
}

TEST(CpuTuning, ADeviceTakesItsThreadsFromThisCpusFileUnlessGivenACount) {
  TempDir root;
  const ScopedEnv env("JITLLM_CACHE_DIR", root.path());
  const ScopedEnv noMeasuring("JITLLM_CPU_TUNE", "0");
  const CpuTopology here = detectCpuTopology();
  EXPECT_EQ(CpuDevice().info().threads, here.physicalCores);
  CpuTuning t = defaultCpuTuning(here);
  t.threads = here.physicalCores + 2;
  ASSERT_TRUE(storeCpuTuning(root.path(), here, t));
  CpuDevice tuned;
  EXPECT_EQ(tuned.info().threads, here.physicalCores + 2);
  EXPECT_EQ(tuned.tuning().source, "measured");
  CpuDeviceOptions o;
  o.threads = 1;
  EXPECT_EQ(CpuDevice(o).info().threads, 1);
}

// The first run on a machine measures (here a stand-in measurement) and keeps the result; every
// later run reads it and measures nothing.
TEST(CpuTuning, TheFirstRunMeasuresOnceAndKeepsWhatItMeasured) {
  TempDir root;
  CpuTopology here;
  here.physicalCores = 2;
  CpuTuning measured = defaultCpuTuning(here);
  measured.threads = 7;
  measured.narrowInt8 = 5;
  measured.source = "measured";
  int measurements = 0;
  std::vector<std::string> reports;
  const auto measure = [&] {
    measurements++;
    return measured;
  };
  const auto report = [&](const std::string& line) { reports.push_back(line); };
  const CpuTuning first = loadOrMeasureCpuTuning(root.path(), here, true, measure, report);
  EXPECT_EQ(measurements, 1);
  EXPECT_EQ(first, measured);
  ASSERT_TRUE(fs::exists(cpuTuningPath(root.path(), here)));
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("threads 7"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find(cpuTuningPath(root.path(), here)), std::string::npos) << reports[0];
  const CpuTuning second = loadOrMeasureCpuTuning(root.path(), here, true, measure, report);
  EXPECT_EQ(measurements, 1) << "the kept file serves every later run";
  EXPECT_EQ(second, measured);
  EXPECT_EQ(reports.size(), 1u);
}

// No measurement where it is switched off (the test suites), where there is no cache to keep it
// in, or where the cache cannot take it: the defaults, every time, at no cost.
TEST(CpuTuning, NothingIsMeasuredWhenOffOrWhereTheResultCouldNotBeKept) {
  TempDir root;
  CpuTopology here;
  here.physicalCores = 3;
  int measurements = 0;
  const auto measure = [&] {
    measurements++;
    return defaultCpuTuning(here);
  };
  const auto report = [](const std::string&) {};
  EXPECT_EQ(loadOrMeasureCpuTuning(root.path(), here, false, measure, report), defaultCpuTuning(here));
  EXPECT_FALSE(fs::exists(cpuTuningPath(root.path(), here)));
  EXPECT_EQ(loadOrMeasureCpuTuning("", here, true, measure, report), defaultCpuTuning(here));
  // A cache root below a regular file: no folder, no lock, no file can be made there.
  writeFile(fs::path(root.path()) / "plain-file", "x");
  const std::string blocked = (fs::path(root.path()) / "plain-file" / "cache").string();
  EXPECT_EQ(loadOrMeasureCpuTuning(blocked, here, true, measure, report), defaultCpuTuning(here));
  EXPECT_EQ(measurements, 0);
}

// A measurement that fails leaves a device its defaults and no file, so the next run measures.
TEST(CpuTuning, AMeasurementThatFailsLeavesTheDefaultsAndNoFile) {
  TempDir root;
  CpuTopology here;
  here.physicalCores = 5;
  std::vector<std::string> reports;
  const CpuTuning got = loadOrMeasureCpuTuning(
      root.path(), here, true, []() -> CpuTuning { throw std::runtime_error("no memory for the working set"); },
      [&](const std::string& line) { reports.push_back(line); });
  EXPECT_EQ(got, defaultCpuTuning(here));
  EXPECT_FALSE(fs::exists(cpuTuningPath(root.path(), here)));
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("no memory for the working set"), std::string::npos) << reports[0];
  int measurements = 0;
  loadOrMeasureCpuTuning(
      root.path(), here, true,
      [&] {
        measurements++;
        return defaultCpuTuning(here);
      },
      [](const std::string&) {});
  EXPECT_EQ(measurements, 1) << "the next run tries again";
}

// Two processes that start at once on a fresh machine (jitllmd and a jitllm-run) measure once:
// the second waits on the lock and reads what the first kept.
TEST(CpuTuning, ProcessesThatStartTogetherMeasureOnce) {
  TempDir root;
  CpuTopology here;
  here.physicalCores = 4;
  const fs::path tally = fs::path(root.path()) / "measurements";
  std::vector<pid_t> children;
  for (int i = 0; i < 3; i++) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      CpuTuning t = defaultCpuTuning(here);
      t.threads = 9;
      const CpuTuning got = loadOrMeasureCpuTuning(
          root.path(), here, true,
          [&] {
            std::ofstream(tally, std::ios::app) << "x";
            std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others reach the lock
            return t;
          },
          [](const std::string&) {});
      ::_exit(got.threads == 9 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "every process ends with the measured tuning";
  }
  std::ifstream in(tally);
  std::string marks;
  in >> marks;
  EXPECT_EQ(marks, "x");
}

// The 256-bit kernels an AVX-512 VNNI CPU may be tuned to take give the 512-bit ones' bits (the
// integer contract), decode and prefill, for every type the tuning can move.
TEST(CpuTuning, NarrowIntegerKernelsGiveTheWideKernelsBits) {
  if (!isaSupported(Isa::kAvx512Vnni)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: nothing to narrow";
  CpuTuning wide = defaultCpuTuning(detectCpuTopology()), narrow = wide;
  narrow.narrowInt8 = ~uint32_t(0);
  CpuDeviceOptions wo, no;
  wo.isa = no.isa = Isa::kAvx512Vnni;
  wo.threads = no.threads = 2;
  wo.tuning = wide;
  no.tuning = narrow;
  CpuDevice wideDevice(wo), narrowDevice(no);
  const int64_t rows = 40, cols = 512;
  std::vector<float> weights(size_t(rows * cols)), x(size_t(16 * cols));
  for (size_t i = 0; i < weights.size(); i++) weights[i] = float(int(i * 7919 % 257) - 128) / 64.0f;
  for (size_t i = 0; i < x.size(); i++) x[i] = float(int(i * 104729 % 1001) - 500) / 97.0f;
  for (quant::TensorType type : kNarrowableTypes) {
    SCOPED_TRACE(std::string(quant::typeTraits(type).name));
    const size_t rowBytes = *quant::rowBytes(type, cols);
    std::vector<uint8_t> q(rowBytes * size_t(rows));
    for (int64_t r = 0; r < rows; r++)
      quant::quantizeRow(type, weights.data() + r * cols, q.data() + r * rowBytes, cols);
    const WeightRef w{type, q.data(), rows, cols, rowBytes};
    for (int64_t tokens : {int64_t(1), int64_t(3), int64_t(16)}) {
      std::vector<float> a(size_t(tokens * rows)), b(a.size());
      wideDevice.matmul(w, x.data(), tokens, a.data(), nullptr);
      narrowDevice.matmul(w, x.data(), tokens, b.data(), nullptr);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << tokens << " tokens";
    }
  }
}

// One real measurement on this machine: what it chooses is one of its candidates, and every
// setting it times is logged.
TEST(CpuTuner, MeasuresThisCpuAndChoosesAmongItsCandidates) {
  const CpuTopology here = detectCpuTopology();
  const Isa isa = bestIsa();
  int lines = 0;
  const CpuTuning t = measureCpuTuning(here, isa, [&](const std::string&) { lines++; });
  EXPECT_TRUE(t.threads == here.physicalCores || t.threads == here.logicalCpus) << t.threads;
  EXPECT_EQ(t.source, "measured");
  if (isa == Isa::kAvx2 || isa == Isa::kAvxVnni) {
    EXPECT_TRUE(t.prefillChunk == 256 || t.prefillChunk == 512 || t.prefillChunk == 1024 || t.prefillChunk == 2048);
  }
  EXPECT_TRUE(t.prefetchBytes == 2048 || t.prefetchBytes == 4096 || t.prefetchBytes == 8192 || t.prefetchBytes == 16384)
      << t.prefetchBytes;
  EXPECT_GE(t.cacheResidentBytes, size_t(1) << 20);
  EXPECT_GE(lines, 1 + (here.logicalCpus != here.physicalCores ? 1 : 0));
  // What it measured parses back from its own file.
  EXPECT_EQ(parseCpuTuning(formatCpuTuning(t), defaultCpuTuning(here)).threads, t.threads);
}

// A device given no tuning on a machine whose cache has none measures this CPU (the real tuner)
// and keeps the file; the next device reads it.
TEST(CpuTuner, TheFirstDeviceOnAMachineMeasuresThisCpuAndKeepsIt) {
  TempDir root;
  const ScopedEnv cache("JITLLM_CACHE_DIR", root.path());
  const ScopedEnv measuring("JITLLM_CPU_TUNE", std::nullopt);
  const CpuTopology here = detectCpuTopology();
  const CpuDevice first;
  EXPECT_EQ(first.tuning().source, "measured");
  const std::string path = cpuTuningPath(root.path(), here);
  ASSERT_TRUE(fs::exists(path));
  const auto written = fs::last_write_time(path);
  const CpuDevice second;
  EXPECT_EQ(second.tuning(), first.tuning());
  EXPECT_EQ(fs::last_write_time(path), written) << "measured once";
}

}  // namespace
}  // namespace jitllm::cpu
