// A reply's numbers - its tokens, its latencies, how it stopped, whether its tier's targets held -
// computed once, when it ends, by replyStats(), and read from there by everything that reports
// them: the RPC's and HTTP's answers, the session events, goodput and /metrics.
//
// Thread-safety: values and pure functions.
#pragma once

#include <chrono>
#include <cstdint>

#include "daemon/server/service_tier.h"
#include "engine/runtime/step_loop.h"

namespace jitllm::server {

struct GenerationStats {
  uint32_t promptTokens = 0;
  uint32_t generatedTokens = 0;
  double timeToFirstTokenMs = 0;  // 0 when no token came
  double tokensPerSecond = 0;     // generated tokens after the first, per second of decode
  double totalMs = 0;
  runtime::StopReason stopReason = runtime::StopReason::kMaxTokens;  // how a reply that ended normally ended
  uint64_t sessionId = 0;
  uint32_t reusedTokens = 0;  // prompt tokens whose KV an idle session already held (not computed)
  ServiceTier tier = ServiceTier::kStandard;
  bool metTargets = false;  // its tier's TTFT and TPOT targets both held
};

// What replyStats() needs of a reply beyond its sequence.
struct ReplyFacts {
  uint32_t promptTokens = 0;
  uint64_t sessionId = 0;
  uint32_t reusedTokens = 0;
  ServiceTier tier = ServiceTier::kStandard;
  std::chrono::steady_clock::time_point admitted;  // TTFT counts from here
};

// `q`'s numbers at `now`, judged against `targets` (its tier's). For a sequence that ended with an
// error the numbers are what it did before (stopReason means nothing then).
GenerationStats replyStats(const runtime::Sequence& q, const ReplyFacts& facts, const TierTargets& targets,
                           std::chrono::steady_clock::time_point now);

}  // namespace jitllm::server
