#include "engine/runtime/tensor_parallel_switch.h"

#include <algorithm>

#include "base/byte_size.h"
#include "base/error.h"
#include "engine/kv/kv_head_split.h"
#include "engine/runtime/bound_unit.h"

namespace jitllm::runtime {
namespace {

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::string splitName(const std::vector<Device*>& devices) {
  std::string out;
  for (const Device* d : devices) {
    if (!out.empty()) out += '+';
    out += d->info().id.str();
  }
  return out;
}

std::vector<Device*> shardDevices(const BlockUnit& b) {
  std::vector<Device*> out;
  for (const BlockShard& s : b.shards) out.push_back(s.binding.device);
  return out;
}

}  // namespace

TensorParallelSwitch::TensorParallelSwitch(Model& model, TensorParallelOptions options)
    : model_(model),
      placement_(model.placement()),
      options_(std::move(options)),
      started_(std::chrono::steady_clock::now()) {
  const ModelConfig& c = model_.config();
  const int k = int(options_.devices.size());
  JITLLM_REQUIRE(k >= 1 && k <= Session::kMaxShards, "tensor parallelism is over 1 to ", Session::kMaxShards,
                 " devices, not ", k);
  for (int i = 0; i < k; i++) {
    JITLLM_REQUIRE(options_.devices[size_t(i)] != nullptr, "tensor parallelism: no device #", i);
    for (int j = 0; j < i; j++) {
      JITLLM_REQUIRE(options_.devices[size_t(i)] != options_.devices[size_t(j)], "tensor parallelism over ",
                     options_.devices[size_t(i)]->info().id, " twice");
    }
  }
  JITLLM_REQUIRE(c.kvHeads % k == 0 && c.feedForward % k == 0, "the model's ", c.kvHeads, " KV heads and ",
                 c.feedForward, " FFN rows do not split over ", k, " devices");
  const UnitRange& r = options_.units;
  JITLLM_REQUIRE(r.first >= 0 && r.first <= r.last && r.last < model_.unitCount(), "units ", r.first, "-", r.last,
                 " are not a range of this model's ", model_.unitCount(), " units");
  for (int u = std::max(r.first, 1); u <= std::min(r.last, model_.unitCount() - 2); u++) {
    const BlockUnit& b = placement_.binding(u).block();
    JITLLM_REQUIRE(!b.stream, model_.unitName(u), " streams its weights: it cannot also be split");
    if (shardDevices(b) == options_.devices && (!b.split() || b.partialSums == options_.partialSums)) continue;
    if (units_.empty()) stats_.from = splitName(shardDevices(b));
    units_.push_back(u);
  }
  stats_.to = splitName(options_.devices);
  stats_.units = int(units_.size());
}

TensorParallelSwitch::~TensorParallelSwitch() {
  if (committed_) {
    releaseSource();
    return;
  }
  for (auto& [id, copy] : copies_) freePages(copy);
  copies_.clear();
  staged_.clear();
  placement_.releaseIdleWorkspaces();
}

KvPagePool& TensorParallelSwitch::newPool(int shard) const {
  return model_.kvPool(*options_.devices[size_t(shard)], int(options_.devices.size()));
}

void TensorParallelSwitch::freePages(SessionCopy& copy) {
  for (auto& layer : copy.pages) {
    for (size_t j = 0; j < layer.size(); j++) {
      for (PageId p : layer[j]) {
        if (p != kNoPage) newPool(int(j)).free(p);
      }
      layer[j].clear();
    }
  }
}

void TensorParallelSwitch::reconcileSessions() {
  if (units_.empty()) return;
  const size_t k = options_.devices.size();
  reconcileCopies(
      copies_, model_.sessions(), [&](SessionCopy& c) { freePages(c); },
      [&](SessionCopy& c) {
        c.pages.assign(units_.size(), std::vector<std::vector<PageId>>(k));
        c.addresses.assign(units_.size(), std::vector<std::vector<uint8_t*>>(k));
        c.valid.assign(units_.size(), 0);
      },
      [](SessionCopy& c) { std::fill(c.valid.begin(), c.valid.end(), int64_t(0)); });
}

void TensorParallelSwitch::growPages(SessionCopy& c, size_t i, const Session& s) {
  const int layer = units_[i] - 1;
  const size_t size = s.layerPageTableSize(layer), live = s.firstLivePage(layer);
  for (size_t j = 0; j < options_.devices.size(); j++) {
    std::vector<PageId>& pages = c.pages[i][j];
    std::vector<uint8_t*>& addresses = c.addresses[i][j];
    KvPagePool& pool = newPool(int(j));
    // Pages a sliding window has left behind since: their copies go too.
    for (size_t p = 0; p < std::min(live, pages.size()); p++) {
      if (pages[p] != kNoPage) pool.free(pages[p]);
      pages[p] = kNoPage;
      addresses[p] = nullptr;
    }
    while (pages.size() < size) {
      if (pages.size() < live) {
        pages.push_back(kNoPage);
        addresses.push_back(nullptr);
        continue;
      }
      pages.push_back(pool.allocate());
      addresses.push_back(pool.address(pages.back()));
    }
  }
}

size_t TensorParallelSwitch::relay(const std::vector<Run>& runs) {
  const KvLayout& whole = model_.kvLayout();
  const int newShards = int(options_.devices.size());
  const size_t newPageBytes = shardLayout(whole, newShards).pageBytes();
  for (auto* side : {&gathered_, &scattered_}) {
    for (auto& [key, staging] : *side) staging.pages.clear();
  }
  // Where each run's shards sit in the staging: (staging, first page there, page bytes).
  struct Place {
    Staging* staging;
    size_t page;
    size_t pageBytes;
    uint8_t* at() const { return staging->bytes.data() + page * pageBytes; }
  };
  std::vector<std::vector<Place>> from(runs.size()), to(runs.size());
  size_t bytes = 0;
  for (size_t r = 0; r < runs.size(); r++) {
    const Run& run = runs[r];
    const Session& s = *run.session;
    const int layer = units_[run.layer] - 1;
    for (int j = 0; j < s.shardsOf(layer); j++) {
      const int t = s.tableOf(layer, j);
      const size_t pageBytes = s.layerPool(t).layout().pageBytes();
      Staging& st = gathered_[{&s.layerPool(t).device(), pageBytes}];
      from[r].push_back({&st, st.pages.size(), pageBytes});
      for (size_t p = run.first; p < run.end; p++) st.pages.push_back(s.pageAddresses(t)[p]);
    }
    for (int j = 0; j < newShards; j++) {
      Staging& st = scattered_[{options_.devices[size_t(j)], newPageBytes}];
      to[r].push_back({&st, st.pages.size(), newPageBytes});
      for (size_t p = run.first; p < run.end; p++) st.pages.push_back(run.copy->addresses[run.layer][size_t(j)][p]);
    }
    bytes += (run.end - run.first) * whole.pageBytes();
  }
  if (bytes == 0) return 0;
  for (auto* side : {&gathered_, &scattered_}) {
    for (auto& [key, st] : *side) {
      if (st.bytes.size() < st.pages.size() * key.second) st.bytes.resize(st.pages.size() * key.second);
    }
  }
  for (auto& [key, st] : gathered_) {
    if (!st.pages.empty()) key.first->gatherToHost(st.bytes.data(), st.pages.data(), st.pages.size(), key.second);
  }
  for (size_t r = 0; r < runs.size(); r++) {
    std::vector<const uint8_t*> in;
    std::vector<uint8_t*> out;
    for (const Place& p : from[r]) in.push_back(p.at());
    for (const Place& p : to[r]) out.push_back(p.at());
    relayHeads(whole, runs[r].end - runs[r].first, in, out);
  }
  for (auto& [key, st] : scattered_) {
    if (!st.pages.empty()) key.first->scatterFromHost(st.pages.data(), st.bytes.data(), st.pages.size(), key.second);
  }
  return bytes;
}

bool TensorParallelSwitch::precopy(size_t budget) {
  const int64_t pageTokens = model_.kvLayout().pageTokens;
  const size_t pageBytes = model_.kvLayout().pageBytes();
  // Sealed pages not re-laid yet, up to `budget` bytes, in one relay.
  std::vector<Run> runs;
  size_t planned = 0;
  bool done = true;
  for (Session* s : model_.sessions().all()) {
    SessionCopy& c = copies_.at(s->id());
    const size_t sealed = size_t(s->length() / pageTokens);  // full pages
    for (size_t i = 0; i < units_.size() && done; i++) {
      const int layer = units_[i] - 1;
      const size_t first = std::max(size_t(c.valid[i] / pageTokens), s->firstLivePage(layer));
      if (first >= sealed) continue;
      const size_t room = (budget - std::min(budget, planned)) / pageBytes;
      if (room == 0 && planned > 0) {
        done = false;
        break;
      }
      const size_t end = std::min(sealed, first + std::max<size_t>(1, room));
      growPages(c, i, *s);
      runs.push_back({s, &c, i, first, end});
      planned += (end - first) * pageBytes;
      if (end < sealed) done = false;
    }
    if (!done) break;
  }
  stats_.bytesPrecopied += relay(runs);
  for (const Run& r : runs) r.copy->valid[r.layer] = int64_t(r.end) * pageTokens;
  return done;
}

bool TensorParallelSwitch::prepareStep() {
  JITLLM_REQUIRE(!committed_, "this switch has already committed");
  reconcileSessions();
  for (int u : units_) {
    if (staged_.count(u)) continue;
    auto bound = std::make_unique<BoundUnit>(options_.devices.size() == 1
                                                 ? placement_.stage(u, *options_.devices[0])
                                                 : placement_.stageSplit(u, options_.devices, options_.partialSums));
    stats_.weightBytes += bound->weightBytes();
    staged_.emplace(u, std::move(bound));
    return false;  // one block a step: binding and warming a block is the longest single piece
  }
  if (!options_.precopy) return true;
  return precopy(options_.stepBytes);
}

void TensorParallelSwitch::commit() {
  JITLLM_REQUIRE(!committed_, "this switch has already committed");
  while (!prepareStep()) {
  }
  reconcileSessions();
  stats_.prepareMs = msSince(started_);
  const auto pauseStart = std::chrono::steady_clock::now();
  for (Device* d : model_.devices()) d->quiesce();
  const int64_t pageTokens = model_.kvLayout().pageTokens;
  // Everything that can fail: the new pages for what the steps added, and the re-lay of every page
  // not re-laid yet (the open tails; all of them without pre-copy), all in one relay.
  std::vector<Run> runs;
  for (Session* s : model_.sessions().all()) {
    SessionCopy& c = copies_.at(s->id());
    for (size_t i = 0; i < units_.size(); i++) {
      const int layer = units_[i] - 1;
      growPages(c, i, *s);
      const size_t first = std::max(size_t(c.valid[i] / pageTokens), s->firstLivePage(layer));
      if (first < s->layerPageTableSize(layer)) runs.push_back({s, &c, i, first, s->layerPageTableSize(layer)});
    }
  }
  stats_.bytesInPause += relay(runs);

  // The flip: nothing below throws or frees.
  for (int u : units_) {
    std::unique_ptr<BoundUnit>& holder = staged_.at(u);
    placement_.swapBinding(u, *holder);
    retiredUnits_.push_back(std::move(holder));
  }
  staged_.clear();
  const size_t k = options_.devices.size();
  for (Session* s : model_.sessions().all()) {
    SessionCopy& c = copies_.at(s->id());
    for (size_t i = 0; i < units_.size(); i++) {
      const int layer = units_[i] - 1;
      const size_t live = s->firstLivePage(layer);
      for (int j = 0; j < Session::kMaxShards; j++) {
        std::vector<PageId> pages;
        std::vector<uint8_t*> addresses;
        KvPagePool* pool = nullptr;
        if (size_t(j) < k) {
          pages = std::move(c.pages[i][size_t(j)]);
          addresses = std::move(c.addresses[i][size_t(j)]);
          pool = &newPool(j);
        }
        KvPagePool* old = nullptr;
        s->replaceLayer(s->tableOf(layer, j), pool, pages, addresses, pool ? live : 0, old);
        if (old) retiredPages_.emplace_back(old, std::move(pages));
      }
    }
  }
  stats_.sessions = units_.empty() ? 0 : int(copies_.size());
  committed_ = true;
  stats_.pauseMs = msSince(pauseStart);
}

void TensorParallelSwitch::releaseSource() noexcept {
  copies_.clear();
  for (auto& [pool, pages] : retiredPages_) {
    for (PageId p : pages) {
      if (p != kNoPage) pool->free(p);
    }
  }
  retiredPages_.clear();
  retiredUnits_.clear();
  placement_.releaseIdleWorkspaces();
}

std::string TensorParallelSwitch::describe() const {
  const int layers = int(model_.config().layers);
  const std::string kv = humanBytes(stats_.bytesPrecopied);
  return unitRangeName(options_.units, layers) + " " + (stats_.from.empty() ? "-" : stats_.from) + " -> " + stats_.to +
         ": " + std::to_string(staged_.size()) + "/" + std::to_string(stats_.units) + " blocks staged, " + kv +
         " KV re-laid";
}

}  // namespace jitllm::runtime
