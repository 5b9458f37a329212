// The sessions of finished replies, kept so that a follow-up continues them: a chat client resends
// the whole conversation each turn, and only what is new in it is computed.
//
// Up to `capacity` are kept, least recently used dropped first. A later request of the same user
// and context limit whose prompt starts with the tokens of one resumes it (take()). Under memory
// pressure their KV is parked in host RAM (park()) and comes back, bitwise, when one is resumed;
// when a device runs out of KV pages, an idle session gives its pages up first
// (dropOneInDeviceMemory()).
//
// Ownership: owns the sessions and their parked KV; borrows the Model (whose pools the sessions'
// pages come from: it must outlive this), the EventHub and the metrics.
// Thread-safety: the model's worker thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/server/event_hub.h"
#include "daemon/server/serving_metrics.h"
#include "engine/kv/host_kv.h"
#include "engine/runtime/model.h"

namespace jitllm::server {

class IdleSessions final {
 public:
  struct Entry {
    uint32_t ownerUid = 0;
    int64_t contextLimit = 0;
    std::vector<int32_t> tokens;                // whose KV it holds
    std::unique_ptr<runtime::Session> session;  // null while parked
    std::unique_ptr<runtime::HostKv> parked;    // set while its KV is in host RAM
    uint64_t id = 0;                            // the session it was (a restored one gets a new id)
  };

  IdleSessions(std::string modelName, runtime::Model& model, size_t capacity, EventHub& events,
               ServingMetrics* metrics);

  // The idle session of `ownerUid` and `contextLimit` that `prompt` continues best, truncated to
  // the tokens they share (`reused`; at least the last prompt token is left to compute), or null.
  // A parked one's KV comes back first; when there is no device memory for it, null (the prompt is
  // computed again). A session is taken only for at least half of its tokens (the same
  // conversation, perhaps with its last message edited).
  std::unique_ptr<runtime::Session> take(uint32_t ownerUid, const std::vector<int32_t>& prompt, int64_t contextLimit,
                                         size_t& reused);
  // Keeps a finished reply's session, holding the KV of `tokens`.
  void keep(uint32_t ownerUid, std::unique_ptr<runtime::Session> session, std::vector<int32_t> tokens);
  // Drops the least recently used one holding device memory; false when there is none.
  bool dropOneInDeviceMemory();
  // Parks every one holding device memory in host RAM; `reason` goes into the event.
  void park(const std::string& reason);
  // Forgets those `drop` says (their pages go back to their pools).
  void dropIf(const std::function<bool(const Entry&)>& drop);
  void clear() { entries_.clear(); }

  const std::vector<std::unique_ptr<Entry>>& entries() const { return entries_; }  // least recently used first

 private:
  const std::string modelName_;
  runtime::Model& model_;
  const size_t capacity_;
  EventHub& events_;
  ServingMetrics* metrics_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace jitllm::server
