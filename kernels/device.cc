#include "kernels/device.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/error.h"

namespace jitllm {

void Device::reserveMemory(size_t bytes) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > info_.memoryBudget || used > info_.memoryBudget - bytes) {
      JITLLM_FAIL(kOverloaded, info_.id.str(), ": out of memory: ", bytes, " bytes requested, ",
                  info_.memoryBudget - std::min(used, info_.memoryBudget), " of ", info_.memoryBudget, " free");
    }
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
}

namespace {

class PlainHostBuffer final : public HostBuffer {
 public:
  explicit PlainHostBuffer(size_t bytes) : bytes_(new uint8_t[bytes]), size_(bytes) {}
  uint8_t* data() override { return bytes_.get(); }
  size_t size() const override { return size_; }

 private:
  std::unique_ptr<uint8_t[]> bytes_;
  size_t size_;
};

}  // namespace

std::unique_ptr<HostBuffer> Device::allocateStreamSource(size_t bytes) {
  return std::make_unique<PlainHostBuffer>(bytes);
}

uint64_t Device::uploadAsync(uint8_t* dst, const void* src, size_t bytes, uint64_t) {
  copyFromHost(dst, src, bytes);
  return 0;
}

DeviceLocks::DeviceLocks(std::vector<Device*> devices) : devices_(std::move(devices)) {
  std::erase(devices_, nullptr);
  std::sort(devices_.begin(), devices_.end());
  devices_.erase(std::unique(devices_.begin(), devices_.end()), devices_.end());
  for (Device* d : devices_) locks_.emplace_back(d->executorMutex());
}

bool DeviceLocks::holds(const Device* device) const {
  return std::binary_search(devices_.begin(), devices_.end(), device);
}

std::string cacheRoot() {
  if (const char* dir = std::getenv("JITLLM_CACHE_DIR")) return dir;  // empty: off
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/jitllm";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/jitllm";
  return {};
}

std::string formatUuid(const uint8_t* u) {
  char out[40];
  std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return out;
}

void Device::matmuls(std::span<const MatmulTarget> targets, const float* x, int64_t tokens) {
  for (const MatmulTarget& t : targets) matmul(t.w, x, tokens, t.y, t.bias);
}

void Device::ropeAndStore(float* q, float* k, const float* v, int64_t tokens, int heads, int kvHeads,
                          const int32_t* positions, const RopeParams& params, const KvSlot* slots,
                          const KvLayout& layout) {
  rope(q, tokens, heads, layout.headDim, positions, params);
  rope(k, tokens, kvHeads, layout.headDim, positions, params);
  kvStore(k, v, tokens, slots, layout);
}

void Device::softcap(float* x, float cap, int64_t n) {
  std::vector<float> host(static_cast<size_t>(n));
  copyToHost(host.data(), reinterpret_cast<const uint8_t*>(x), host.size() * sizeof(float));
  for (float& v : host) v = cap * std::tanh(v / cap);
  copyFromHost(reinterpret_cast<uint8_t*>(x), host.data(), host.size() * sizeof(float));
}

void Device::copyToDevice(Device& target, uint8_t* dst, const uint8_t* src, size_t bytes) {
  // Chunks bound the staging memory; 4 MiB keeps each transfer large enough to run at full speed.
  constexpr size_t kChunk = size_t(4) << 20;
  std::vector<uint8_t> staging(std::min(bytes, kChunk));
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kChunk, bytes - done);
    copyToHost(staging.data(), src + done, n);
    target.copyFromHost(dst + done, staging.data(), n);
    done += n;
  }
}

void Device::gatherToHost(void* dst, const uint8_t* const* blocks, size_t count, size_t blockBytes) {
  auto* out = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < count; i++) copyToHost(out + i * blockBytes, blocks[i], blockBytes);
}

void Device::scatterFromHost(uint8_t* const* blocks, const void* src, size_t count, size_t blockBytes) {
  const auto* in = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < count; i++) copyFromHost(blocks[i], in + i * blockBytes, blockBytes);
}

void Device::selectCandidates(float* logits, int64_t rows, int64_t vocab, std::span<const CandidateRequest> requests,
                              int32_t* ids, float* values, int64_t stride) {
  JITLLM_REQUIRE(int64_t(requests.size()) == rows, "selectCandidates: ", requests.size(), " requests for ", rows,
                 " rows");
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < rows; r++) {
    JITLLM_REQUIRE(requests[size_t(r)].count >= 1 && requests[size_t(r)].count <= stride,
                   "selectCandidates: a row asks for ", requests[size_t(r)].count, " candidates, room for ", stride);
    copyToHost(row.data(), reinterpret_cast<const uint8_t*>(logits + r * vocab), row.size() * sizeof(float));
    jitllm::selectCandidates(row.data(), vocab, requests[size_t(r)], ids + r * stride, values + r * stride);
  }
}

bool Device::moveBlocksTo(Device&, const uint8_t* const*, uint8_t* const*, size_t, size_t) { return false; }

}  // namespace jitllm
