// Models by name for the HTTP API: what `/v1/models` lists and what a request's `model` means.
//
// A name is a resident model's, or a GGUF in one of the model dirs (its file name without
// `.gguf`). A request naming a model that is not loaded loads it when auto_load is on - one load
// per name at a time: the requests that arrive meanwhile wait for the same load - with the
// daemon's usual placement and paging (DaemonCore::load). A model loaded this way is unloaded
// once it has served no request for its keep-alive (config keep_alive; a request's own
// keep_alive replaces it, as Ollama does); models the operator loaded (preload, jitllmctl load)
// stay until unloaded.
//
// Ownership: borrows the core, the background threads and the timer (all outlive it).
// Thread-safety: the KJ (RPC) thread only.
#pragma once

#include <kj/async.h>
#include <kj/timer.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/server/background_threads.h"
#include "daemon/server/daemon_core.h"

namespace jitllm::server::http {

class ModelCatalog final {
 public:
  // How often idle models are looked for: keep-alives are seconds to minutes.
  static constexpr kj::Duration kSweepInterval = 250 * kj::MILLISECONDS;

  ModelCatalog(DaemonCore& core, BackgroundThreads& background, kj::Timer& timer);

  struct Entry {
    std::string name;
    std::string path;  // the file ("" for a resident model loaded from a passed descriptor)
    bool resident = false;
    int64_t createdUnix = 0;  // the file's modification time, or when it was loaded
  };
  // Resident models first, then the files not loaded, each name once, sorted within each part.
  std::vector<Entry> list() const;
  // The model called `name`, loading it when it is a file and auto_load is on.
  // HttpError 404 (model_not_found) when there is no such model; load failures as thrown.
  kj::Promise<std::shared_ptr<ModelHost>> acquire(const std::string& name, std::optional<double> keepAliveSeconds);
  // A request on `name` has ended: its keep-alive counts from now.
  void released(const std::string& name);

 private:
  // `<dir>/<name>.gguf` of the first model dir that has it; "" when none does.
  std::string fileFor(const std::string& name) const;
  kj::Promise<void> sweep();

  struct OnDemand {
    double keepAliveSeconds = 0;  // negative: never unloaded
    std::chrono::steady_clock::time_point lastUsed;
    int requests = 0;  // running now
  };
  DaemonCore& core_;
  BackgroundThreads& background_;
  kj::Timer& timer_;
  std::map<std::string, kj::ForkedPromise<void>> loading_;
  std::map<std::string, OnDemand> onDemand_;  // models this catalog loaded, by name
  kj::Promise<void> sweeping_;
};

}  // namespace jitllm::server::http
