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
  size_t rows() const { return rows_.size() - 1; }  // not counting the header
  std::string render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string humanBytes(uint64_t bytes);                    // "812 B", "1.2 KiB", "3.4 GiB"
std::string isoTime(int64_t unixMs);                       // "2025-01-31T12:34:56.789Z"
std::string placementSummary(const client::ModelInfo& m);  // "cpu:0 token_embd..blk.2, cpu:1 blk.3..output"
std::string templateLabel(const client::ModelInfo& m);     // "chatml template" ("no template" when unknown)
// One line for `jitllmctl events`: "2025-01-31T12:34:56.789Z  model.loaded model=stories: ..."
std::string eventLine(const client::Event& e);
std::string statsLine(const client::GenerationStats& s);  // "32 tokens, first after 4.1 ms, 812.3 tok/s"

// A model and a range of its units: "stories:token_embd-output", "stories:blk.3"; "stories" alone
// when both names are empty.
std::string unitRange(const std::string& model, const std::string& firstName, const std::string& lastName);
// What a migration moved: "stories:token_embd-output (7 units) cpu:0 -> cpu:1, 1.2 MiB of weights".
std::string migrationSummary(const client::MigrationStats& s);
// A migration started without waiting: "migration 4 started: stories:blk.0-blk.1 (2 units) cpu:0
// -> cpu:1", leaving out what the daemon did not know yet (units 0, no source).
std::string migrationStarted(const client::MigrationStats& s);
// Its numbers, as scripts grep them: "pause_ms 0.412  prepare_ms 12.3  bytes_precopied 524288
// bytes_in_pause 8192  recomputed_tokens 0  sessions 3" (one line).
std::string migrationStatsLine(const client::MigrationStats& s);
// `jitllmctl ps -l`: one row per unit (unit, name, device, residency and staging, weights,
// kernels, pin, KV pages and bytes, pages per session), or a line saying the daemon sent none.
std::string layerTable(const client::ModelInfo& m);

}  // namespace jitllm::ctl
