// The weights of one model unit as one device sees them: what Model binds at load and what a
// LiveMigration stages on its target before the flip. Internal to the runtime.
//
// Ownership: its buffers keep device copies (or, on the CPU, views of the file mapping, which
// must outlive them) alive for as long as the binding lives.
// Thread-safety: the model's step-loop thread.
#pragma once

#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/gguf/gguf_file.h"
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
  const float* qNorm = nullptr;  // per-head norms of q and k (qwen3)
  const float* kNorm = nullptr;
  const float* attnPostNorm = nullptr;  // norms of each branch's output (gemma3)
  const float* ffnPostNorm = nullptr;

  // Tensor parallel (Model::bindSplit): shard `shard` of `shards`. Its wq/wk/wv/gate/up (and
  // biases) are its rows; wo and down its columns where `woSplit` / `downSplit`, else the first
  // shard holds them whole and the others none. The first shard owns the others in `peers`.
  int shard = 0;
  int shards = 1;
  bool partialSums = false;  // asked for (Model::bindSplit); woSplit/downSplit say where it applies
  bool woSplit = false;
  bool downSplit = false;
  std::vector<BoundUnit> peers;

  // Streamed (a block of a model larger than its device): the weights wait in `streamSource`
  // (pinned host memory) laid out as they will be in a device slot, and the pointers above point
  // at where they are now - into the source until the first upload, then into the slot the block
  // was last uploaded to (rebase()).
  bool streamed = false;
  std::unique_ptr<HostBuffer> streamSource;
  size_t streamBytes = 0;
  const uint8_t* streamBase = nullptr;

  static constexpr size_t kStreamAlignment = 256;

  // One tensor of a streamed block and the field that will point at it.
  struct StreamedTensor {
    const gguf::TensorInfo* tensor;  // may be null (qwen2's biases on a llama model)
    WeightRef* matrix;               // exactly one of these
    const float** vector;
  };
  // The whole block, copied once into one stream source; binds every tensor in it.
  void bindStreamed(const std::vector<StreamedTensor>& tensors) {
    auto aligned = [](size_t n) { return (n + kStreamAlignment - 1) / kStreamAlignment * kStreamAlignment; };
    streamed = true;
    streamBytes = 0;
    for (const auto& s : tensors) streamBytes += s.tensor ? aligned(s.tensor->nbytes) : 0;
    streamSource = device->allocateStreamSource(streamBytes);
    streamBase = streamSource->data();
    size_t offset = 0;
    for (const auto& s : tensors) {
      const gguf::TensorInfo* t = s.tensor;
      if (!t) continue;
      uint8_t* at = streamSource->data() + offset;
      std::memcpy(at, t->data, t->nbytes);
      weightBytes += t->nbytes;
      offset += aligned(t->nbytes);
      if (s.matrix) {
        *s.matrix = WeightRef{t->type, at, t->rows(), t->dims[0], t->nbytes / size_t(t->rows())};
      } else {
        *s.vector = reinterpret_cast<const float*>(at);
      }
    }
  }
  // Points every weight at the copy that starts at `base` (a device slot the block was uploaded to).
  void rebase(const uint8_t* base) {
    auto move = [&](auto& p) {
      if (p)
        p = reinterpret_cast<std::remove_reference_t<decltype(p)>>(base +
                                                                   (reinterpret_cast<const uint8_t*>(p) - streamBase));
    };
    for (WeightRef* w : {&wq, &wk, &wv, &wo, &gate, &up, &down}) move(w->data);
    for (const float** v : {&attnNorm, &ffnNorm, &bq, &bk, &bv, &qNorm, &kNorm, &attnPostNorm, &ffnPostNorm}) move(*v);
    streamBase = base;
  }

  // Rows [begin, begin + rows) of a bound matrix (phi3's fused matrices, one product each part).
  static WeightRef rowsOf(const WeightRef& m, int64_t begin, int64_t rows) {
    return WeightRef{m.type, m.data + size_t(begin) * m.rowStride, rows, m.cols, m.rowStride};
  }
  // A fused q|k|v matrix into wq, wk, wv, and a fused gate|up one into gate, up (either may be
  // unset: {} has no rows).
  void splitFused(const WeightRef& qkv, int64_t qRows, int64_t kvRows, const WeightRef& gateUp, int64_t ffRows) {
    if (qkv.rows > 0) {
      wq = rowsOf(qkv, 0, qRows);
      wk = rowsOf(qkv, qRows, kvRows);
      wv = rowsOf(qkv, qRows + kvRows, kvRows);
    }
    if (gateUp.rows > 0) {
      gate = rowsOf(gateUp, 0, ffRows);
      up = rowsOf(gateUp, ffRows, ffRows);
    }
  }

  uint8_t* adopt(const gguf::TensorInfo* t) {
    buffers.push_back(device->adoptHostBytes(t->data, t->nbytes));
    weightBytes += t->nbytes;
    if (buffers.back()->data() != t->data) inDeviceMemory = true;
    return buffers.back()->data();
  }
  // Rows [begin, begin + rows) of a matrix (contiguous in the file: a view on the CPU).
  WeightRef bindRows(const gguf::TensorInfo* t, int64_t begin, int64_t rows) {
    const size_t rowStride = t->nbytes / size_t(t->rows());
    const uint8_t* at = t->data + size_t(begin) * rowStride;
    buffers.push_back(device->adoptHostBytes(at, size_t(rows) * rowStride));
    weightBytes += size_t(rows) * rowStride;
    if (buffers.back()->data() != at) inDeviceMemory = true;
    return WeightRef{t->type, buffers.back()->data(), rows, t->dims[0], rowStride};
  }
  // Columns [begin, begin + cols) of every row, copied into one buffer of their own (`begin` and
  // `cols` whole quantization blocks).
  WeightRef bindColumns(const gguf::TensorInfo* t, int64_t begin, int64_t cols);
  const float* bindVectorPart(const gguf::TensorInfo* t, int64_t begin, int64_t count) {
    if (t == nullptr) return nullptr;
    const uint8_t* at = t->data + size_t(begin) * sizeof(float);
    buffers.push_back(device->adoptHostBytes(at, size_t(count) * sizeof(float)));
    weightBytes += size_t(count) * sizeof(float);
    return reinterpret_cast<const float*>(buffers.back()->data());
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

inline WeightRef BoundUnit::bindColumns(const gguf::TensorInfo* t, int64_t begin, int64_t cols) {
  const quant::TypeTraits traits = quant::typeTraits(t->type);
  const int64_t rows = t->rows();
  const size_t rowStride = t->nbytes / size_t(rows);
  const size_t skip = size_t(begin / traits.blockElems) * traits.blockBytes;
  const size_t part = size_t(cols / traits.blockElems) * traits.blockBytes;
  std::vector<uint8_t> host(size_t(rows) * part);
  for (int64_t r = 0; r < rows; r++) std::memcpy(&host[size_t(r) * part], t->data + size_t(r) * rowStride + skip, part);
  buffers.push_back(device->allocate(host.size()));
  device->copyFromHost(buffers.back()->data(), host.data(), host.size());
  weightBytes += host.size();
  if (!device->info().caps.hostMemory) inDeviceMemory = true;
  return WeightRef{t->type, buffers.back()->data(), rows, cols, part};
}

}  // namespace jitllm::runtime
