#include "kernels/cpu/packed_copies.h"

#include <cstdlib>
#include <utility>

#include "base/error.h"
#include "kernels/cpu/gemm/packed_rows.h"

namespace jitllm::cpu {

void PackedCopies::FreeBytes::operator()(uint8_t* p) const { std::free(p); }

PackedCopies::PackedCopies(std::function<bool(size_t)> charge, std::function<void(size_t)> refund)
    : charge_(std::move(charge)), refund_(std::move(refund)) {}

PackedCopies::~PackedCopies() {
  if (bytes_ > 0) refund_(bytes_);
}

void PackedCopies::adopted(const void* buffer, const uint8_t* begin, size_t size) {
  std::lock_guard lock(mutex_);
  adopted_.push_back(std::make_unique<Adopted>(Adopted{buffer, begin, size, {}}));
  // Lookups that found no buffer for these bytes may find this one now.
  std::erase_if(found_,
                [&](const auto& e) { return e.second == nullptr && e.first >= begin && e.first < begin + size; });
}

void PackedCopies::forget(const void* buffer) {
  std::lock_guard lock(mutex_);
  for (auto it = adopted_.begin(); it != adopted_.end();) {
    Adopted* a = it->get();
    if (a->buffer != buffer) {
      ++it;
      continue;
    }
    std::erase_if(found_, [&](const auto& e) { return e.second == a; });
    for (const Copy& c : a->copies) {
      if (c.bytes != nullptr) {
        bytes_ -= c.size;
        refund_(c.size);
      }
    }
    it = adopted_.erase(it);
  }
}

const uint8_t* PackedCopies::copyIn(Adopted& in, const WeightView& w, const std::function<void(uint8_t*)>& pack) {
  for (const Copy& c : in.copies) {
    if (c.data == w.data && c.type == w.type && c.rows == w.rows && c.cols == w.cols && c.rowStride == w.rowStride) {
      return c.bytes.get();
    }
  }
  const size_t size = packedBytes(w.type, w.rows, w.cols);
  if (size == 0) return nullptr;
  Copy c{w.type, w.data, w.rows, w.cols, w.rowStride, nullptr, size};
  if (charge_(size)) {
    c.bytes.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (size + 63) / 64 * 64)));
    if (c.bytes == nullptr) {
      refund_(size);
    } else {
      pack(c.bytes.get());
      bytes_ += size;
    }
  }
  in.copies.push_back(std::move(c));
  return in.copies.back().bytes.get();
}

const uint8_t* PackedCopies::copyOf(const WeightView& w, const std::function<void(uint8_t*)>& pack) {
  std::lock_guard lock(mutex_);
  const size_t extent = size_t(w.rows) * w.rowStride;
  const auto holds = [&](const Adopted& a) { return w.data >= a.begin && w.data + extent <= a.begin + a.size; };
  if (auto it = found_.find(w.data); it != found_.end()) {
    if (it->second == nullptr) return nullptr;
    if (holds(*it->second)) return copyIn(*it->second, w, pack);
  }
  Adopted* holder = nullptr;
  for (const auto& a : adopted_) {
    if (holds(*a)) {
      holder = a.get();
      break;
    }
  }
  found_[w.data] = holder;
  return holder != nullptr ? copyIn(*holder, w, pack) : nullptr;
}

size_t PackedCopies::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace jitllm::cpu
