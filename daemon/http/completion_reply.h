// One generation's answer to its HTTP client: collected into one JSON object, or streamed as
// server-sent events (one chunk per batch the worker hands over, then the finish_reason chunk,
// the usage chunk when asked for, and `data: [DONE]`).
//
// Flow control is the GenerationJob's: one write is in flight at a time, and while it is, tokens
// wait in the job, which throttles its session once max_queued_tokens wait (a slow reader slows
// only itself). Dropping the reply - the client went away, a write failed, the connection was
// closed - cancels the job; the worker then ends its session and frees its KV pages.
//
// Ownership: owns its share of the job and the ReplyGuard that makes a draining daemon wait for
// it; borrows the HttpShared and the KJ response, which outlive the request.
// Thread-safety: the KJ (RPC) thread only.
#pragma once

#include <kj/async.h>
#include <kj/compat/http.h>

#include <memory>
#include <string>

#include "daemon/http/http_service.h"
#include "daemon/http/openai_response.h"

namespace jitllm::server::http {

class CompletionReply final {
 public:
  CompletionReply(HttpShared& shared, std::shared_ptr<GenerationJob> job, ReplyShape shape, bool stream,
                  bool includeUsage, std::string echo, kj::HttpService::Response& response,
                  std::shared_ptr<bool> responseStarted);
  ~CompletionReply();
  CompletionReply(const CompletionReply&) = delete;
  CompletionReply& operator=(const CompletionReply&) = delete;

  // Resolves once the whole answer is written; rejects with the generation's error before a
  // streamed answer has begun (the caller sends it as an error object).
  kj::Promise<void> run();

 private:
  // Waits until the job has something (batch_); a Batch does not travel in the promise itself,
  // on which GCC 12 warns falsely (-Wmaybe-uninitialized).
  kj::Promise<void> nextBatch();
  kj::Promise<void> collect();
  kj::Promise<void> streamOn();
  kj::Promise<void> writeEvent(const std::string& data);
  void endStream();

  HttpShared& shared_;
  std::shared_ptr<GenerationJob> job_;
  const ReplyShape shape_;
  const bool stream_, includeUsage_;
  std::string echo_;  // completions' echo: the prompt, before the reply
  kj::HttpService::Response& response_;
  std::shared_ptr<bool> responseStarted_;
  DaemonCore::ReplyGuard guard_;
  kj::Own<kj::AsyncOutputStream> body_;  // the event stream, once begun
  bool sentRole_ = false;
  GenerationJob::Batch batch_;  // the latest taken
  std::string text_;
  std::vector<TokenLogprob> logprobs_;
};

}  // namespace jitllm::server::http
