// How fast a device runs decode, measured: the placement probe. Decode reads every weight once
// per token, so the probe times a Q8_0 matrix-vector product over a 4096 x 4096 weight (the shape
// of a 7B-class projection) and reports its weight bytes per second. Measured once per kind of
// device and machine, then cached on disk, keyed by the device's name (model and kernel variant)
// and threads: two identical GPUs, or cpu:0 and cpu:1, share one measurement and so tie exactly
// (placement keeps their configured order instead of following measurement noise).
//
// Thread-safety: measure() drives the device (its one thread); the cache file is replaced
// atomically, so several processes may share it.
#pragma once

#include <string>

#include "kernels/device.h"

namespace jitllm::runtime {

// What the cache is keyed by: devices with the same key share a measurement.
std::string speedKey(const Device& device);

// GB/s of the probe's product on `device` (median of a few runs after a warm-up).
double measureDecodeSpeed(Device& device);

// The cached speed of `device`, measured and stored on a miss. `cacheRoot` empty: always measure.
// `measured` (may be null) says whether it was measured now.
double decodeSpeed(Device& device, const std::string& cacheRoot, bool* measured = nullptr);

}  // namespace jitllm::runtime
