// jitllmctl's human-readable output: tables, sizes, times, the load progress bar.
#include "ctl/text_format.h"

#include <gtest/gtest.h>

#include <sstream>

#include "ctl/progress_bar.h"

namespace jitllm::ctl {
namespace {

TEST(TextFormat, TablesPadEveryColumnButTheLast) {
  TextTable t({"A", "LONGER", "Z"});
  t.add({"xyz", "1", "tail text"});
  EXPECT_EQ(t.render(), "A    LONGER  Z\nxyz  1       tail text\n");
}

TEST(TextFormat, BytesUseBinaryUnits) {
  EXPECT_EQ(humanBytes(0), "0 B");
  EXPECT_EQ(humanBytes(1023), "1023 B");
  EXPECT_EQ(humanBytes(1024), "1.0 KiB");
  EXPECT_EQ(humanBytes(1185376), "1.1 MiB");
  EXPECT_EQ(humanBytes(uint64_t(3) << 30), "3.0 GiB");
}

TEST(TextFormat, TimesAreUtcIso8601WithMilliseconds) { EXPECT_EQ(isoTime(1700000000123), "2023-11-14T22:13:20.123Z"); }

TEST(TextFormat, PlacementNamesEachDevicesRangeOfUnits) {
  client::ModelInfo m;
  m.placement = {{0, 3, "cpu:0", "token_embd", "blk.2"}, {4, 6, "cpu:1", "blk.3", "output"}};
  EXPECT_EQ(placementSummary(m), "cpu:0 token_embd..blk.2, cpu:1 blk.3..output");
}

TEST(TextFormat, EventLinesNameTheKindOnceWhateverFormTheDaemonUses) {
  client::Event bare{1700000000123, client::EventKind::kModel, "loaded", "stories", "", 0, "from fd:5"};
  client::Event dotted = bare;
  dotted.what = "model.loaded";
  EXPECT_EQ(eventLine(bare), "2023-11-14T22:13:20.123Z  model.loaded model=stories: from fd:5");
  EXPECT_EQ(eventLine(dotted), eventLine(bare));
  client::Event session{1700000000123, client::EventKind::kSession, "session.finished", "m", "", 7, ""};
  EXPECT_EQ(eventLine(session), "2023-11-14T22:13:20.123Z  session.finished model=m session=7");
}

TEST(ProgressBar, ShowsTheStageAFilledBarAndThePercentage) {
  EXPECT_EQ(ProgressBar::render({"read", 1, 4}, 8), "read      [##......]  25%  1/4");
  EXPECT_EQ(ProgressBar::render({"bind", 0, 0}, 8), "bind      0");  // no total: a counter
}

TEST(ProgressBar, DrawsInPlaceOnlyWhenEnabledAndClearsItsLineAtTheEnd) {
  std::ostringstream off;
  {
    ProgressBar bar(off, false);
    bar.update({"read", 1, 2});
  }
  EXPECT_EQ(off.str(), "");
  std::ostringstream on;
  {
    ProgressBar bar(on, true);
    bar.update({"read", 1, 2});
    bar.update({"read", 1, 2});  // unchanged: not redrawn
  }
  const std::string s = on.str();
  EXPECT_EQ(s.find('\r'), 0u);
  EXPECT_EQ(std::count(s.begin(), s.end(), '\r'), 3);  // one draw, then clear and return
}

}  // namespace
}  // namespace jitllm::ctl
