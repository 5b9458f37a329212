// Service tiers: how urgent a request is, and the latency it is promised.
//
//   interactive  someone reads each token as it comes (a chat): by default TTFT 200 ms, TPOT 50 ms
//   standard     the default tier: TTFT 1 s, TPOT 100 ms
//   batch        background work (summaries, a folder's embeddings, agents): no targets
//
// A request names its tier (the RPC's `tier`, `jitllmctl run --tier`, HTTP's `service_tier`) or
// gets its caller's default (config: tier_default, tier_users, tier_groups); only admins may ask
// for a tier more urgent than their default. The model worker runs the most urgent sequences first
// and, while an interactive one decodes, feeds the others' prompts only what fits its time per
// token (runtime::StepLoop's priorities). Per tier it counts the replies that met both targets:
// goodput (jitllmctl ps, the events, /metrics).
//
// Thread-safety: values and pure functions (defaultTierOf reads the user and group databases).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jitllm::server {

// Most urgent first: the value is the step loop's priority.
enum class ServiceTier : uint8_t { kInteractive = 0, kStandard = 1, kBatch = 2 };
inline constexpr size_t kServiceTiers = 3;
inline constexpr std::array<ServiceTier, kServiceTiers> kAllServiceTiers = {
    ServiceTier::kInteractive, ServiceTier::kStandard, ServiceTier::kBatch};

std::string_view tierName(ServiceTier tier);                  // "interactive", "standard", "batch"
std::optional<ServiceTier> parseTier(std::string_view name);  // those names
// OpenAI's `service_tier`: "priority" -> interactive, "default" and "auto" -> standard, "flex" ->
// batch.
std::optional<ServiceTier> tierFromOpenAi(std::string_view name);
std::string_view openAiTierName(ServiceTier tier);  // the reverse, for replies ("priority", ...)

// A tier's promise; 0: none.
struct TierTargets {
  double ttftMs = 0;  // time to the first token, from the request's admission
  double tpotMs = 0;  // time per output token after the first (the decode's average)
  bool operator==(const TierTargets&) const = default;
};
// Whether a reply met `t`: its TTFT and, when it has at least two tokens, its mean time per token
// after the first.
bool metTargets(const TierTargets& t, double ttftMs, uint32_t generatedTokens, double tokensPerSecond);

struct TierConfig {
  std::array<TierTargets, kServiceTiers> targets = {TierTargets{200, 50}, TierTargets{1000, 100}, TierTargets{0, 0}};
  ServiceTier defaultTier = ServiceTier::kStandard;
  // Defaults by user name and by group name (a member of several groups gets the most urgent of
  // theirs; a user's own entry wins over their groups').
  std::vector<std::pair<std::string, ServiceTier>> users, groups;
  // Off: every request is served first come, first served, as before tiers (the baseline the
  // tiers are measured against; config tier_scheduling). Goodput is counted either way.
  bool scheduling = true;

  const TierTargets& targetsOf(ServiceTier tier) const { return targets[size_t(tier)]; }
  bool operator==(const TierConfig&) const = default;
};

// "name:tier,name:tier" (spaces allowed around the parts); nullopt on an entry that is not one.
std::optional<std::vector<std::pair<std::string, ServiceTier>>> parseTierMap(std::string_view text);

// The tier `uid` gets when it names none. `groupsOf` lists the uid's groups (AccessPolicy's
// lookup; a parameter so that tests need no user database).
ServiceTier defaultTierOf(const TierConfig& config, uid_t uid, const std::vector<gid_t>& groups);

// The tier a request runs in: `requested` when given, else the caller's default. Error(FAILED)
// "permission denied: ..." when a non-admin asks for a tier more urgent than their default.
ServiceTier resolveTier(const TierConfig& config, std::optional<ServiceTier> requested, uid_t uid,
                        const std::vector<gid_t>& groups, bool admin);

}  // namespace jitllm::server
