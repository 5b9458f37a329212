#include "daemon/server/service_tier.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>

#include "base/error.h"

namespace jitllm::server {

std::string_view tierName(ServiceTier tier) {
  switch (tier) {
    case ServiceTier::kInteractive:
      return "interactive";
    case ServiceTier::kStandard:
      return "standard";
    case ServiceTier::kBatch:
      return "batch";
  }
  return "standard";
}

std::optional<ServiceTier> parseTier(std::string_view name) {
  for (ServiceTier t : kAllServiceTiers) {
    if (tierName(t) == name) return t;
  }
  return std::nullopt;
}

std::optional<ServiceTier> tierFromOpenAi(std::string_view name) {
  if (name == "priority") return ServiceTier::kInteractive;
  if (name == "default" || name == "auto") return ServiceTier::kStandard;
  if (name == "flex") return ServiceTier::kBatch;
  return std::nullopt;
}

std::string_view openAiTierName(ServiceTier tier) {
  switch (tier) {
    case ServiceTier::kInteractive:
      return "priority";
    case ServiceTier::kStandard:
      return "default";
    case ServiceTier::kBatch:
      return "flex";
  }
  return "default";
}

bool metTargets(const TierTargets& t, double ttftMs, uint32_t generatedTokens, double tokensPerSecond) {
  if (generatedTokens == 0) return false;
  if (t.ttftMs > 0 && ttftMs > t.ttftMs) return false;
  if (t.tpotMs > 0 && generatedTokens >= 2 && (tokensPerSecond <= 0 || 1000.0 / tokensPerSecond > t.tpotMs)) {
    return false;
  }
  return true;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<uid_t> uidOf(const std::string& user) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) return std::nullopt;
  return pw.pw_uid;
}

std::optional<gid_t> gidOf(const std::string& group) {
  struct group gr {};
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &found) != 0 || found == nullptr) return std::nullopt;
  return gr.gr_gid;
}

}  // namespace

std::optional<std::vector<std::pair<std::string, ServiceTier>>> parseTierMap(std::string_view text) {
  std::vector<std::pair<std::string, ServiceTier>> out;
  text = trim(text);
  if (text.empty()) return out;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = trim(text.substr(start, comma - start));
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    const std::string_view name = trim(entry.substr(0, colon));
    const auto tier = parseTier(trim(entry.substr(colon + 1)));
    if (name.empty() || !tier) return std::nullopt;
    out.emplace_back(std::string(name), *tier);
    start = comma + 1;
  }
  return out;
}

ServiceTier defaultTierOf(const TierConfig& config, uid_t uid, const std::vector<gid_t>& groups) {
  for (const auto& [user, tier] : config.users) {
    if (uidOf(user) == uid) return tier;
  }
  std::optional<ServiceTier> best;
  for (const auto& [group, tier] : config.groups) {
    const auto gid = gidOf(group);
    if (gid && std::find(groups.begin(), groups.end(), *gid) != groups.end() && (!best || tier < *best)) best = tier;
  }
  return best.value_or(config.defaultTier);
}

ServiceTier resolveTier(const TierConfig& config, std::optional<ServiceTier> requested, uid_t uid,
                        const std::vector<gid_t>& groups, bool admin) {
  const ServiceTier fallback = defaultTierOf(config, uid, groups);
  if (!requested) return fallback;
  if (*requested < fallback && !admin) {
    JITLLM_FAIL(kFailed, "permission denied: the '", tierName(*requested), "' tier is more urgent than your default '",
                tierName(fallback), "' (uid ", uid, "); only admins may raise a request's tier");
  }
  return *requested;
}

}  // namespace jitllm::server
