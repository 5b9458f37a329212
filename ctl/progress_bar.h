// The progress bar `jitllmctl load` draws on a terminal's stderr while the daemon loads a model:
//   read      [#################.............]  58%  15/26
// Redrawn in place with '\r' only when what it shows changes; nothing at all when disabled (not
// a terminal, or --json).
//
// Thread-safety: one per load, on the loading thread.
#pragma once

#include <iosfwd>
#include <string>

#include "jitllm/client.h"

namespace jitllm::ctl {

class ProgressBar final {
 public:
  ProgressBar(std::ostream& out, bool enabled) : out_(out), enabled_(enabled) {}
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(const client::LoadProgress& p);
  // Clears the bar's line so the next output starts clean.
  void finish();

  // The line for `p` (without '\r'), `width` columns for the bar itself.
  static std::string render(const client::LoadProgress& p, int width = 30);

 private:
  std::ostream& out_;
  bool enabled_;
  std::string shown_;
};

}  // namespace jitllm::ctl
