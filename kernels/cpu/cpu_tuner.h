// Measures this CPU's CpuTuning (cpu_tuning.h) by timing the device's own matrix products on
// random q4_K weights, the type most models people run are made of:
//   threads         every physical core against every logical CPU (SMT siblings in), for decode
//                   (weights streamed from memory) and prefill, each relative to its best;
//   cache_resident  decode with the streaming hint on and off over working sets from L2-sized to
//                   four times the last-level cache: the largest set still faster without it;
//   narrow_int8     per type and phase, 512- against 256-bit integer kernels (AVX-512 VNNI only);
//   prefetch_bytes  how far ahead decode requests streamed rows, 2-16 KB, on q8_0 and q4_K rows;
//   prefill_chunk   the 256-bit prefill's column chunk (avx2 / avxvnni only).
// A run takes a few seconds and about 4x the last-level cache of memory (64 MiB to 1 GiB).
// Timings are the minimum of several repetitions, so a busy machine skews them less.
//
// Thread-safety: one measurement at a time per process is sensible (it loads every core);
// loadOrMeasureCpuTuning serializes its own, within the process and across processes.
#pragma once

#include <functional>
#include <string>

#include "kernels/cpu/cpu_topology.h"
#include "kernels/cpu/cpu_tuning.h"
#include "kernels/cpu/gemm/isa.h"

namespace jitllm::cpu {

// `log` receives one line per measurement ("threads 2: decode 12.3 ms, prefill 45.6 ms").
CpuTuning measureCpuTuning(const CpuTopology& topology, Isa isa, const std::function<void(const std::string&)>& log);

// The tuning a CpuDevice takes when it is given none: this CPU's file in the cache, and on the
// first run on a machine (no file yet) the measurement above, made now and kept, so the settings
// are this CPU's from the start without anyone running `jitllm-bench --tune`. A measurement costs
// about a second, once per CPU model and cache size.
//   - Only where the result can be kept (a cache root whose cpu/ folder takes a lock file): a
//     machine without a writable cache keeps the defaults rather than measuring on every start.
//   - Not when JITLLM_CPU_TUNE=0 (`allowed` false): the test suites set it, since their devices
//     would otherwise measure at once in parallel processes, and a measurement's noise is no test.
//   - Processes that start together measure once: each holds an exclusive flock on <file>.lock
//     while it looks, and the ones that waited read the file the first one kept.
//   - A measurement that throws (no memory for its working set, about 4x the last-level cache)
//     leaves the defaults and no file: the device still opens, and the next run tries again.
//   - An existing file is used as it is, even a damaged one (its unreadable lines keep their
//     defaults: cpu_tuning.h); `jitllm-bench --tune` measures again.
// `measure` makes the measurement (measureCpuTuning with the CPU's fastest Isa, whatever
// JITLLM_ISA forces for this process: the file serves every process on the machine); `report`
// gets one line when a measurement ran.
CpuTuning loadOrMeasureCpuTuning(const std::string& cacheRoot, const CpuTopology& topology, bool allowed,
                                 const std::function<CpuTuning()>& measure,
                                 const std::function<void(const std::string&)>& report);
// loadOrMeasureCpuTuning for this machine: cacheRoot(), detectCpuTopology(), allowed unless
// JITLLM_CPU_TUNE=0, the fastest Isa's measurement, and its line on stderr.
CpuTuning thisCpusTuning();

}  // namespace jitllm::cpu
