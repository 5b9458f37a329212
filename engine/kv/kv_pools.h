// The KV page pools of one model: one per device and per number of shards its blocks' KV heads
// are split over there (a tensor-parallel block keeps 1/k of the heads in pages of their own
// layout), made when first asked for and kept until the device is released.
//
// Ownership: owns the pools; the devices must outlive them, and every session holding their
// pages must be destroyed first.
// Thread-safety: the model's step-loop thread (the pools themselves may be used from any).
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/kv/kv_page_pool.h"

namespace jitllm::runtime {

class KvPools final {
 public:
  explicit KvPools(const KvLayout& whole) : whole_(whole) {}
  KvPools(const KvPools&) = delete;
  KvPools& operator=(const KvPools&) = delete;

  // The pool of a device holding one of `shards` shards of the KV heads (1: the whole layout).
  KvPagePool& get(Device& device, int shards);
  // Every pool made so far (also those no layer uses any more), and its device.
  std::vector<const KvPagePool*> all() const;
  void appendDevices(std::vector<Device*>& out) const;
  // Forgets `device`'s pools; Error(FAILED) while one still lends a page.
  void release(Device& device);

 private:
  KvLayout whole_;
  std::map<std::pair<Device*, int>, std::unique_ptr<KvPagePool>> pools_;
};

}  // namespace jitllm::runtime
