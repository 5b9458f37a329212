// What the GPU backends' tests check of the ops gemma3 added (kernels/device.h): GEGLU against a
// float64 evaluation of its formula, and attention over a sliding window against attention without
// one over a context that holds only the window's positions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tests/gpu/gpu_test_support.h"

namespace jitllm::testing {

// geglu of n elements on `dev` - out of place, then in place (out == gate), which must give the
// same bits - against float64. Gates of scale 3 and a few chosen ones (zeros, tiny, large of
// either sign) lead the input. The bound follows the float evaluation: z's own roundings (its
// constants, g^2, the fma, the product: within 3 |z| ulp) and exp's error (SPIR-V allows
// 3 + 2|x| ulp; CUDA's expf is within 2) carry into the result through exp(-z) / (1 + exp(-z))
// <= 1, the division and the products add a few ulp. Where exp(-z) overflows (gates below about
// -10) the float formula gives 0 for a true value below |gate up| / FLT_MAX; results near FLT_MIN
// may flush.
inline void expectGegluMatchesFloat64(Device& dev, int64_t n, uint32_t seed) {
  auto gHost = randomFloats(size_t(n), seed, 3.0f);
  const float chosen[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1.0f, -1.0f, 4.0f, -4.0f, 9.0f, -9.0f, 40.0f, -40.0f, 1e20f};
  for (size_t i = 0; i < std::size(chosen) && i < gHost.size(); i++) gHost[i] = chosen[i];
  const auto uHost = randomFloats(size_t(n), seed + 1);
  auto g = upload(dev, gHost);
  auto u = upload(dev, uHost);
  auto out = dev.allocate(size_t(n) * 4);
  dev.geglu(g.as<float>(), u.as<float>(), reinterpret_cast<float*>(out->data()), n);
  const auto got = download<float>(dev, *out, size_t(n));
  dev.geglu(g.as<float>(), u.as<float>(), g.as<float>(), n);
  const auto inPlace = download<float>(dev, *g.buffer, size_t(n));
  EXPECT_EQ(0, std::memcmp(inPlace.data(), got.data(), got.size() * 4)) << "out aliasing gate";
  double worst = 0;     // the largest error as a share of its bound, for the log
  double ordinary = 0;  // the largest relative error where |gate| <= 3, for the log
  for (size_t i = 0; i < got.size(); i++) {
    const double x = gHost[i];
    const double z = 1.5957691216057308 * (x + 0.044715 * x * x * x);
    const double want = x / (1.0 + std::exp(-z)) * double(uHost[i]);
    const double bound =
        (8.0 + 5.0 * std::fabs(z)) * FLT_EPSILON * std::fabs(want) + FLT_MIN + std::fabs(x * uHost[i]) / FLT_MAX;
    ASSERT_LE(std::fabs(double(got[i]) - want), bound) << i << ": gate " << gHost[i] << ", up " << uHost[i];
    worst = std::max(worst, std::fabs(double(got[i]) - want) / bound);
    if (std::fabs(x) <= 3 && want != 0)
      ordinary = std::max(ordinary, std::fabs(double(got[i]) - want) / std::fabs(want));
  }
  std::printf("geglu of %lld elements: worst error %.3f of its bound; relative error %.3g at most where |gate| <= 3\n",
              static_cast<long long>(n), worst, ordinary);
}

// Attention with a sliding window on one device, against itself without one. K and V of `length`
// positions (random, from `seed`) go into pages the test builds for each call.
class SlidingWindowCheck {
 public:
  SlidingWindowCheck(KvLayout kv, int length, int heads, uint32_t seed)
      : kv_(kv),
        heads_(heads),
        width_(int64_t(kv.kvHeads) * kv.headDim),
        k_(randomFloats(size_t(length * width_), seed)),
        v_(randomFloats(size_t(length * width_), seed + 1)) {}

  static int startOf(int32_t position, int window) { return window > 0 ? std::max(0, position + 1 - window) : 0; }

  // Attention of q (tokens x heads x headDim, host) at `positions` with `window` over one page
  // table shared by the batch, as a session's: the entries of pages that end before the earliest
  // window start are null (freed pages: never allocated here), and positions before that start on
  // its page hold NaN K and V, which would poison any output that read them.
  std::vector<float> windowed(Device& dev, const std::vector<float>& q, const std::vector<int32_t>& positions,
                              int window) const {
    int start = std::numeric_limits<int>::max(), last = 0;
    for (int32_t p : positions) start = std::min(start, startOf(p, window)), last = std::max(last, int(p));
    const int firstPage = start / kv_.pageTokens, pages = last / kv_.pageTokens + 1;
    auto buffer = dev.allocate(size_t(pages - firstPage) * kv_.pageBytes());
    std::vector<const uint8_t*> table(size_t(pages), nullptr);
    for (int p = firstPage; p < pages; p++) {  // in reverse order in the buffer, so the table matters
      table[size_t(p)] = buffer->data() + size_t(pages - 1 - p) * kv_.pageBytes();
    }
    const int from = firstPage * kv_.pageTokens;
    std::vector<int32_t> stored;
    for (int pos = from; pos <= last; pos++) stored.push_back(pos);
    store(dev, table, stored, 0, start);
    return attend(dev, q, positions, std::vector<const uint8_t* const*>(positions.size(), table.data()), window);
  }

