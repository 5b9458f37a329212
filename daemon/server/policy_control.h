// The scheduler as the RPC layer sees it: which policy is active, and switching it. The scheduler
// (daemon/scheduler) implements it; DaemonCore hands it to the RPC methods, so the server does
// not depend on the scheduler.
//
// Thread-safety: implementations are called from the RPC thread while the scheduler ticks on its
// own; they synchronise themselves.
#pragma once

#include <string>

namespace jitllm::server {

class PolicyControl {
 public:
  virtual ~PolicyControl() = default;
  virtual std::string policyName() const = 0;
  // Error(FAILED) naming the known policies for an unknown name.
  virtual void setPolicy(const std::string& name) = 0;
};

}  // namespace jitllm::server
