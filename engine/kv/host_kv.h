// A session's KV cache parked in host RAM: how an idle conversation gives its device memory back
// and later continues without recomputing a token.
//
// Parking copies the written pages of every layer (the live ones: not those a sliding window has
// freed) to host memory, one gather per layer from the
// device the layer's pages live on (a tensor-parallel layer's shards joined back into one layout); the caller then
// destroys the session, which returns its pages to their pools. Restoring makes a new session of the model - its pages
// from the pools of the devices the layers run on *now*, so a migration or a lost device in between does not matter -
// and scatters the same bytes back. A page's bytes mean the same on every backend (live migration
// moves them raw), so the restored session continues exactly as the parked one would have.
//
// Ownership: owns its host copy; borrows nothing after construction.
// Thread-safety: construct and restore on the model's step-loop thread (they use the sessions'
// and the model's devices); otherwise immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/runtime/model.h"
#include "engine/runtime/session.h"

namespace jitllm::runtime {

class HostKv final {
 public:
  // Copies the KV of `session`'s length() tokens, every layer.
  explicit HostKv(const Session& session);

  // A new session of `model` holding the parked KV, length() tokens long. Error(OVERLOADED) when a
  // device has no room for the pages (nothing is left allocated then).
  std::unique_ptr<Session> restore(Model& model) const;

  int64_t length() const { return length_; }
  // Whether the restored session could be rewound to `length` (Session::canTruncate).
  bool canTruncate(int64_t length) const;
  int64_t contextLimit() const { return contextLimit_; }
  size_t bytes() const;

 private:
  int64_t length_ = 0;
  int64_t contextLimit_ = 0;
  KvLayout whole_;  // every layer's, on one device
  size_t pageBytes_ = 0;
  std::vector<std::vector<uint8_t>> layers_;  // per layer: its written live pages, back to back
  std::vector<size_t> firstPages_;            // per layer: the page index layers_ starts at
  std::vector<int64_t> windows_;              // per layer: its sliding window (0: none)
  int64_t pageTokens_ = 0;
};

// True when some of `session`'s pages are in device memory rather than host RAM (a CPU device's
// pages are host RAM already: parking them gains nothing).
bool holdsDeviceMemory(const Session& session);

}  // namespace jitllm::runtime
