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

TEST(TextFormat, EventNamesWithAPrefixOfTheirOwnKeepIt) {
  client::Event pinned{1700000000123, client::EventKind::kMigration, "layers.pinned", "m", "cpu:1", 0, "blk.3"};
  EXPECT_EQ(eventLine(pinned), "2023-11-14T22:13:20.123Z  layers.pinned model=m device=cpu:1: blk.3");
  client::Event bare{1700000000123, client::EventKind::kMigration, "committed", "m", "", 0, ""};
  EXPECT_EQ(eventLine(bare), "2023-11-14T22:13:20.123Z  migration.committed model=m");
}

client::MigrationStats sampleMigration() {
  client::MigrationStats s;
  s.id = 4;
  s.model = "stories";
  s.firstName = "token_embd";
  s.lastName = "output";
  s.from = "cpu:0";
  s.to = "cpu:1";
  s.units = 7;
  s.committed = true;
  s.prepareMs = 12.34;
  s.pauseMs = 0.4123;
  s.bytesPrecopied = 524288;
  s.bytesInPause = 8192;
  s.weightBytes = 1258291;
  s.recomputedTokens = 0;
  s.sessions = 3;
  return s;
}

TEST(TextFormat, AMigrationIsWhatMovedThenItsNumbers) {
  const client::MigrationStats s = sampleMigration();
  EXPECT_EQ(migrationSummary(s), "stories:token_embd-output (7 units) cpu:0 -> cpu:1, 1.2 MiB of weights");
  EXPECT_EQ(migrationStatsLine(s),
            "pause_ms 0.412  prepare_ms 12.3  bytes_precopied 524288  bytes_in_pause 8192  recomputed_tokens 0  "
            "sessions 3");
  client::MigrationStats one = s;
  one.firstName = one.lastName = "blk.3";
  one.units = 1;
  one.from = "cpu:0,vulkan:0";
  EXPECT_EQ(migrationSummary(one), "stories:blk.3 (1 unit) cpu:0,vulkan:0 -> cpu:1, 1.2 MiB of weights");
  EXPECT_EQ(migrationStarted(s), "migration 4 started: stories:token_embd-output (7 units) cpu:0 -> cpu:1");
  client::MigrationStats planless = s;  // what a daemon may answer before it planned the move
  planless.units = 0;
  planless.from = "";
  EXPECT_EQ(migrationStarted(planless), "migration 4 started: stories:token_embd-output -> cpu:1");
  EXPECT_EQ(unitRange("m", "", ""), "m");
  EXPECT_EQ(unitRange("m", "blk.2", ""), "m:blk.2");
}

TEST(TextFormat, TheLayerTableHasARowPerUnitWithStagingPinsAndPagesPerSession) {
  client::ModelInfo m;
  client::LayerState embd;
  embd.unit = 0;
  embd.name = "token_embd";
  embd.device = "cpu:0";
  embd.residency = "file";
  embd.weightBytes = 2048;
  client::LayerState block;
  block.unit = 1;
  block.name = "blk.0";
  block.device = "cpu:0";
  block.residency = "device";
  block.stagedOn = "vulkan:0";
  block.weightBytes = 3 << 20;
  block.kernelsReady = true;
  block.pinned = "cpu:0";
  block.kvPages = 8;
  block.kvBytes = 8 * 16384;
  block.sessions = {{12, 4}, {13, 4}};
  m.layerStates = {embd, block};
  EXPECT_EQ(layerTable(m),
            "UNIT  NAME        DEVICE  RESIDENCY                  WEIGHTS  KERNELS  PINNED  KV PAGES  KV BYTES   "
            "SESSION:PAGES\n"
            "0     token_embd  cpu:0   file                       2.0 KiB  no       -       0         0 B        -\n"
            "1     blk.0       cpu:0   device staged on vulkan:0  3.0 MiB  yes      cpu:0   8         128.0 KiB  "
            "12:4 13:4\n");
  EXPECT_EQ(layerTable(client::ModelInfo{}), "(this jitllmd reports no per-layer state: it is older than jitllmctl)\n");
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
