#include "daemon/server/model_host.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <set>

#include "daemon/runtime/stop_strings.h"
#include "daemon/tokenizer/streaming_detokenizer.h"

namespace jitllm::server {

using Clock = std::chrono::steady_clock;

// A job the worker has admitted: its session and decoding state. Worker thread only.
struct ModelHost::Active {
  std::shared_ptr<GenerationJob> job;
  std::unique_ptr<runtime::Session> session;
  runtime::Sampler sampler;
  tokenizer::StreamingDetokenizer detokenizer;
  runtime::StopStringMatcher stops;
  std::vector<int32_t> history;  // prompt then generated tokens
  size_t fed = 0;                // tokens of `history` already in the KV cache
  uint32_t generated = 0;
  Clock::time_point started, firstToken;
  bool done = false;

  Active(std::shared_ptr<GenerationJob> j, std::unique_ptr<runtime::Session> s, const tokenizer::Tokenizer& tok)
      : job(std::move(j)),
        session(std::move(s)),
        sampler(job->request().sampling),
        // Control tokens (EOS) end the reply; their text is not part of it.
        detokenizer(tok, tokenizer::StreamingDetokenizer::Options{false, false}),
        stops(job->request().stops),
        history(job->request().prompt),
        started(Clock::now()) {}
};

ModelHost::ModelHost(std::string name, std::string path, std::unique_ptr<runtime::Model> model,
                     ModelHostOptions options, EventHub& events)
    : name_(std::move(name)),
      path_(std::move(path)),
      model_(std::move(model)),
      options_(options),
      events_(events),
      chatTemplate_(runtime::detectChatTemplate(model_->file().getString("tokenizer.chat_template"))),
      loadedUnixMs_(std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count()) {
  worker_ = std::thread([this] { workerLoop(); });
}

ModelHost::~ModelHost() { shutdown(); }

void ModelHost::wake() {
  {
    std::lock_guard lock(mutex_);
    pokes_ = true;
  }
  changed_.notify_all();
}

void ModelHost::submit(std::shared_ptr<GenerationJob> job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) JITLLM_FAIL(kDisconnected, "model '", name_, "' is being unloaded");
    if (incoming_.size() + activeCount_ >= options_.maxSessions) {
      JITLLM_FAIL(kOverloaded, "model '", name_, "' already runs ", options_.maxSessions,
                  " sessions (max_sessions); try again later");
    }
    job->setWorkerWaker([this] { wake(); });
    incoming_.push_back(std::move(job));
    pokes_ = true;
  }
  changed_.notify_all();
}

bool ModelHost::cancelSession(uint64_t sessionId, uint32_t requesterUid, bool admin) {
  std::lock_guard lock(mutex_);
  for (const auto& s : published_) {
    if (s.id == sessionId) {
      JITLLM_REQUIRE(admin || s.ownerUid == requesterUid, "session ", sessionId,
                     " belongs to another user; only its owner or an admin may cancel it");
    }
  }
  // The job itself is found through the worker's published table only; cancellation is a flag
  // the worker sees at its next iteration.
  cancelRequests_.insert(sessionId);
  pokes_ = true;
  changed_.notify_all();
  for (const auto& s : published_) {
    if (s.id == sessionId) return true;
  }
  return false;
}

ModelSnapshot ModelHost::snapshot() const {
  std::lock_guard lock(mutex_);
  ModelSnapshot s;
  s.name = name_;
  s.path = path_;
  s.sessions = published_;
  s.kvBytesByDevice = publishedKv_;
  return s;
}

size_t ModelHost::jobCount() const {
  std::lock_guard lock(mutex_);
  return incoming_.size() + activeCount_;
}

bool ModelHost::waitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return incoming_.empty() && activeCount_ == 0; });
}

void ModelHost::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    pokes_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ModelHost::admit(std::shared_ptr<GenerationJob> job, std::vector<std::unique_ptr<Active>>& active) {
  const GenerationRequest& r = job->request();
  try {
    JITLLM_REQUIRE(!r.prompt.empty(), "the prompt is empty");
    const int64_t limit = r.contextLimit > 0 ? r.contextLimit : options_.defaultContext;
    JITLLM_REQUIRE(limit <= model_->config().contextLength, "context size ", limit,
                   " is larger than the model's trained context of ", model_->config().contextLength);
    JITLLM_REQUIRE(int64_t(r.prompt.size()) < limit, "the prompt has ", r.prompt.size(),
                   " tokens and does not fit the context of ", limit, " (one more is needed for the reply)");
    for (int32_t id : r.prompt) {
      JITLLM_REQUIRE(id >= 0 && id < model_->config().vocabSize, "token id ", id, " is outside the vocabulary of ",
                     model_->config().vocabSize);
    }
    auto a = std::make_unique<Active>(job, model_->createSession(limit), model_->tokenizer());
    job->setSessionId(a->session->id());
    events_.emit({0, EventKind::kSession, "session.started", name_, "", a->session->id(),
                  std::to_string(r.prompt.size()) + " prompt tokens, up to " + std::to_string(r.maxTokens) +
                      " more (uid " + std::to_string(r.ownerUid) + ")"});
    active.push_back(std::move(a));
  } catch (const Error& e) {
    job->fail(e);
  }
}

