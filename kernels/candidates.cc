#include "kernels/candidates.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "base/error.h"

namespace jitllm {

void selectCandidates(const float* row, int64_t vocab, const CandidateRequest& request, int32_t* ids, float* values) {
  const int64_t count = std::min<int64_t>(request.count, vocab);
  if (count <= 0) return;
  // The penalised ids in ascending order, merged into the scan below.
  std::vector<std::pair<int32_t, float>> penalties;
  if (request.repeatPenalty != 1.0f) {
    for (int32_t id : request.penalized) {
      if (id >= 0 && id < vocab) penalties.emplace_back(id, penalize(row[id], request.repeatPenalty));
    }
    std::sort(penalties.begin(), penalties.end());
    penalties.erase(std::unique(penalties.begin(), penalties.end(),
                                [](const auto& a, const auto& b) { return a.first == b.first; }),
                    penalties.end());
  }
  size_t nextPenalty = 0;
  auto valueAt = [&](int64_t i) {
    if (nextPenalty < penalties.size() && penalties[nextPenalty].first == i) return penalties[nextPenalty++].second;
    return row[i];
  };
  if (count == 1) {
    float best = valueAt(0);
    int32_t bestId = 0;
    for (int64_t i = 1; i < vocab; i++) {
      const float v = valueAt(i);
      if (candidateBefore(v, int32_t(i), best, bestId)) {
        best = v;
        bestId = int32_t(i);
      }
    }
    ids[0] = bestId;
    values[0] = best;
    return;
  }
  // A heap of the best `count` so far whose top is the worst of them: most logits are rejected by
  // one comparison with it.
  struct Entry {
    float value;
    int32_t id;
  };
  auto worse = [](const Entry& a, const Entry& b) { return candidateBefore(a.value, a.id, b.value, b.id); };
  std::vector<Entry> heap;
  heap.reserve(size_t(count));
  for (int64_t i = 0; i < vocab; i++) {
    const float v = valueAt(i);
    if (int64_t(heap.size()) < count) {
      heap.push_back({v, int32_t(i)});
      std::push_heap(heap.begin(), heap.end(), worse);
    } else if (candidateBefore(v, int32_t(i), heap.front().value, heap.front().id)) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      heap.back() = {v, int32_t(i)};
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  }
  std::sort(heap.begin(), heap.end(), worse);
  for (size_t k = 0; k < heap.size(); k++) {
    ids[k] = heap[k].id;
    values[k] = heap[k].value;
  }
}

CandidateTable planCandidateTable(std::span<const CandidateRequest> requests, int64_t stride, int64_t maxCount,
                                  const std::string& device) {
  CandidateTable t;
  t.rows = requests.size();
  for (const CandidateRequest& r : requests) {
    JITLLM_REQUIRE(r.count >= 1 && r.count <= stride && r.count <= maxCount, device,
                   ": selectCandidates: a row asks for ", r.count, " candidates, room for ",
                   std::min(stride, maxCount));
    if (r.repeatPenalty != 1.0f) t.penalised += r.penalized.size();
  }
  return t;
}

void packCandidateTable(std::span<const CandidateRequest> requests, const CandidateTable& table, void* out) {
  auto* base = static_cast<uint8_t*>(out);
  auto* counts = reinterpret_cast<int32_t*>(base);
  auto* starts = reinterpret_cast<int32_t*>(base + table.startsOffset());
  auto* ids = reinterpret_cast<int32_t*>(base + table.idsOffset());
  auto* penalties = reinterpret_cast<float*>(base + table.penaltiesOffset());
  int32_t at = 0;
  for (size_t r = 0; r < table.rows; r++) {
    const CandidateRequest& q = requests[r];
    counts[r] = q.count;
    starts[r] = at;
    penalties[r] = q.repeatPenalty;
    if (q.repeatPenalty != 1.0f) {
      for (int32_t id : q.penalized) ids[at++] = id;
    }
  }
  starts[table.rows] = at;
}

}  // namespace jitllm
