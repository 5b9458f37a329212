// The weights of one model unit as one device sees them: what Model binds at load and what a
// LiveMigration stages on its target before the flip. Internal to the runtime.
//
// Ownership: its buffers keep device copies (or, on the CPU, views of the file mapping, which
// must outlive them) alive for as long as the binding lives.
// Thread-safety: the model's step-loop thread.
#pragma once

#include <memory>
#include <vector>

#include "daemon/gguf/gguf_file.h"
#include "kernels/device.h"

namespace jitllm::runtime {

// The weights of one unit as its device sees them. Buffers keep device copies (or, on the CPU,
// views of the mapping) alive for as long as the unit stays bound there.
struct BoundUnit {
  Device* device = nullptr;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  size_t weightBytes = 0;
  bool inDeviceMemory = false;
  bool kernelsReady = false;
  // Embedding and head.
  WeightRef table;
  const float* norm = nullptr;
  // Blocks.
  const float* attnNorm = nullptr;
  const float* ffnNorm = nullptr;
  WeightRef wq, wk, wv, wo, gate, up, down;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;

  uint8_t* adopt(const gguf::TensorInfo* t) {
    buffers.push_back(device->adoptHostBytes(t->data, t->nbytes));
    weightBytes += t->nbytes;
    if (buffers.back()->data() != t->data) inDeviceMemory = true;
    return buffers.back()->data();
  }
  WeightRef bindMatrix(const gguf::TensorInfo* t) {
    const uint8_t* data = adopt(t);
    const size_t rowStride = t->nbytes / size_t(t->rows());
    return WeightRef{t->type, data, t->rows(), t->dims[0], rowStride};
  }
  const float* bindVector(const gguf::TensorInfo* t) {
    if (t == nullptr) return nullptr;
    return reinterpret_cast<const float*>(adopt(t));
  }
};

}  // namespace jitllm::runtime
