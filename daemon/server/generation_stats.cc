#include "daemon/server/generation_stats.h"

namespace jitllm::server {

GenerationStats replyStats(const runtime::Sequence& q, const ReplyFacts& facts, const TierTargets& targets,
                           std::chrono::steady_clock::time_point now) {
  using Ms = std::chrono::duration<double, std::milli>;
  GenerationStats st;
  st.promptTokens = facts.promptTokens;
  st.generatedTokens = uint32_t(q.generated());
  st.timeToFirstTokenMs = q.generated() > 0 ? Ms(q.firstToken() - facts.admitted).count() : 0;
  const double decodeSeconds = std::chrono::duration<double>(now - q.firstToken()).count();
  st.tokensPerSecond = q.generated() > 1 && decodeSeconds > 0 ? double(q.generated() - 1) / decodeSeconds : 0;
  st.totalMs = Ms(now - facts.admitted).count();
  if (q.stopReason()) st.stopReason = *q.stopReason();
  st.sessionId = facts.sessionId;
  st.reusedTokens = facts.reusedTokens;
  st.tier = facts.tier;
  st.metTargets = metTargets(targets, st.timeToFirstTokenMs, st.generatedTokens, st.tokensPerSecond);
  return st;
}

}  // namespace jitllm::server
