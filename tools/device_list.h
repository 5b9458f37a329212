// The devices a tool's --devices list names, each opened on its own, so that a GPU named twice is
// two devices of it ("cuda:0,cuda:0"): what a one-GPU machine can split a model over or migrate
// between. (The daemon and jitllm-run refuse a device named twice: there it is a mistake.)
//
// Thread-safety: call from one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/devices/builtin_backends.h"

namespace jitllm::tools {

std::vector<std::unique_ptr<Device>> openEachDevice(const std::string& list, const runtime::DeviceSpecOptions& options);

}  // namespace jitllm::tools
