// Shared pieces of the runtime tests: where the goldens are, reading them, comparing logits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/model.h"
#include "kernels/cpu/cpu_device.h"

namespace jitllm::testing {

inline std::string sharedPath(const std::string& rel) { return std::string(JITLLM_SHARED_DIR) + "/" + rel; }
inline std::string goldenPath(const std::string& rel) { return std::string(JITLLM_GOLDENS_DIR) + "/" + rel; }

inline std::vector<float> readFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

inline std::vector<int32_t> readIds(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

inline std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') return line;
  }
  return {};
}

struct LogitsAgreement {
  double nmse = 0;  // sum((a - truth)^2) / sum(truth^2)
  double top1 = 0;  // fraction of rows whose argmax agrees
};

// Rows of `width` floats; argmax ties go to the lowest index in both.
inline LogitsAgreement compareLogits(const std::vector<float>& a, const std::vector<float>& truth, size_t width) {
  LogitsAgreement r;
  double num = 0, den = 0;
  size_t rows = truth.size() / width, agree = 0;
  for (size_t row = 0; row < rows; row++) {
    size_t ia = 0, it = 0;
    for (size_t i = 0; i < width; i++) {
      const double x = a[row * width + i], t = truth[row * width + i];
      num += (x - t) * (x - t);
      den += t * t;
      if (a[row * width + i] > a[row * width + ia]) ia = i;
      if (truth[row * width + i] > truth[row * width + it]) it = i;
    }
    agree += ia == it;
  }
  r.nmse = num / den;
  r.top1 = double(agree) / double(rows);
  return r;
}

// One CPU device and a model on it, for tests.
struct LoadedModel {
  std::vector<std::unique_ptr<cpu::CpuDevice>> devices;
  std::unique_ptr<runtime::Model> model;
};

inline LoadedModel loadOnCpu(const std::string& path, int devices = 1, int threads = 2,
                             std::vector<int> placement = {}) {
  LoadedModel m;
  runtime::ModelLoadOptions options;
  for (int i = 0; i < devices; i++) {
    cpu::CpuDeviceOptions o;
    o.index = i;
    o.threads = threads;
    m.devices.push_back(std::make_unique<cpu::CpuDevice>(o));
    options.devices.push_back(m.devices.back().get());
  }
  options.placement = std::move(placement);
  m.model = runtime::Model::load(path, options);
  return m;
}

// Logits of every position of `ids` fed in one pass into a fresh session.
inline std::vector<float> scoreAll(runtime::Model& model, const std::vector<int32_t>& ids) {
  auto session = model.createSession(int64_t(ids.size()));
  std::vector<float> logits;
  runtime::SequenceInput in{session.get(), ids, true};
  model.forward({&in, 1}, logits);
  return logits;
}

}  // namespace jitllm::testing
