// One streamed /v1/completions request over jitllmd's HTTP Unix socket, timed the way
// jitllm-serve-bench times an RPC generate: when it was sent, when the events carrying its first
// and last tokens arrived, and how many tokens its usage counted. KJ's HTTP client on the caller's
// event loop, so a benchmark's HTTP clients cost the machine about what its RPC clients do.
//
// Thread-safety: the calling KJ thread only; `out` must outlive the promise.
#pragma once

#include <kj/async-io.h>

#include <chrono>
#include <string>

namespace jitllm::tools {

struct StreamedCompletion {
  std::chrono::steady_clock::time_point sent, first, last;
  bool gotFirst = false;
  size_t tokens = 0;  // the usage's completion_tokens
  std::string error;
};

// POSTs `body` (a completions request with "stream": true and stream_options.include_usage) on a
// connection of its own to the HTTP socket at `socketPath`, reading the events as they come.
kj::Promise<void> streamCompletion(kj::Network& network, const std::string& socketPath, std::string body,
                                   StreamedCompletion& out);

}  // namespace jitllm::tools
