// The CPU's attention kernel on every Isa this machine runs, against float64: each head dimension
// the vector kernels specialise (32, 64, 128, 256 and one they do not, 96), fp16 and fp32 pages,
// windows whose length is not a multiple of any vector width, and a sliding window; and heads
// computed together against the same heads alone.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant/half.h"

namespace jitllm::cpu {
namespace {

struct Case {
  int headDim;
  KvPrecision precision;
  int32_t position;  // the query's position: it attends to position + 1 keys (or the window's)
  int window;
};

// out[head] for one query over pages filled with k and v (already rounded to the page precision),
// in float64.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                              int heads, int kvHeads, int hd, int64_t first, int64_t last, float scale) {
  std::vector<double> out(size_t(heads * hd), 0.0);
  const int group = heads / kvHeads;
  for (int h = 0; h < heads; h++) {
    const int kvh = h / group;
    std::vector<double> s;
    double maxScore = -INFINITY;
    for (int64_t j = first; j <= last; j++) {
      double d = 0;
      for (int i = 0; i < hd; i++) d += double(q[size_t(h * hd + i)]) * k[size_t((j * kvHeads + kvh) * hd + i)];
      s.push_back(d * scale);
      maxScore = std::max(maxScore, s.back());
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - maxScore));
    for (int64_t j = first; j <= last; j++) {
      for (int i = 0; i < hd; i++) {
        out[size_t(h * hd + i)] += s[size_t(j - first)] / sum * v[size_t((j * kvHeads + kvh) * hd + i)];
      }
    }
  }
  return out;
}

TEST(CpuAttention, EveryIsaAndHeadDimensionAgreesWithFloat64) {
  const Case cases[] = {
      {32, KvPrecision::kF16, 0, 0},   {32, KvPrecision::kF32, 36, 0},  {64, KvPrecision::kF16, 70, 0},
      {64, KvPrecision::kF32, 16, 0},  {128, KvPrecision::kF16, 44, 0}, {128, KvPrecision::kF32, 9, 0},
      {256, KvPrecision::kF16, 23, 0}, {96, KvPrecision::kF32, 30, 0},  {128, KvPrecision::kF16, 90, 13}};
  const int heads = 4, kvHeads = 2, pageTokens = 16;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const Case& c : cases) {
    const KvLayout kv{pageTokens, kvHeads, c.headDim, c.precision};
    const int64_t tokens = c.position + 1, width = int64_t(kvHeads) * c.headDim;
    std::vector<float> k(size_t(tokens * width)), v(k.size()), q(size_t(heads * c.headDim));
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    for (float& x : q) x = 2.0f * dist(rng);
    // Pages in reverse order in memory: the kernel must follow the table.
    const int64_t pages = (tokens + pageTokens - 1) / pageTokens;
    std::vector<uint8_t> memory(size_t(pages) * kv.pageBytes());
    std::vector<const uint8_t*> table;
    for (int64_t p = 0; p < pages; p++) table.push_back(memory.data() + size_t(pages - 1 - p) * kv.pageBytes());
    for (int64_t t = 0; t < tokens; t++) {
      auto* page = const_cast<uint8_t*>(table[size_t(t / pageTokens)]);
      for (int which = 0; which < 2; which++) {
        uint8_t* row = page + size_t(which * pageTokens + t % pageTokens) * kv.tokenBytes();
        float* src = (which == 0 ? k.data() : v.data()) + t * width;
        for (int64_t i = 0; i < width; i++) {
          if (c.precision == KvPrecision::kF16) {
            const uint16_t h = quant::fp32ToFp16(src[i]);
            src[i] = quant::fp16ToFp32(h);  // the reference sees what the page holds
            reinterpret_cast<uint16_t*>(row)[i] = h;
          } else {
            reinterpret_cast<float*>(row)[i] = src[i];
          }
        }
      }
    }
    const uint8_t* const* tables[1] = {table.data()};
    AttentionBatch b;
    b.tokens = 1;
    b.heads = heads;
    b.kv = kv;
    b.scale = 1.0f / std::sqrt(float(c.headDim));
    b.window = c.window;
    b.positions = &c.position;
    b.pageTables = tables;
    const int64_t first = c.window > 0 ? std::max<int64_t>(0, c.position - c.window + 1) : 0;
    const std::vector<double> want = reference(q, k, v, heads, kvHeads, c.headDim, first, c.position, b.scale);
    for (Isa isa : kAllIsas) {
      if (!isaSupported(isa)) continue;
      SCOPED_TRACE(std::string(isaName(isa)) + " head dim " + std::to_string(c.headDim) + " position " +
                   std::to_string(c.position) + (c.precision == KvPrecision::kF16 ? " fp16" : " fp32") + " window " +
                   std::to_string(c.window));
      std::vector<float> out(q.size(), NAN);
      AttentionScratch scratch;
      for (int h = 0; h < heads; h++) attendHeads(q.data(), out.data(), b, 0, h, 1, isa, scratch);
      for (size_t i = 0; i < out.size(); i++) ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << i;
    }
  }
}

