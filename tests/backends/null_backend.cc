#include "tests/backends/null_backend.h"

#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace jitllm::testing {
namespace {

class NullDevice;

class NullBuffer final : public DeviceBuffer {
 public:
  NullBuffer(NullDevice& device, size_t size);
  ~NullBuffer() override;
  size_t size() const override { return size_; }
  uint8_t* data() override { return bytes_; }
  Device& device() override;

 private:
  NullDevice& device_;
  uint8_t* bytes_;
  size_t size_;
};

class NullDevice final : public Device {
 public:
  explicit NullDevice(const DeviceOpenOptions& o) {
    info_.id = o.id;
    info_.name = "null device (host memory, no ops)";
    info_.memoryBudget = o.memoryCap ? o.memoryCap : size_t(256) << 20;
    info_.caps.hostMemory = true;
    info_.caps.kernelsCompiledIn = true;
  }
  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    reserveMemory(rounded);
    return std::make_unique<NullBuffer>(*this, rounded);
  }
  std::unique_ptr<DeviceBuffer> adoptHostBytes(const uint8_t* bytes, size_t size) override {
    auto buffer = allocate(size);
    std::memcpy(buffer->data(), bytes, size);
    return buffer;
  }
  void copyFromHost(uint8_t* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copyToHost(void* dst, const uint8_t* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void getRows(const WeightRef&, const int32_t*, int64_t, float*) override { none("getRows"); }
  void rmsNorm(const float*, const float*, float*, int64_t, int64_t, float) override { none("rmsNorm"); }
  void matmul(const WeightRef&, const float*, int64_t, float*, const float*) override { none("matmul"); }
  void rope(float*, int64_t, int, int, const int32_t*, const RopeParams&) override { none("rope"); }
  void kvStore(const float*, const float*, int64_t, const KvSlot*, const KvLayout&) override { none("kvStore"); }
  void attention(const float*, float*, const AttentionBatch&) override { none("attention"); }
  void swiglu(const float*, const float*, float*, int64_t) override { none("swiglu"); }
  void geglu(const float*, const float*, float*, int64_t) override { none("geglu"); }
  void add(float*, const float*, int64_t) override { none("add"); }
  void scale(float*, float, int64_t) override { none("scale"); }

  void released(size_t bytes) { releaseMemory(bytes); }

 private:
  [[noreturn]] void none(const char* op) { JITLLM_FAIL(kUnimplemented, info_.id, ": the null backend runs no ", op); }
};

NullBuffer::NullBuffer(NullDevice& device, size_t size)
    : device_(device), bytes_(static_cast<uint8_t*>(std::aligned_alloc(64, size))), size_(size) {
  if (bytes_ == nullptr) {
    device_.released(size);
    JITLLM_FAIL(kOverloaded, device_.info().id, ": the host could not allocate ", size, " bytes");
  }
}

NullBuffer::~NullBuffer() {
  std::free(bytes_);
  device_.released(size_);
}

Device& NullBuffer::device() { return device_; }

class NullBackend final : public Backend {
 public:
  const std::string& name() const override { return name_; }
  std::unique_ptr<Device> open(const DeviceOpenOptions& options) override {
    return std::make_unique<NullDevice>(options);
  }
  Enumeration enumerate(std::string*) override {
    Enumeration e;
    e.devices.push_back({name_, 0, "", "null device", false});
    e.open = [](const FoundDevice&, const DeviceOpenOptions& o) -> std::unique_ptr<Device> {
      return std::make_unique<NullDevice>(o);
    };
    return e;
  }

 private:
  std::string name_ = "null";
};

}  // namespace

std::unique_ptr<Backend> makeNullBackend() { return std::make_unique<NullBackend>(); }

}  // namespace jitllm::testing
