#include "engine/runtime/live_migration.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "base/byte_size.h"
#include "base/error.h"
#include "engine/runtime/bound_unit.h"

namespace jitllm::runtime {
namespace {

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

LiveMigration::LiveMigration(Model& model, MigrationOptions options)
    : model_(model), placement_(model.placement()), options_(options), started_(std::chrono::steady_clock::now()) {
  JITLLM_REQUIRE(options_.target != nullptr, "a migration needs a target device");
  const UnitRange& r = options_.units;
  JITLLM_REQUIRE(r.first >= 0 && r.first <= r.last && r.last < model_.unitCount(), "units ", r.first, "-", r.last,
                 " are not a range of this model's ", model_.unitCount(), " units");
  std::vector<std::string> sources;
  for (int u = r.first; u <= r.last; u++) {
    const UnitInfo unit = model_.unitInfo(u);
    JITLLM_REQUIRE(unit.shards.empty(), model_.unitName(u), " is split over ", unit.shards.size(),
                   " devices (tensor parallel): switch it to one device to move it (TensorParallelSwitch)");
    Device* source = unit.device;
    if (source == options_.target) continue;
    movingUnits_.push_back(u);
    if (u > 0 && u < model_.unitCount() - 1) movingLayers_.push_back(u - 1);
    if (std::find(sources.begin(), sources.end(), source->info().id.str()) == sources.end()) {
      sources.push_back(source->info().id.str());
    }
  }
  for (const std::string& s : sources) stats_.from += (stats_.from.empty() ? "" : ",") + s;
  stats_.units = int(movingUnits_.size());
  if (!movingLayers_.empty()) targetPool_ = &model_.kvPool(*options_.target);
}

LiveMigration::~LiveMigration() {
  if (committed_) {
    releaseSource();
    return;
  }
  releaseTargetPages();
  staged_.clear();  // frees the weights staged on the target
  // The warm-up sized a workspace on the target; nothing runs there if nothing else is placed there.
  placement_.releaseIdleWorkspaces();
}

void LiveMigration::releaseTargetPages() {
  // (Only before a commit: afterwards the sessions own these pages.)
  releaseSpares();
  for (auto& [id, copy] : copies_) freeTargetPages(copy);
  copies_.clear();
}

void LiveMigration::freeTargetPages(SessionCopy& copy) {
  for (auto& pages : copy.pages) {
    for (PageId p : pages) {
      if (p != kNoPage) targetPool_->free(p);
    }
    pages.clear();
  }
}

void LiveMigration::reconcileSessions() {
  if (movingLayers_.empty()) return;
  // Sessions that ended give their target pages back; new ones start with nothing copied; a
  // rewind may have rewritten positions we copied: copy them again.
  reconcileCopies(
      copies_, model_.sessions(), [&](SessionCopy& c) { freeTargetPages(c); },
      [&](SessionCopy& c) {
        c.pages.resize(movingLayers_.size());
        c.addresses.resize(movingLayers_.size());
        c.valid.assign(movingLayers_.size(), 0);
        c.freedBefore.assign(movingLayers_.size(), 0);
      },
      [](SessionCopy& c) { std::fill(c.valid.begin(), c.valid.end(), int64_t(0)); });
}

bool LiveMigration::precopy(size_t budget) {
  const size_t pageBytes = model_.kvLayout().pageBytes();
  const int64_t pageTokens = model_.kvLayout().pageTokens;
  size_t spent = 0;
  bool done = true;
  for (Session* s : model_.sessions().all()) {
    SessionCopy& c = copies_.at(s->id());
    const int64_t sealed = s->length() / pageTokens * pageTokens;  // positions in full pages
    for (size_t i = 0; i < movingLayers_.size(); i++) {
      const int layer = movingLayers_[i];
      Device& source = s->layerPool(layer).device();
      while (c.valid[i] < sealed) {
        const size_t p = size_t(c.valid[i] / pageTokens);
        if (p < s->firstLivePage(layer)) {  // freed by a sliding window: nothing to copy
          c.valid[i] = int64_t(s->firstLivePage(layer)) * pageTokens;
          continue;
        }
        if (spent + pageBytes > budget && spent > 0) return false;
        while (c.pages[i].size() <= p) addTargetPage(c, i, *s);
        source.copyToDevice(*options_.target, c.addresses[i][p], s->pageAddresses(layer)[p], pageBytes);
        c.valid[i] = int64_t(p + 1) * pageTokens;
        spent += pageBytes;
        stats_.bytesPrecopied += pageBytes;
      }
    }
  }
  return done;
}

void LiveMigration::stageUnit(int unit) {
  auto bound = std::make_unique<BoundUnit>(placement_.stage(unit, *options_.target));
  stats_.weightBytes += bound->weightBytes();
  staged_.emplace(unit, std::move(bound));
}

bool LiveMigration::prepareStep() {
  JITLLM_REQUIRE(!committed_, "this migration has already committed");
  reconcileSessions();
  // Weights first, one unit per step or as many as the budget allows: a GPU upload of a big block
  // is the longest single piece.
  const auto start = std::chrono::steady_clock::now();
  bool stagedSome = false;
  for (int u : movingUnits_) {
    if (staged_.count(u)) continue;
    if (stagedSome && std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() >=
                          options_.stageBudgetMs) {
      return false;
    }
    stageUnit(u);
    stagedSome = true;
  }
  if (stagedSome) return false;  // pre-copy starts with the next slice
  if (!options_.precopy || movingLayers_.empty()) return true;
  if (!precopy(options_.stepBytes)) return false;
  warmTail();
  return true;
}

void LiveMigration::warmTail() {
  // The pause will copy each session's open pages: give them their target pages now and copy
  // them once already (the pause copies them again, as they change meanwhile), so the pause
  // takes no allocation and no first-touch page faults. The staging buffer likewise.
  const KvLayout& kv = model_.kvLayout();
  size_t tailPages = 0;
  for (Session* s : model_.sessions().all()) {
    SessionCopy& c = copies_.at(s->id());
    const size_t written = size_t((s->length() + kv.pageTokens - 1) / kv.pageTokens);
    for (size_t i = 0; i < movingLayers_.size(); i++) {
      const int layer = movingLayers_[i];
      const size_t count = s->layerPageTableSize(layer);
      // Room for a page or two more, so the pause does not grow (copy) a long page table.
      c.pages[i].reserve(count + 2);
      c.addresses[i].reserve(count + 2);
      while (c.pages[i].size() < count) addTargetPage(c, i, *s);
      dropFreedTargetPages(c, i, *s);
      for (size_t p = std::max(size_t(c.valid[i] / kv.pageTokens), s->firstLivePage(layer));
           p < std::min(count, written); p++) {
        s->layerPool(layer).device().copyToDevice(*options_.target, c.addresses[i][p], s->pageAddresses(layer)[p],
                                                  kv.pageBytes());
        stats_.bytesPrecopied += kv.pageBytes();
        tailPages++;
      }
      c.valid[i] = s->length();  // every written position is on the target now
    }
  }
  const size_t staging = 2 * std::max(tailPages, copies_.size() * movingLayers_.size()) * kv.pageBytes();
  if (staging_.size() < staging) staging_.assign(staging, 0);
  // A step before the commit may open a new page in every moving layer: have a target page
  // ready (and touched) for each, so the pause takes no first-touch faults for those either.
  while (spares_.size() < copies_.size() * movingLayers_.size()) {
    const PageId page = targetPool_->allocate();
    spares_.push_back(page);
    options_.target->copyFromHost(targetPool_->address(page), staging_.data(), kv.pageBytes());
  }
  // Room for the pause's copy list and for what the flip retires, likewise (a session or two
  // may still join).
  spans_.reserve(4 * (copies_.size() + 2) * movingLayers_.size());
  retiredPages_.reserve((copies_.size() + 2) * movingLayers_.size());
  retiredUnits_.reserve(movingUnits_.size());
}

void LiveMigration::copyRemainingKv(const std::vector<Session*>& sessions) {
  // Every session gets all its pages on the target, and the positions not yet valid there are
  // copied: between host-memory devices just the tokens written since (a K span and a V span per
  // open page); otherwise whole pages, gathered per source device into one buffer and scattered
  // in one transfer.
  const KvLayout& kv = model_.kvLayout();
  const int64_t P = kv.pageTokens;
  const size_t pageBytes = kv.pageBytes();
  const size_t tokenBytes = kv.tokenBytes();
  const bool hostToHost = options_.target->info().caps.hostMemory;
  struct Transfer {
    std::vector<const uint8_t*> from;
    std::vector<uint8_t*> to;
  };
  std::map<Device*, Transfer> transfers;
  for (Session* s : sessions) {
    SessionCopy& c = copies_.at(s->id());
    const int64_t length = s->length();
    for (size_t i = 0; i < movingLayers_.size(); i++) {
      const int layer = movingLayers_[i];
      const size_t count = s->layerPageTableSize(layer);
      while (c.pages[i].size() < count) addTargetPage(c, i, *s);  // may throw OVERLOADED
      // Pages a sliding window has freed since they were copied are freed on the target too (a
      // page or two per layer since the last step: the pause stays short).
      dropFreedTargetPages(c, i, *s);
      Device& source = s->layerPool(layer).device();
      // Pages past the written length hold nothing yet: they are allocated, nothing is copied.
      for (int64_t p = std::max(c.valid[i] / P, int64_t(s->firstLivePage(layer))); p * P < length; p++) {
        const uint8_t* from = s->pageAddresses(layer)[size_t(p)];
        uint8_t* to = c.addresses[i][size_t(p)];
        if (hostToHost && source.info().caps.hostMemory) {
          const size_t first = size_t(std::max(c.valid[i], p * P) - p * P);
          const size_t end = size_t(std::min(length, (p + 1) * P) - p * P);
          const size_t offset = first * tokenBytes, bytes = (end - first) * tokenBytes;
          const size_t v = size_t(P) * tokenBytes;  // where the page's V half starts
          spans_.push_back({&source, from + offset, to + offset, bytes});
          spans_.push_back({&source, from + v + offset, to + v + offset, bytes});
        } else {
          Transfer& t = transfers[&source];
          t.from.push_back(from);
          t.to.push_back(to);
        }
      }
    }
  }
  // The spans are a few hundred bytes each, scattered over a KV cache that a long context has
  // long pushed out of the caches: request every line first, so the misses overlap instead of
  // following one another, then copy.
  for (const Span& span : spans_) {
    for (size_t off = 0; off < span.bytes; off += 64) {
      __builtin_prefetch(span.from + off, 0);
      __builtin_prefetch(span.to + off, 1);
    }
  }
  for (const Span& span : spans_) {
    span.source->copyToDevice(*options_.target, span.to, span.from, span.bytes);
    stats_.bytesInPause += span.bytes;
  }
  spans_.clear();
  for (auto& [source, t] : transfers) {
    const size_t bytes = t.from.size() * pageBytes;
    // Device to device when the two have a path (GPU to GPU: one gather, one peer copy, one
    // scatter), else through host memory.
    if (!source->moveBlocksTo(*options_.target, t.from.data(), t.to.data(), t.from.size(), pageBytes)) {
      if (staging_.size() < bytes) staging_.resize(bytes);
      source->gatherToHost(staging_.data(), t.from.data(), t.from.size(), pageBytes);
      options_.target->scatterFromHost(t.to.data(), staging_.data(), t.to.size(), pageBytes);
    }
    stats_.bytesInPause += bytes;
  }
}

void LiveMigration::commit() {
  JITLLM_REQUIRE(!committed_, "this migration has already committed");
  // Whatever prepare has not done yet happens now (in the pause: a commit without pre-copy, or
  // one asked for before prepare finished).
  reconcileSessions();
  for (int u : movingUnits_) {
    if (!staged_.count(u)) stageUnit(u);
  }
  stats_.prepareMs = msSince(started_);
  // The devices' idle workers must not compete with the pause for the cores.
  std::set<Device*> involved{options_.target};
  for (const int u : movingUnits_) involved.insert(&model_.unitDevice(u));
  for (Device* d : involved) d->quiesce();
  const auto pauseStart = std::chrono::steady_clock::now();

  // Sessions have KV only in blocks: a migration that moves none (the embedding or the head, or
  // units already on the target) has no pages to move - reconcileSessions() tracks none.
  const std::vector<Session*> sessions = movingLayers_.empty() ? std::vector<Session*>{} : model_.sessions().all();
  copyRemainingKv(sessions);

  // The flip: nothing below throws, and nothing is freed yet (releaseSource).
  for (int u : movingUnits_) {
    // The staged holder takes the old binding in exchange: no allocation in the pause.
    std::unique_ptr<BoundUnit>& holder = staged_.at(u);
    placement_.swapBinding(u, *holder);
    retiredUnits_.push_back(std::move(holder));
  }
  staged_.clear();
  for (Session* s : sessions) {
    SessionCopy& c = copies_.at(s->id());
    for (size_t i = 0; i < movingLayers_.size(); i++) {
      KvPagePool& from = s->layerPool(movingLayers_[i]);
      s->rebindLayer(movingLayers_[i], *targetPool_, c.pages[i], c.addresses[i]);
      retiredPages_.emplace_back(&from, std::move(c.pages[i]));  // (the old pages, now)
    }
  }
  stats_.sessions = movingLayers_.empty() ? 0 : int(copies_.size());
  committed_ = true;
  stats_.pauseMs = msSince(pauseStart);
}

void LiveMigration::releaseSpares() noexcept {
  for (PageId p : spares_) targetPool_->free(p);
  spares_.clear();
}

void LiveMigration::releaseSource() noexcept {
  releaseSpares();
  copies_.clear();  // the old page tables' vectors; freeing them is not for the pause
  for (auto& [pool, pages] : retiredPages_) {
    for (PageId p : pages) {
      if (p != kNoPage) pool->free(p);
    }
  }
  retiredPages_.clear();
  retiredUnits_.clear();
  placement_.releaseIdleWorkspaces();
}

void LiveMigration::addTargetPage(SessionCopy& c, size_t layer, const Session& s) {
  if (c.pages[layer].size() < s.firstLivePage(movingLayers_[layer])) {
    c.pages[layer].push_back(kNoPage);
    c.addresses[layer].push_back(nullptr);
    return;
  }
  PageId page;
  if (!spares_.empty()) {
    page = spares_.back();
    spares_.pop_back();
  } else {
    page = targetPool_->allocate();
  }
  c.pages[layer].push_back(page);
  c.addresses[layer].push_back(targetPool_->address(page));
}

void LiveMigration::dropFreedTargetPages(SessionCopy& c, size_t layer, const Session& s) {
  const size_t end = std::min(s.firstLivePage(movingLayers_[layer]), c.pages[layer].size());
  for (size_t& p = c.freedBefore[layer]; p < end; p++) {
    if (c.pages[layer][p] != kNoPage) targetPool_->free(c.pages[layer][p]);
    c.pages[layer][p] = kNoPage;
    c.addresses[layer][p] = nullptr;
  }
}

std::string LiveMigration::describe() const {
  const int layers = int(model_.config().layers);
  const std::string kv = humanBytes(stats_.bytesPrecopied);
  return unitRangeName(options_.units, layers) + " " + (stats_.from.empty() ? "-" : stats_.from) + " -> " +
         options_.target->info().id.str() + ": " + std::to_string(staged_.size()) + "/" + std::to_string(stats_.units) +
         " units staged, " + kv + " KV pre-copied";
}

}  // namespace jitllm::runtime
