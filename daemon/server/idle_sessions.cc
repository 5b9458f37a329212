#include "daemon/server/idle_sessions.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "base/error.h"

namespace jitllm::server {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Tokens `a` and `b` have in common from the start.
size_t commonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) i++;
  return i;
}

}  // namespace

IdleSessions::IdleSessions(std::string modelName, runtime::Model& model, size_t capacity, EventHub& events,
                           ServingMetrics* metrics)
    : modelName_(std::move(modelName)), model_(model), capacity_(capacity), events_(events), metrics_(metrics) {}

std::unique_ptr<runtime::Session> IdleSessions::take(uint32_t ownerUid, const std::vector<int32_t>& prompt,
                                                     int64_t contextLimit, size_t& reused) {
  reused = 0;
  // The idle session of this user and limit sharing the longest start with the prompt. At least one
  // prompt token is computed again: its logits give the reply's first token. A session that shares
  // only the start of a system prompt stays for its own follow-up.
  auto best = entries_.end();
  size_t bestLength = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Entry& i = **it;
    if (i.ownerUid != ownerUid || i.contextLimit != contextLimit) continue;
    const size_t n = std::min(commonPrefix(i.tokens, prompt), prompt.size() - 1);
    // A sliding-window model's session cannot rewind behind the KV its windows have freed.
    const bool rewindable =
        i.session ? i.session->canTruncate(int64_t(n)) : i.parked && i.parked->canTruncate(int64_t(n));
    if (n > bestLength && 2 * n >= i.tokens.size() && rewindable) {
      best = it;
      bestLength = n;
    }
  }
  if (best == entries_.end()) return nullptr;
  std::unique_ptr<Entry> idle = std::move(*best);
  entries_.erase(best);
  if (idle->parked) {
    const auto start = Clock::now();
    try {
      idle->session = idle->parked->restore(model_);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOverloaded) throw;
      events_.emit({0, EventKind::kSession, "session.unparked", modelName_, "", idle->id,
                    std::string("no device memory to bring the idle session's KV back (") + e.what() +
                        "): its prompt is computed again",
                    idle->ownerUid});
      return nullptr;
    }
    if (metrics_) metrics_->kvPagedIn(modelName_);
    events_.emit({0, EventKind::kSession, "session.unparked", modelName_, "", idle->session->id(),
                  humanBytes(idle->parked->bytes()) + " of KV (" + std::to_string(idle->tokens.size()) +
                      " tokens) back from host RAM in " + std::to_string(msSince(start)) + " ms, nothing recomputed",
                  idle->ownerUid});
  }
  idle->session->truncate(int64_t(bestLength));
  reused = bestLength;
  return std::move(idle->session);
}

void IdleSessions::keep(uint32_t ownerUid, std::unique_ptr<runtime::Session> session, std::vector<int32_t> tokens) {
  auto idle = std::make_unique<Entry>();
  idle->ownerUid = ownerUid;
  idle->contextLimit = session->contextLimit();
  idle->id = session->id();
  idle->tokens = std::move(tokens);
  idle->session = std::move(session);
  entries_.push_back(std::move(idle));
  if (entries_.size() > capacity_) entries_.erase(entries_.begin());  // least recently used
}

bool IdleSessions::dropOneInDeviceMemory() {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->session) {
      events_.emit({0, EventKind::kSession, "session.dropped", modelName_, "", (*it)->id,
                    "idle session dropped: a running one needed its KV pages", (*it)->ownerUid});
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

void IdleSessions::park(const std::string& reason) {
  size_t sessions = 0, bytes = 0;
  const auto start = Clock::now();
  for (auto& i : entries_) {
    if (!i->session || !runtime::holdsDeviceMemory(*i->session)) continue;
    i->parked = std::make_unique<runtime::HostKv>(*i->session);
    i->session.reset();  // its pages go back to their pools
    sessions++;
    bytes += i->parked->bytes();
  }
  if (sessions == 0) return;
  if (metrics_) metrics_->kvPagedOut(modelName_, sessions);
  const std::string what = "parked the KV of " + std::to_string(sessions) + " idle session(s) of " + modelName_ + " (" +
                           humanBytes(bytes) + ") in host RAM in " + std::to_string(msSince(start)) + " ms: " + reason;
  events_.emit({0, EventKind::kSession, "session.parked", modelName_, "", 0, what});
  spdlog::info("model '{}': {}", modelName_, what);
}

void IdleSessions::dropIf(const std::function<bool(const Entry&)>& drop) {
  std::erase_if(entries_, [&](const std::unique_ptr<Entry>& e) { return drop(*e); });
}

}  // namespace jitllm::server
