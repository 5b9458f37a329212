#include "engine/runtime/bound_unit.h"

#include <cstring>

namespace jitllm::runtime {

uint8_t* DeviceWeights::adopt(const uint8_t* at, size_t bytes) {
  buffers.push_back(device->adoptHostBytes(at, bytes));
  weightBytes += bytes;
  return buffers.back()->data();
}

WeightRef DeviceWeights::matrix(const gguf::TensorInfo* t) {
  const uint8_t* data = adopt(t->data, t->nbytes);
  if (data != t->data) inDeviceMemory = true;
  return WeightRef{t->type, data, t->rows(), t->dims[0], t->nbytes / size_t(t->rows())};
}

const float* DeviceWeights::vector(const gguf::TensorInfo* t) {
  if (t == nullptr) return nullptr;
  const uint8_t* data = adopt(t->data, t->nbytes);
  if (data != t->data) inDeviceMemory = true;
  return reinterpret_cast<const float*>(data);
}

WeightRef DeviceWeights::rows(const gguf::TensorInfo* t, int64_t begin, int64_t rows) {
  const size_t rowStride = t->nbytes / size_t(t->rows());
  const uint8_t* at = t->data + size_t(begin) * rowStride;
  const uint8_t* data = adopt(at, size_t(rows) * rowStride);
  if (data != at) inDeviceMemory = true;
  return WeightRef{t->type, data, rows, t->dims[0], rowStride};
}

WeightRef DeviceWeights::columns(const gguf::TensorInfo* t, int64_t begin, int64_t cols) {
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

const float* DeviceWeights::vectorPart(const gguf::TensorInfo* t, int64_t begin, int64_t count) {
  if (t == nullptr) return nullptr;
  // (Not counted as in device memory: the matrices beside it say where the shard's weights are.)
  return reinterpret_cast<const float*>(adopt(t->data + size_t(begin) * sizeof(float), size_t(count) * sizeof(float)));
}

namespace {
// Rows [begin, begin + rows) of a bound matrix.
WeightRef rowsOf(const WeightRef& m, int64_t begin, int64_t rows) {
  return WeightRef{m.type, m.data + size_t(begin) * m.rowStride, rows, m.cols, m.rowStride};
}
}  // namespace

void BlockWeights::splitFused(const WeightRef& qkv, int64_t qRows, int64_t kvRows, const WeightRef& gateUp,
                              int64_t ffRows) {
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

void BlockWeights::rebase(const uint8_t* from, const uint8_t* to) {
  auto move = [&](auto& p) {
    using Pointer = std::remove_reference_t<decltype(p)>;
    if (p) p = reinterpret_cast<Pointer>(to + (reinterpret_cast<const uint8_t*>(p) - from));
  };
  for (WeightRef* w : {&wq, &wk, &wv, &wo, &gate, &up, &down}) move(w->data);
  for (const float** v : {&attnNorm, &ffnNorm, &bq, &bk, &bv, &qNorm, &kNorm, &attnPostNorm, &ffnPostNorm}) move(*v);
}

void BlockUnit::rebase(const uint8_t* base) {
  JITLLM_ASSERT(stream != nullptr && shards.size() == 1);
  shards.front().weights.rebase(stream->base, base);
  stream->base = base;
}

size_t BoundUnit::weightBytes() const {
  size_t bytes = 0;
  forEachBinding([&](const DeviceWeights& w) { bytes += w.weightBytes; });
  return bytes;
}

}  // namespace jitllm::runtime
