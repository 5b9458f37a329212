// What ps, /metrics and the scheduler read of a model (model_snapshot.h).
#include "daemon/server/model_snapshot.h"

#include <gtest/gtest.h>

namespace jitllm::server {
namespace {

TEST(UnitSnapshot, HoldsDeviceMemoryForItsWeightsOnlyWhenTheyWereCopiedThere) {
  UnitSnapshot u;
  u.weightBytes = 1000;
  u.kvBytes = 24;
  u.residency = Residency::kDevice;
  EXPECT_EQ(u.bytesInDeviceMemory(), 1024u);
  u.residency = Residency::kFile;
  EXPECT_EQ(u.bytesInDeviceMemory(), 24u);
  u.residency = Residency::kStreamed;
  EXPECT_EQ(u.bytesInDeviceMemory(), 24u);
}

}  // namespace
}  // namespace jitllm::server