  // Each token alone, without a window, over a context of just its window's positions (from
  // position 0 on): what windowed() must give bit for bit.
  std::vector<float> compact(Device& dev, const std::vector<float>& q, const std::vector<int32_t>& positions,
                             int window) const {
    const size_t row = size_t(heads_) * size_t(kv_.headDim);
    std::vector<float> out;
    for (size_t t = 0; t < positions.size(); t++) {
      const int start = startOf(positions[t], window), n = positions[t] + 1 - start;
      const int pages = (n + kv_.pageTokens - 1) / kv_.pageTokens;
      auto buffer = dev.allocate(size_t(pages) * kv_.pageBytes());
      std::vector<const uint8_t*> table;
      for (int p = 0; p < pages; p++) table.push_back(buffer->data() + size_t(p) * kv_.pageBytes());
      std::vector<int32_t> stored;
      for (int pos = start; pos <= positions[t]; pos++) stored.push_back(pos);
      store(dev, table, stored, start, 0);
      const std::vector<float> qt(q.begin() + std::ptrdiff_t(t * row), q.begin() + std::ptrdiff_t((t + 1) * row));
      const auto o = attend(dev, qt, {n - 1}, {table.data()}, 0);
      out.insert(out.end(), o.begin(), o.end());
    }
    return out;
  }

  // windowed() on `gpu` against compact() there (bit for bit) and against windowed() on the CPU
  // reference (the same null entries and poisoned positions).
  void expectWindowAttendsOnlyItsPositions(Device& gpu, Device& cpu, const std::vector<int32_t>& positions, int window,
                                           uint32_t seed) const {
    SCOPED_TRACE(std::to_string(positions.size()) + " tokens from position " + std::to_string(positions[0]) +
                 ", window " + std::to_string(window));
    const auto q = randomFloats(positions.size() * size_t(heads_) * size_t(kv_.headDim), seed, 0.3f);
    const auto got = windowed(gpu, q, positions, window);
    for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "a position before the window was read";
    const auto want = compact(gpu, q, positions, window);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
    EXPECT_LT(nmse(got, windowed(cpu, q, positions, window)), 1e-10);
  }

 private:
  // K and V of the positions `stored` into slots stored[i] - shift of `table`, NaN for positions
  // below `poisonBelow`.
  void store(Device& dev, const std::vector<const uint8_t*>& table, const std::vector<int32_t>& stored, int shift,
             int poisonBelow) const {
    std::vector<float> k, v;
    std::vector<KvSlot> slots;
    for (int32_t pos : stored) {
      const auto at = [&](const std::vector<float>& from) { return from.begin() + std::ptrdiff_t(pos * width_); };
      if (pos < poisonBelow) {
        k.insert(k.end(), size_t(width_), std::numeric_limits<float>::quiet_NaN());
        v.insert(v.end(), size_t(width_), std::numeric_limits<float>::quiet_NaN());
      } else {
        k.insert(k.end(), at(k_), at(k_) + width_);
        v.insert(v.end(), at(v_), at(v_) + width_);
      }
      const int slot = pos - shift;
      slots.push_back({const_cast<uint8_t*>(table[size_t(slot / kv_.pageTokens)]), slot % kv_.pageTokens});
    }
    auto gk = upload(dev, k), gv = upload(dev, v);
    dev.kvStore(gk.as<float>(), gv.as<float>(), int64_t(stored.size()), slots.data(), kv_);
  }

  std::vector<float> attend(Device& dev, const std::vector<float>& q, const std::vector<int32_t>& positions,
                            const std::vector<const uint8_t* const*>& tables, int window) const {
    auto gq = upload(dev, q);
    auto out = dev.allocate(q.size() * 4);
    AttentionBatch b;
    b.tokens = int64_t(positions.size());
    b.heads = heads_;
    b.kv = kv_;
    b.scale = float(1.0 / std::sqrt(double(kv_.headDim)));
    b.window = window;
    b.positions = positions.data();
    b.pageTables = tables.data();
    dev.attention(gq.as<float>(), reinterpret_cast<float*>(out->data()), b);
    return download<float>(dev, *out, q.size());
  }

  KvLayout kv_;
  int heads_;
  int64_t width_;
  std::vector<float> k_, v_;
};

// The cases both backends run (fp16 and fp32 pages): decode windows starting mid-page, on a page
// boundary, one position long, reaching just short of and just past the context's start; prefill
// batches of 80 consecutive tokens whose windows start across several pages, from before the window
// has filled to after; and windows longer than every context, which must give window 0's bits.
// Two KV heads of headDim, eight query heads, pages of 16 positions.
inline void expectSlidingWindowsAttendOnlyTheirPositions(Device& gpu, Device& cpu, KvPrecision precision, uint32_t seed,
                                                         int headDim = 64) {
  const KvLayout kv{16, 2, headDim, precision};
  const SlidingWindowCheck check(kv, 300, 8, seed);
  for (int window : {100, 200, 64, 44, 1, 299, 300, 1000}) {
    check.expectWindowAttendsOnlyItsPositions(gpu, cpu, {299}, window, seed + uint32_t(window));
  }
  std::vector<int32_t> late, early, first;
  for (int32_t i = 0; i < 80; i++) late.push_back(220 + i), early.push_back(20 + i), first.push_back(i);
  check.expectWindowAttendsOnlyItsPositions(gpu, cpu, late, 50, seed + 1);
  check.expectWindowAttendsOnlyItsPositions(gpu, cpu, late, 150, seed + 2);
  check.expectWindowAttendsOnlyItsPositions(gpu, cpu, early, 50, seed + 3);
  // A window no context reaches: window 0's bits, on the same pages and queries.
  const auto q = randomFloats(first.size() * 8 * size_t(headDim), seed + 4, 0.3f);
  const auto none = check.windowed(gpu, q, first, 0);
  const auto wide = check.windowed(gpu, q, first, 100);
  EXPECT_EQ(0, std::memcmp(none.data(), wide.data(), none.size() * 4)) << "a window past every context";
  EXPECT_LT(nmse(none, check.windowed(cpu, q, first, 0)), 1e-10);
}

}  // namespace jitllm::testing
