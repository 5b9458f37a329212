// A resident model and the thread that runs it: continuous batching of every generation on it.
//
// Each loop iteration takes every runnable job (not throttled by a slow reader, not cancelled),
// gives prefilling jobs a chunk of their prompt and decoding jobs their last token, runs one
// Model::forward over all of them, and samples each job's next token. Because every kernel
// computes a token's row independently of the rest of the batch, each session gets exactly the
// tokens it would get alone. Jobs join and leave between iterations; a cancelled job's session
// (and so its KV pages) is dropped at the next one.
//
// Ownership: owns the Model and the worker thread; the devices and the EventHub are borrowed and
// must outlive it. Destruction (or shutdown()) fails waiting and running jobs with DISCONNECTED.
// Thread-safety: public methods may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/runtime/chat_template.h"
#include "daemon/runtime/model.h"
#include "daemon/server/event_hub.h"
#include "daemon/server/generation_job.h"

namespace jitllm::server {

struct ModelHostOptions {
  int64_t defaultContext = 4096;  // session limit when a request names none
  size_t maxSessions = 64;        // running + waiting jobs; more is OVERLOADED
  size_t maxQueuedTokens = 64;    // per job, before it is throttled (see GenerationJob)
};

struct SessionSnapshot {
  uint64_t id = 0;
  uint32_t ownerUid = 0;
  int64_t tokens = 0;
  int64_t contextLimit = 0;
  std::string state;  // "prefill", "decode", "waiting"
};

struct ModelSnapshot {
  std::string name, path;
  std::vector<SessionSnapshot> sessions;
  std::vector<std::pair<std::string, size_t>> kvBytesByDevice;
};

class ModelHost final {
 public:
  // Prompt tokens one job may feed per iteration: long prompts are chunked so they do not stall
  // the decoding jobs batched with them for more than a few milliseconds.
  static constexpr size_t kPrefillChunk = 256;

  ModelHost(std::string name, std::string path, std::unique_ptr<runtime::Model> model, ModelHostOptions options,
            EventHub& events);
  ~ModelHost();
  ModelHost(const ModelHost&) = delete;
  ModelHost& operator=(const ModelHost&) = delete;

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  const runtime::Model& model() const { return *model_; }
  const ModelHostOptions& options() const { return options_; }
  runtime::ChatTemplate chatTemplate() const { return chatTemplate_; }
  int64_t loadedUnixMs() const { return loadedUnixMs_; }

  // Queues a job. Error(OVERLOADED) when maxSessions are busy, Error(DISCONNECTED) after
  // shutdown(). The prompt is checked against the context when the worker admits it.
  void submit(std::shared_ptr<GenerationJob> job);
  // Ends one session (cancel semantics); false when no job has that session id.
  bool cancelSession(uint64_t sessionId, uint32_t requesterUid, bool admin);

  ModelSnapshot snapshot() const;
  size_t jobCount() const;
  // Stops accepting jobs; running ones fail with DISCONNECTED; joins the worker.
  void shutdown();
  // Waits until no job is running or queued, or `timeout` passes; true when idle.
  bool waitIdle(std::chrono::milliseconds timeout);

 private:
  struct Active;
  void workerLoop();
  void admit(std::shared_ptr<GenerationJob> job, std::vector<std::unique_ptr<Active>>& active);
  void finishActive(Active& a, StopReason reason);
  void wake();

  const std::string name_;
  const std::string path_;
  std::unique_ptr<runtime::Model> model_;
  const ModelHostOptions options_;
  EventHub& events_;
  runtime::ChatTemplate chatTemplate_;
  int64_t loadedUnixMs_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<GenerationJob>> incoming_;
  std::set<uint64_t> cancelRequests_;       // session ids cancelSession() asked to end
  std::vector<SessionSnapshot> published_;  // what snapshot() reports, refreshed each iteration
  std::vector<std::pair<std::string, size_t>> publishedKv_;
  size_t activeCount_ = 0;
  bool stopping_ = false;
  bool pokes_ = false;  // something happened the worker should look at
  std::thread worker_;
};

}  // namespace jitllm::server
