// A long paged-KV context for the GPU backends' attention tests: `length` positions of random K and
// V stored by a GPU's kvStore and the CPU reference's alike (pages in reverse order, so page
// tables matter), and attention over it on either device.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tests/gpu/gpu_test_support.h"

namespace jitllm::testing {

class LongContext {
 public:
  LongContext(Device& gpu, Device& cpu, KvLayout kv, int length, uint32_t seed)
      : gpu_(gpu), cpu_(cpu), kv_(kv), length_(length) {
    const int pages = (length + kv.pageTokens - 1) / kv.pageTokens;
    gpuPages_ = gpu.allocate(kv.pageBytes() * size_t(pages));
    cpuPages_.resize(kv.pageBytes() * size_t(pages));
    for (int p = 0; p < pages; p++) {
      const size_t off = size_t(pages - 1 - p) * kv.pageBytes();
      gpuTable_.push_back(gpuPages_->data() + off);
      cpuTable_.push_back(cpuPages_.data() + off);
    }
    const int64_t width = int64_t(kv.kvHeads) * kv.headDim;
    const auto k = randomFloats(size_t(length * width), seed), v = randomFloats(size_t(length * width), seed + 1);
    auto gk = upload(gpu, k), gv = upload(gpu, v);
    std::vector<KvSlot> gs, cs;
    for (int t = 0; t < length; t++) {
      gs.push_back({const_cast<uint8_t*>(gpuTable_[size_t(t / kv.pageTokens)]), t % kv.pageTokens});
      cs.push_back({const_cast<uint8_t*>(cpuTable_[size_t(t / kv.pageTokens)]), t % kv.pageTokens});
    }
    gpu.kvStore(gk.as<float>(), gv.as<float>(), length, gs.data(), kv);
    cpu.kvStore(k.data(), v.data(), length, cs.data(), kv);
  }

  int length() const { return length_; }

  // Attention of queries q (tokens x heads x headDim, on the GPU) at `positions` into `out` (GPU).
  void attendOnGpu(const float* q, float* out, const std::vector<int32_t>& positions, int heads, float scale) {
    std::vector<const uint8_t* const*> tables(positions.size(), gpuTable_.data());
    gpu_.attention(q, out, batch(positions, tables, heads, scale));
  }
  // The same with host queries, on the GPU (true) or the CPU; the output comes back to the host.
  std::vector<float> attend(bool onGpu, const std::vector<float>& q, const std::vector<int32_t>& positions, int heads,
                            float scale) {
    if (onGpu) {
      auto gq = upload(gpu_, q);
      auto out = gpu_.allocate(q.size() * 4);
      attendOnGpu(gq.as<float>(), reinterpret_cast<float*>(out->data()), positions, heads, scale);
      return download<float>(gpu_, *out, q.size());
    }
    std::vector<const uint8_t* const*> tables(positions.size(), cpuTable_.data());
    std::vector<float> out(q.size());
    cpu_.attention(q.data(), out.data(), batch(positions, tables, heads, scale));
    return out;
  }

  // `positions` alone - few workgroups, so each token's chunks of positions run apart and are
  // folded after - and `copies` times over with the same queries - enough workgroups for one per
  // token and head, folding as it goes: every copy must have the bits of the first. Checks the
  // first against the CPU too, and returns it.
  std::vector<float> expectChunkedAndWholeAgree(const std::vector<float>& q, const std::vector<int32_t>& positions,
                                                int heads, float scale, int copies) {
    const auto got = attend(true, q, positions, heads, scale);
    EXPECT_LT(nmse(got, attend(false, q, positions, heads, scale)), 1e-12);
    std::vector<int32_t> many;
    std::vector<float> manyQ;
    for (int r = 0; r < copies; r++) {
      many.insert(many.end(), positions.begin(), positions.end());
      manyQ.insert(manyQ.end(), q.begin(), q.end());
    }
    const auto whole = attend(true, manyQ, many, heads, scale);
    for (int r = 0; r < copies; r++) {
      EXPECT_EQ(0, std::memcmp(whole.data() + size_t(r) * got.size(), got.data(), got.size() * 4)) << "copy " << r;
    }
    return got;
  }

 private:
  AttentionBatch batch(const std::vector<int32_t>& positions, const std::vector<const uint8_t* const*>& tables,
                       int heads, float scale) const {
    AttentionBatch b;
    b.tokens = int64_t(positions.size());
    b.heads = heads;
    b.kv = kv_;
    b.scale = scale;
    b.positions = positions.data();
    b.pageTables = tables.data();
    return b;
  }

  Device& gpu_;
  Device& cpu_;
  KvLayout kv_;
  int length_;
  std::unique_ptr<DeviceBuffer> gpuPages_;
  std::vector<uint8_t> cpuPages_;
  std::vector<const uint8_t*> gpuTable_, cpuTable_;
};

}  // namespace jitllm::testing
