#include "tools/device_list.h"

#include <sstream>

namespace jitllm::tools {

std::vector<std::unique_ptr<Device>> openEachDevice(const std::string& list,
                                                    const runtime::DeviceSpecOptions& options) {
  std::vector<std::unique_ptr<Device>> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    for (auto& d : runtime::createDevices(item, options)) out.push_back(std::move(d));
  }
  return out;
}

}  // namespace jitllm::tools
