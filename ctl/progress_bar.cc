#include "ctl/progress_bar.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

namespace jitllm::ctl {

std::string ProgressBar::render(const client::LoadProgress& p, int width) {
  std::string stage = p.stage.empty() ? "loading" : p.stage;
  if (stage.size() < 8) stage.resize(8, ' ');
  if (p.total == 0) return stage + "  " + std::to_string(p.done);  // no total known: a counter
  const double fraction = std::min(1.0, double(p.done) / double(p.total));
  const int filled = int(fraction * width + 0.5);
  char percent[16];
  std::snprintf(percent, sizeof(percent), "%3d%%", int(fraction * 100));
  // The units of done/total are the stage's own (bytes, tensors, layers): shown as counted.
  return stage + "  [" + std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.') + "] " + percent +
         "  " + std::to_string(p.done) + "/" + std::to_string(p.total);
}

void ProgressBar::update(const client::LoadProgress& p) {
  if (!enabled_) return;
  std::string line = render(p);
  if (line == shown_) return;
  // Pad over the remains of a longer previous line.
  std::string padded = line;
  if (padded.size() < shown_.size()) padded.resize(shown_.size(), ' ');
  out_ << '\r' << padded << std::flush;
  shown_ = std::move(line);
}

void ProgressBar::finish() {
  if (!enabled_ || shown_.empty()) return;
  out_ << '\r' << std::string(shown_.size(), ' ') << '\r' << std::flush;
  shown_.clear();
}

}  // namespace jitllm::ctl
