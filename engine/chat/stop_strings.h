// Finds stop strings in streamed text without ever emitting part of one.
//
// Text arrives in chunks (whole UTF-8 characters from the detokenizer). Anything that might be the
// start of a stop string is held back until it either completes one (generation stops; the stop
// string and what follows are dropped) or cannot (it is released).
//
// Thread-safety: one stream per object, one thread at a time.
#pragma once

#include <string>
#include <vector>

namespace jitllm::runtime {

class StopStringMatcher final {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `chunk`; returns the text now safe to emit. After it returns with stopped() true,
  // further input is ignored.
  std::string feed(const std::string& chunk);
  // The end of the stream: releases what was held back (no stop string can complete now).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace jitllm::runtime