// Heads of one KV head computed together (attendHeads' count > 1: shared K and V loads, their sums
// interleaved) give each head the bits it gets alone, on every Isa, head dimension and group size
// (odd ones too), at windows of 1 to 45 keys (score blocks of 8 and 4 with tails).
TEST(CpuAttention, HeadsComputedTogetherGetTheBitsTheyGetAlone) {
  const int kvHeads = 2, pageTokens = 16;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const int hd : {32, 64, 96, 128, 256}) {
    for (const KvPrecision precision : {KvPrecision::kF16, KvPrecision::kF32}) {
      for (const int group : {2, 3, 4, 8}) {
        for (const int32_t position : {0, 5, 8, 12, 44}) {
          const KvLayout kv{pageTokens, kvHeads, hd, precision};
          const int heads = kvHeads * group;
          const int64_t pages = (position + pageTokens) / pageTokens;
          std::vector<uint8_t> memory(size_t(pages) * kv.pageBytes());
          for (size_t i = 0; i + 4 <= memory.size(); i += 4) {
            const float x = dist(rng);
            if (precision == KvPrecision::kF16) {
              const uint16_t h = quant::fp32ToFp16(x);
              std::memcpy(&memory[i], &h, 2);
              std::memcpy(&memory[i + 2], &h, 2);
            } else {
              std::memcpy(&memory[i], &x, 4);
            }
          }
          std::vector<const uint8_t*> table;
          for (int64_t p = 0; p < pages; p++) table.push_back(memory.data() + size_t(p) * kv.pageBytes());
          const uint8_t* const* tables[1] = {table.data()};
          std::vector<float> q(size_t(heads * hd));
          for (float& x : q) x = 2.0f * dist(rng);
          AttentionBatch b;
          b.tokens = 1;
          b.heads = heads;
          b.kv = kv;
          b.scale = 1.0f / std::sqrt(float(hd));
          b.positions = &position;
          b.pageTables = tables;
          for (Isa isa : kAllIsas) {
            if (!isaSupported(isa)) continue;
            SCOPED_TRACE(std::string(isaName(isa)) + " head dim " + std::to_string(hd) + " group " +
                         std::to_string(group) + " position " + std::to_string(position));
            std::vector<float> alone(q.size(), NAN), together(q.size(), NAN);
            AttentionScratch scratch;
            for (int h = 0; h < heads; h++) attendHeads(q.data(), alone.data(), b, 0, h, 1, isa, scratch);
            for (int h = 0; h < heads;) {
              const int count = std::min(group - h % group, kMaxHeadsAtOnce);
              attendHeads(q.data(), together.data(), b, 0, h, count, isa, scratch);
              h += count;
            }
            ASSERT_EQ(0, std::memcmp(alone.data(), together.data(), alone.size() * sizeof(float)));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace jitllm::cpu
