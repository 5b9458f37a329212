// Human-readable output of jitllmctl: aligned tables, byte sizes, times, placements.
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jitllm/client.h"

namespace jitllm::ctl {

// Columns padded to their widest cell; the last column is not padded.
class TextTable final {
 public:
  explicit TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string humanBytes(uint64_t bytes);             // "812 B", "1.2 KiB", "3.4 GiB"
std::string isoTime(int64_t unixMs);                // "2025-01-31T12:34:56.789Z"
std::string placementSummary(const client::ModelInfo& m);  // "cpu:0 token_embd..blk.2, cpu:1 blk.3..output"
// One line for `jitllmctl events`: "2025-01-31T12:34:56.789Z  model.loaded model=stories: ..."
std::string eventLine(const client::Event& e);
std::string statsLine(const client::GenerationStats& s);  // "32 tokens, first after 4.1 ms, 812.3 tok/s"

}  // namespace jitllm::ctl
