#include "engine/runtime/step_executor.h"

#include <algorithm>
#include <chrono>

namespace jitllm::runtime {

// Hands a microbatch's prompt rows to each device that runs one of its blocks, and takes them back
// from all of them before the head - or when the step fails - so no later product reads them.
class StepExecutor::PromptRowsScope {
 public:
  PromptRowsScope(std::span<const Device::RowRange> rows, int64_t tokens, std::vector<Device*>& told)
      : rows_(rows), tokens_(tokens), told_(told) {
    told_.clear();
  }
  PromptRowsScope(const PromptRowsScope&) = delete;
  PromptRowsScope& operator=(const PromptRowsScope&) = delete;
  ~PromptRowsScope() { clear(); }
  void on(Device& d) {
    if (rows_.empty() || std::find(told_.begin(), told_.end(), &d) != told_.end()) return;
    d.setPromptRows(rows_, tokens_);
    told_.push_back(&d);
  }
  void clear() noexcept {
    for (Device* d : told_) d->setPromptRows({}, 0);
    told_.clear();
  }

 private:
  std::span<const Device::RowRange> rows_;
  int64_t tokens_;
  std::vector<Device*>& told_;
};

struct StepExecutor::BusyClock {
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  void charge(Device& device) {
    const auto now = std::chrono::steady_clock::now();
    device.addBusyTime(now - since);
    since = now;
  }
};

void StepExecutor::run(StepPlan& plan, std::vector<BoundUnit>& units, HeadOutput& output) {
  for (const StepPlan::Microbatch& m : plan.microbatches()) runMicrobatch(plan, m, units, output);
}

void StepExecutor::runMicrobatch(StepPlan& plan, const StepPlan::Microbatch& m, std::vector<BoundUnit>& units,
                                 HeadOutput& output) {
  const int64_t T = m.tokens;
  const int headUnit = int(units.size()) - 1;
  PromptRowsScope prompt(plan.promptRows(m), T, toldPrompt_);
  EmbeddingUnit& embedding = units.front().embedding();
  Workspace* ws = &workspaces_.get(*embedding.binding.device, T);
  BusyClock busy;
  ws->device->getRows(embedding.table, plan.ids(m), T, ws->f(ws->x));
  if (config_.embeddingScale != 0) ws->device->scale(ws->f(ws->x), config_.embeddingScale, T * config_.embedding);
  embedding.binding.kernelsReady = true;
  for (int unit = 1; unit <= headUnit; unit++) {
    Device& d = units[size_t(unit)].device();
    if (&d != ws->device) ws = &crossBoundary(*ws, d, T, busy);
    if (unit < headUnit) runBlock(plan, m, units, unit, *ws, prompt);
  }
  prompt.clear();
  HeadUnit& head = units.back().head();
  busy.charge(runHead(head, *ws, m, plan.headRows(m), output) ? *head.binding.device : *ws->device);
}

Workspace& StepExecutor::crossBoundary(Workspace& from, Device& to, int64_t T, BusyClock& busy) {
  // A device boundary: the hidden state crosses once, through host memory.
  Workspace& next = workspaces_.get(to, T);
  hostRows_.resize(size_t(T * config_.embedding));
  from.device->copyToHost(hostRows_.data(), from.x->data(), hostRows_.size() * sizeof(float));
  busy.charge(*from.device);
  to.copyFromHost(next.x->data(), hostRows_.data(), hostRows_.size() * sizeof(float));
  return next;
}

void StepExecutor::runBlock(StepPlan& plan, const StepPlan::Microbatch& m, std::vector<BoundUnit>& units, int unit,
                            Workspace& ws, PromptRowsScope& prompt) {
  BlockUnit& block = units[size_t(unit)].block();
  const int layer = unit - 1;
  const BlockKv& kv = plan.kv(m, layer, int(block.shards.size()));
  if (block.split()) {
    // Every shard takes the prompt path for its rows, so a split block keeps one device's bits
    // for prompt tokens too (its products are per row; the whole ones see the same rows).
    for (BlockShard& s : block.shards) prompt.on(*s.binding.device);
    graph_.runSplit(block, layer, m.tokens, plan.positions(m), kv);
    for (BlockShard& s : block.shards) s.binding.kernelsReady = true;
    return;
  }
  BlockShard& whole = block.shards.front();
  Device& d = *whole.binding.device;
  const int slot = block.stream ? streamIn(units, unit, ws) : -1;
  prompt.on(d);
  graph_.run(whole, layer, ws, m.tokens, plan.positions(m), kv);
  if (slot >= 0) {
    ws.stream.freeMark[slot] = d.markOps();
    ws.stream.unit[slot] = -1;
  }
  whole.binding.kernelsReady = true;
}

bool StepExecutor::runHead(HeadUnit& head, Workspace& ws, const StepPlan::Microbatch& m, std::span<const int32_t> rows,
                           HeadOutput& output) {
  if (rows.empty()) return false;
  const ModelConfig& c = config_;
  const int64_t E = c.embedding, T = m.tokens;
  Device& d = *head.binding.device;
  float* x = ws.f(ws.x);
  float* normed = ws.f(ws.normed);
  const int64_t n = int64_t(rows.size());
  const bool contiguous = rows.back() - rows.front() + 1 == n;
  const float* src = x + int64_t(rows.front()) * E;
  if (!contiguous) {
    // The rows that asked, gathered on the device (a prefill chunk's last token among decode
    // tokens): getRows over the hidden states as a table of float rows.
    d.getRows(WeightRef{quant::TensorType::kF32, reinterpret_cast<const uint8_t*>(x), T, E, size_t(E) * sizeof(float)},
              rows.data(), n, normed);
    src = normed;
  }
  d.rmsNorm(src, head.norm, normed, n, E, c.rmsEps);
  float* out = ws.logitsFor(n, c.vocabSize);
  d.matmul(head.output, normed, n, out, nullptr);
  if (c.logitScale != 1) d.scale(out, 1.0f / c.logitScale, n * c.vocabSize);
  if (c.logitSoftcap != 0) d.softcap(out, c.logitSoftcap, n * c.vocabSize);
  head.binding.kernelsReady = true;
  output.take(d, out, int64_t(m.headRowsBegin), n);
  return true;
}

int StepExecutor::streamIn(std::vector<BoundUnit>& units, int unit, Workspace& ws) {
  Device& d = *ws.device;
  StreamSlots& slots = ws.stream;
  // Slots as large as the largest block streamed here.
  size_t largest = 0;
  for (const BoundUnit& b : units) {
    if (b.streamed() && &b.device() == &d) largest = std::max(largest, b.block().stream->size);
  }
  if (slots.bytes < largest) {
    for (int s = 0; s < 2; s++) {
      slots.unit[s] = -1;
      slots.buffers[s].reset();
      slots.buffers[s] = d.allocate(largest);
      slots.freeMark[s] = 0;
    }
    slots.bytes = largest;
  }
  auto slotOf = [&](int u) { return slots.unit[0] == u ? 0 : slots.unit[1] == u ? 1 : -1; };
  auto issue = [&](int u) {
    const int s = slots.next;
    slots.next ^= 1;
    const StreamSource& source = *units[size_t(u)].block().stream;
    slots.ticket[s] = d.uploadAsync(slots.buffers[s]->data(), source.bytes->data(), source.size, slots.freeMark[s]);
    slots.unit[s] = u;
  };
  if (slotOf(unit) < 0) issue(unit);
  // The next block, if it streams through this device too, starts uploading now and so overlaps
  // this block's ops.
  const int next = unit + 1;
  if (next < int(units.size()) - 1 && units[size_t(next)].streamed() && &units[size_t(next)].device() == &d &&
      slotOf(next) < 0) {
    issue(next);
  }
  const int s = slotOf(unit);
  d.waitForUpload(slots.ticket[s]);
  units[size_t(unit)].block().rebase(slots.buffers[s]->data());
  return s;
}

}  // namespace jitllm::runtime