void ModelHost::finishActive(Active& a, StopReason reason) {
  a.job->appendText(a.stops.feed(a.detokenizer.flush()) + a.stops.flush());
  const auto now = Clock::now();
  GenerationStats st;
  st.promptTokens = uint32_t(a.job->request().prompt.size());
  st.generatedTokens = a.generated;
  st.timeToFirstTokenMs = a.generated ? std::chrono::duration<double, std::milli>(a.firstToken - a.started).count() : 0;
  const double decodeSeconds = std::chrono::duration<double>(now - a.firstToken).count();
  st.tokensPerSecond = a.generated > 1 && decodeSeconds > 0 ? double(a.generated - 1) / decodeSeconds : 0;
  st.totalMs = std::chrono::duration<double, std::milli>(now - a.started).count();
  st.stopReason = reason;
  st.sessionId = a.session->id();
  a.job->finish(st);
  a.done = true;
  events_.emit({0, EventKind::kSession, "session.finished", name_, "", st.sessionId,
                std::to_string(st.generatedTokens) + " tokens, " + std::to_string(int(st.tokensPerSecond)) +
                    " tok/s"});
}

void ModelHost::workerLoop() {
  std::vector<std::unique_ptr<Active>> active;
  std::vector<float> logits;
  const auto& tok = model_->tokenizer();
  for (;;) {
    std::vector<std::shared_ptr<GenerationJob>> arrivals;
    std::set<uint64_t> cancels;
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      auto runnable = [&] {
        for (const auto& a : active) {
          if (!a->job->throttled()) return true;
        }
        return false;
      };
      changed_.wait(lock, [&] { return pokes_ || stopping_ || !incoming_.empty() || runnable(); });
      pokes_ = false;
      arrivals.swap(incoming_);
      cancels.swap(cancelRequests_);
      stopping = stopping_;
      activeCount_ = active.size() + arrivals.size();
    }
    if (stopping) {
      const Error gone(ErrorKind::kDisconnected, "model '" + name_ + "' was unloaded");
      for (auto& a : active) a->job->fail(gone);
      for (auto& j : arrivals) j->fail(gone);
      std::lock_guard lock(mutex_);
      for (auto& j : incoming_) j->fail(gone);
      incoming_.clear();
      activeCount_ = 0;
      published_.clear();
      changed_.notify_all();
      return;
    }
    for (auto& j : arrivals) admit(std::move(j), active);

    // Drop cancelled sessions: destroying the Session returns its KV pages.
    for (auto& a : active) {
      if (a->job->cancelled() || cancels.count(a->session->id())) {
        a->job->fail(Error(ErrorKind::kFailed, "cancelled"));
        events_.emit({0, EventKind::kSession, "session.cancelled", name_, "", a->session->id(),
                      "after " + std::to_string(a->generated) + " tokens"});
        a->done = true;
      }
    }

    // Build one step.
    std::vector<runtime::SequenceInput> inputs;
    std::vector<Active*> stepping;
    size_t budget = size_t(runtime::Model::kMaxStepTokens);
    for (auto& a : active) {
      if (a->done || a->job->throttled() || budget == 0) continue;
      const size_t remaining = a->history.size() - a->fed;
      const size_t n = std::min({remaining, kPrefillChunk, budget});
      try {
        a->session->reserve(int64_t(n));
      } catch (const Error& e) {
        a->job->fail(e);  // this session only: the others still run
        a->done = true;
        continue;
      }
      inputs.push_back({a->session.get(), {a->history.data() + a->fed, n}, false});
      stepping.push_back(a.get());
      budget -= n;
    }
    if (!inputs.empty()) {
      logits.clear();
      try {
        model_->forward(inputs, logits);
      } catch (const Error& e) {
        spdlog::error("model '{}': step failed: {}", name_, e.what());
        for (Active* a : stepping) {
          a->job->fail(e);
          a->done = true;
        }
        stepping.clear();
      }
      const int64_t V = model_->config().vocabSize;
      for (size_t i = 0; i < stepping.size(); i++) {
        Active& a = *stepping[i];
        a.fed += inputs[i].tokens.size();
        if (a.fed < a.history.size()) continue;  // more prompt to feed
        const int32_t t = a.sampler.sample({logits.data() + int64_t(i) * V, size_t(V)}, a.history);
        if (a.generated == 0) a.firstToken = Clock::now();
        a.generated++;
        a.history.push_back(t);
        const bool end = tok.isEndOfGeneration(t);
        a.job->push(t, end ? std::string() : a.stops.feed(a.detokenizer.feed(t)));
        const GenerationRequest& r = a.job->request();
        if (end) {
          finishActive(a, StopReason::kEndOfGeneration);
        } else if (a.stops.stopped()) {
          finishActive(a, StopReason::kStopString);
        } else if (a.generated >= r.maxTokens) {
          finishActive(a, StopReason::kMaxTokens);
        } else if (a.session->length() + 1 > a.session->contextLimit()) {
          finishActive(a, StopReason::kContextFull);
        }
      }
    }

    // Retire finished sessions (their pages return to the pools) and publish what ps shows.
    const bool hadSessions = !active.empty();
    std::erase_if(active, [](const auto& a) { return a->done; });
    // A burst just ended: hand the heap's free memory back to the OS rather than keep the peak.
    if (hadSessions && active.empty()) ::malloc_trim(0);
    std::vector<SessionSnapshot> sessions;
    for (const auto& a : active) {
      sessions.push_back({a->session->id(), a->job->request().ownerUid, a->session->length(),
                          a->session->contextLimit(),
                          a->job->throttled() ? "waiting" : (a->generated == 0 ? "prefill" : "decode")});
    }
    std::vector<std::pair<std::string, size_t>> kv;
    std::set<Device*> seen;
    for (int u = 1; u + 1 < model_->unitCount(); u++) {
      Device& d = model_->unitDevice(u);
      if (!seen.insert(&d).second) continue;
      kv.emplace_back(d.info().id, model_->kvPool(d).pagesInUse() * model_->kvLayout().pageBytes());
    }
    {
      std::lock_guard lock(mutex_);
      published_ = std::move(sessions);
      publishedKv_ = std::move(kv);
      activeCount_ = active.size();
    }
    changed_.notify_all();
  }
}

}  // namespace jitllm::server
