// What the GPU backends' tests share: the CPU reference device, random inputs, moving arrays on
// and off a device, NMSE - and the backend a test binary is about (each GPU test binary defines
// testedBackend() once, so the whole-model tests in tests/gpu run unchanged on each backend).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/device.h"

namespace jitllm::testing {

struct GpuBackend {
  const char* name;                            // "vulkan", "cuda": the device spec's backend
  std::string (*unavailableReason)();          // empty when a device can be made here
  std::unique_ptr<Device> (*make)(int index);  // the backend's device `index`
  int (*deviceCount)();                        // usable devices of the backend here
};

// Defined once in each GPU test binary (tests/vulkan/vulkan_backend.cc, tests/cuda/cuda_backend.cc).
const GpuBackend& testedBackend();

// Skips the calling test (visibly) when the tested backend has no device here.
#define JITLLM_REQUIRE_GPU()                                                                                  \
  do {                                                                                                        \
    const std::string why = ::jitllm::testing::testedBackend().unavailableReason();                           \
    if (!why.empty()) GTEST_SKIP() << "no " << ::jitllm::testing::testedBackend().name << " device: " << why; \
  } while (0)

// The CPU reference with float32 activations where a fast float path exists: the integer kernels
// (every SIMD Isa but kAvx512) hold activations as ~15-bit integers for q4_K / q6_K / q8_0 (about
// 1e-9 NMSE), which would measure the CPU's error rather than the GPU's. A CPU without AVX-512
// keeps its integer kernels (the portable float ones are too slow for the model tests); the GPU
// tests' bounds (1e-6 NMSE and looser) leave room for that.
inline std::unique_ptr<cpu::CpuDevice> makeCpuDevice(int index = 0) {
  cpu::CpuDeviceOptions o;
  o.index = index;
  o.threads = 2;
  if (cpu::isaSupported(cpu::Isa::kAvx512)) o.isa = cpu::Isa::kAvx512;
  return std::make_unique<cpu::CpuDevice>(o);
}

#ifdef JITLLM_TEST_KERNEL_CACHE
// What a GPU backend's tests need of it: its device type, a name, why it has no device here (empty:
// it has one), and device `index` made with the kernel cache kept under the build tree. Options:
// the backend's device options, with `index` and `cacheRoot`.
template <typename Device, typename Options, const char* Name, std::string (*WhyNot)()>
struct GpuTraits {
  using DeviceType = Device;
  static constexpr const char* kName = Name;
  static std::string unavailableReason() { return WhyNot(); }
  static std::unique_ptr<Device> make(int index) {
    Options o;
    o.index = index;
    o.cacheRoot = JITLLM_TEST_KERNEL_CACHE;
    return Device::create(o);
  }
};
#endif

// Skips the calling test (visibly) when the backend of Traits (below) has no device here.
#define JITLLM_REQUIRE_BACKEND(Traits)                                              \
  do {                                                                              \
    const std::string why = Traits::unavailableReason();                            \
    if (!why.empty()) GTEST_SKIP() << "no " << Traits::kName << " device: " << why; \
  } while (0)

// A fixture with device 0 of a GPU backend - skipping, visibly, where there is none - and the CPU
// reference. Traits: DeviceType, kName, unavailableReason() (empty: a device can be made) and
// make(index).
template <typename Traits>
class GpuOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JITLLM_REQUIRE_BACKEND(Traits);
    gpu = Traits::make(0);
    cpu = makeCpuDevice();
  }
  std::unique_ptr<typename Traits::DeviceType> gpu;
  std::unique_ptr<cpu::CpuDevice> cpu;
};

inline std::vector<float> randomFloats(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng) * scale + offset;
  return v;
}

// A host array copied into a buffer of `device`.
struct Uploaded {
  std::unique_ptr<DeviceBuffer> buffer;
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(buffer->data());
  }
};
template <typename T>
Uploaded upload(Device& device, const std::vector<T>& host) {
  Uploaded u{device.allocate(host.size() * sizeof(T))};
  device.copyFromHost(u.buffer->data(), host.data(), host.size() * sizeof(T));
  return u;
}
template <typename T>
std::vector<T> download(Device& device, const DeviceBuffer& buffer, size_t n) {
  std::vector<T> host(n);
  device.copyToHost(host.data(), const_cast<DeviceBuffer&>(buffer).data(), n * sizeof(T));
  return host;
}

inline double nmse(const std::vector<float>& a, const std::vector<float>& truth) {
  double num = 0, den = 0;
  for (size_t i = 0; i < truth.size(); i++) {
    num += (double(a[i]) - truth[i]) * (double(a[i]) - truth[i]);
    den += double(truth[i]) * truth[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace jitllm::testing
