// What the CPU is, as far as tuning cares: its model, its cores with and without SMT siblings,
// and its cache sizes. Tuned settings are kept per topology (cpu_tuning.h), so a different CPU
// (or a VM given other cores) starts from its own measurements.
//
// Thread-safety: pure functions (they read cpuid and sysfs).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace jitllm::cpu {

struct CpuTopology {
  std::string model = "unknown";  // the brand string, e.g. "AMD EPYC 7B13 64-Core Processor"
  int logicalCpus = 1;            // online CPUs, SMT siblings counted
  int physicalCores = 1;          // distinct (package, core) among the online CPUs
  size_t l2Bytes = 0;             // the first online CPU's caches (0: unknown)
  size_t l3Bytes = 0;

  // A file-name-safe key of everything above: tuning measured on one topology is never used on
  // another.
  std::string key() const;
};

// Reads the topology; `sysCpuDir` is sysfs's cpu directory (another root for tests). Whatever
// cannot be read keeps the defaults above (logical CPUs fall back to sysconf).
CpuTopology detectCpuTopology(const std::string& sysCpuDir = "/sys/devices/system/cpu");

// "0-3,8,10-11" -> the listed numbers, in order; malformed parts are skipped.
std::vector<int> parseCpuList(const std::string& list);

}  // namespace jitllm::cpu
