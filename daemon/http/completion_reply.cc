#include "daemon/http/completion_reply.h"

#include "daemon/http/http_error.h"
#include "daemon/server/kj_errors.h"

namespace jitllm::server::http {

CompletionReply::CompletionReply(HttpShared& shared, std::shared_ptr<GenerationJob> job, ReplyShape shape, bool stream,
                                 bool includeUsage, std::string echo, kj::HttpService::Response& response,
                                 std::shared_ptr<bool> responseStarted)
    : shared_(shared),
      job_(std::move(job)),
      shape_(std::move(shape)),
      stream_(stream),
      includeUsage_(includeUsage),
      echo_(std::move(echo)),
      response_(response),
      responseStarted_(std::move(responseStarted)),
      guard_(shared.core.replyStarted()) {}

CompletionReply::~CompletionReply() { job_->cancel(); }

kj::Promise<void> CompletionReply::nextBatch() {
  batch_ = job_->take();
  if (batch_.finished || !batch_.ids.empty() || !batch_.text.empty()) return kj::READY_NOW;
  auto [more, waker] = shared_.wakeups.arm();
  job_->setWaker(waker);
  return more.then([this] { return nextBatch(); });
}

kj::Promise<void> CompletionReply::run() { return stream_ ? streamOn() : collect(); }

kj::Promise<void> CompletionReply::collect() {
  return nextBatch().then([this]() -> kj::Promise<void> {
    const GenerationJob::Batch& batch = batch_;
    text_ += batch.text;
    logprobs_.insert(logprobs_.end(), batch.logprobs.begin(), batch.logprobs.end());
    if (!batch.finished) return collect();
    if (batch.error) kj::throwFatalException(toKjException(*batch.error));
    return sendJson(response_, *shared_.headerTable, 200,
                    dumpJson(shape_.complete(echo_ + text_, logprobs_, batch.stats)));
  });
}

// KJ ends a chunked body (the terminating chunk) when its stream is dropped.
void CompletionReply::endStream() { body_ = nullptr; }

kj::Promise<void> CompletionReply::writeEvent(const std::string& data) {
  auto bytes = kj::heapString("data: " + data + "\n\n");
  auto write = body_->write(bytes.begin(), bytes.size());
  return write.attach(kj::mv(bytes));
}

kj::Promise<void> CompletionReply::streamOn() {
  if (!body_) {
    // The answer begins at once, before the first token: the client sees the request accepted.
    kj::HttpHeaders headers(*shared_.headerTable);
    headers.set(kj::HttpHeaderId::CONTENT_TYPE, "text/event-stream; charset=utf-8");
    headers.add("Cache-Control", "no-cache");
    body_ = response_.send(200, "OK", headers);
    *responseStarted_ = true;
    if (shape_.endpoint == Endpoint::kChat || !echo_.empty()) {
      sentRole_ = shape_.endpoint == Endpoint::kChat;
      std::string first = std::move(echo_);
      return writeEvent(dumpJson(shape_.chunk(first, {}, sentRole_))).then([this] { return streamOn(); });
    }
  }
  return nextBatch().then([this]() -> kj::Promise<void> {
    const GenerationJob::Batch& batch = batch_;
    kj::Promise<void> written = kj::READY_NOW;
    if (!batch.text.empty() || !batch.logprobs.empty()) {
      written = writeEvent(batch.logprobs.empty() ? shape_.textChunk(batch.text)
                                                  : dumpJson(shape_.chunk(batch.text, batch.logprobs, false)));
    }
    if (!batch.finished) return written.then([this] { return streamOn(); });
    if (batch.error) {
      // Too late for a status code: the error goes as an event, in OpenAI's error shape, and the
      // stream ends without [DONE] so that a client cannot take it for a complete reply.
      const std::string error = httpErrorFor(*batch.error).body();
      return written.then([this, error] { return writeEvent(error); }).then([this] { endStream(); });
    }
    const GenerationStats stats = batch.stats;
    return written.then([this, stats] { return writeEvent(dumpJson(shape_.finalChunk(stats))); })
        .then([this, stats]() -> kj::Promise<void> {
          if (!includeUsage_) return kj::READY_NOW;
          return writeEvent(dumpJson(shape_.usageChunk(stats)));
        })
        .then([this] { return writeEvent("[DONE]"); })
        .then([this] { endStream(); });
  });
}

}  // namespace jitllm::server::http
