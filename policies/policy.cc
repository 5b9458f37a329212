#include "policies/policy.h"

#include "policies/online_policy.h"
#include "policies/pressure_policy.h"
#include "policies/slo_policy.h"
#include "policies/thermal_policy.h"

namespace jitllm::policies {
namespace {

// Several policies asked in turn; a model one of them acts on is left to it for the tick, so two
// policies never move the same model at once.
class CompositePolicy final : public Policy {
 public:
  CompositePolicy(const char* name, std::vector<std::unique_ptr<Policy>> parts)
      : name_(name), parts_(std::move(parts)) {}
  const char* name() const override { return name_; }
  std::vector<Action> plan(const Snapshot& snapshot) override {
    std::vector<Action> all;
    Snapshot s = snapshot;
    for (auto& p : parts_) {
      for (Action& a : p->plan(s)) {
        for (ModelState& m : s.models) {
          if (m.name == a.model) m.migrating = true;
        }
        all.push_back(std::move(a));
      }
    }
    return all;
  }

 private:
  const char* name_;
  std::vector<std::unique_ptr<Policy>> parts_;
};

}  // namespace

std::unique_ptr<Policy> makePolicy(const std::string& name, const PolicyConfig& config) {
  std::vector<std::unique_ptr<Policy>> parts;
  if (name == "balanced") {
    // Fit (memory pressure) and use what is fastest (new devices); temperature is left to the
    // firmware's throttling.
    parts.push_back(std::make_unique<PressurePolicy>(config));
    parts.push_back(std::make_unique<OnlinePolicy>(config));
    return std::make_unique<CompositePolicy>("balanced", std::move(parts));
  }
  if (name == "thermal") {
    // Heat first, and still fit and use new devices.
    parts.push_back(std::make_unique<ThermalPolicy>(config));
    parts.push_back(std::make_unique<PressurePolicy>(config));
    parts.push_back(std::make_unique<OnlinePolicy>(config));
    return std::make_unique<CompositePolicy>("thermal", std::move(parts));
  }
  if (name == "slo") {
    // The tiers' promises first (tensor parallelism), and still fit and use new devices.
    parts.push_back(std::make_unique<SloPolicy>(config));
    parts.push_back(std::make_unique<PressurePolicy>(config));
    parts.push_back(std::make_unique<OnlinePolicy>(config));
    return std::make_unique<CompositePolicy>("slo", std::move(parts));
  }
  if (name == "pressure") return std::make_unique<PressurePolicy>(config);
  if (name == "online") return std::make_unique<OnlinePolicy>(config);
  return nullptr;
}

const std::vector<std::string>& policyNames() {
  static const std::vector<std::string> names{"balanced", "thermal", "slo", "pressure", "online"};
  return names;
}

}  // namespace jitllm::policies
