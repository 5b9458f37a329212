// Decode's packed copies (gemm/packed_rows.h) of the matrices a CpuDevice multiplies: one per
// matrix, made when the device prepares a model's kernels or at the matrix's first product, and
// freed with the buffer that holds it.
//
// Only matrices inside adopted buffers get one (Device::adoptHostBytes: weights mapped from a
// model file, which nothing writes while they are bound); a copy of bytes that could still change
// would go stale. Each copy is charged to the device's memory budget (the adopted weights are not:
// the page cache holds them); where the budget has no room the matrix stays on the file layout's
// kernels - the same results, decode at the old speed - and is not tried again while its buffer
// lives.
//
// Ownership: owns the copies. Thread-safety: every member may be called from any thread (one
// mutex); a pointer from copyOf stays valid until its buffer is forgotten, as the matrix's own
// bytes do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/gemm/matmul.h"

namespace jitllm::cpu {

class PackedCopies final {
 public:
  // charge(bytes): takes bytes of the device's budget, false where it has no room; refund gives
  // them back.
  PackedCopies(std::function<bool(size_t)> charge, std::function<void(size_t)> refund);
  ~PackedCopies();  // refunds every copy still held
  PackedCopies(const PackedCopies&) = delete;
  PackedCopies& operator=(const PackedCopies&) = delete;

  // The bytes [begin, begin + size) of `buffer` (an identity: never dereferenced) were adopted.
  void adopted(const void* buffer, const uint8_t* begin, size_t size);
  // `buffer` is going away: its copies are freed and refunded.
  void forget(const void* buffer);
  // w's packed copy, made now by pack(out) into packedBytes(w.type, w.rows, w.cols) bytes where w
  // lies inside an adopted buffer and has none yet; null where it has none (not adopted, no room,
  // or no packed form). pack runs under the lock: it must not call back into this object.
  const uint8_t* copyOf(const WeightView& w, const std::function<void(uint8_t*)>& pack);

  // Bytes of the copies held (a test's view).
  size_t bytes() const;

 private:
  struct FreeBytes {
    void operator()(uint8_t* p) const;
  };
  struct Copy {
    quant::TensorType type;
    const uint8_t* data;
    int64_t rows, cols;
    size_t rowStride;
    std::unique_ptr<uint8_t, FreeBytes> bytes;  // null: no room when it was tried
    size_t size;
  };
  struct Adopted {
    const void* buffer;
    const uint8_t* begin;
    size_t size;
    std::vector<Copy> copies;
  };

  // The copy of w in `in` (made if need be); null if there is none.
  const uint8_t* copyIn(Adopted& in, const WeightView& w, const std::function<void(uint8_t*)>& pack);

  std::function<bool(size_t)> charge_;
  std::function<void(size_t)> refund_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Adopted>> adopted_;  // a model's tensors: hundreds; scanned on a miss
  // Each matrix's first byte -> the buffer that held it at its last product (null: none): decode
  // looks every matrix up at every product, a few hundred times a token.
  std::unordered_map<const uint8_t*, Adopted*> found_;
  size_t bytes_ = 0;
};

}  // namespace jitllm::cpu
