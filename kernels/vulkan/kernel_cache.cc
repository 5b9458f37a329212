#include "kernels/vulkan/kernel_cache.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/atomic_file.h"
#include "kernels/device.h"

namespace jitllm::vulkan {
namespace {

constexpr char kSpirvMagic[8] = {'J', 'L', 'S', 'P', 'I', 'R', 'V', '1'};

struct SpirvHeader {
  char magic[8];
  uint64_t key;
  uint64_t check;
  uint64_t words;
  uint64_t checksum;
};

uint64_t checksumOf(const std::vector<uint32_t>& words) {
  return fnv1a64(std::string_view(reinterpret_cast<const char*>(words.data()), words.size() * 4));
}

std::vector<char> readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string KernelCache::defaultRoot() { return cacheRoot(); }

KernelCache::KernelCache(const std::string& root, const PhysicalDeviceDescription& device) {
  if (root.empty()) return;
  char version[32];
  std::snprintf(version, sizeof version, "%08x", device.driverVersion);
  directory_ = root + "/vulkan/" + device.uuidString() + "-" + version;
  std::error_code ec;
  std::filesystem::create_directories(directory_ + "/spirv", ec);
  if (ec) directory_.clear();  // read-only home, say: run without a disk cache
}

std::string KernelCache::spirvPath(uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.spv", static_cast<unsigned long long>(key));
  return directory_ + "/spirv/" + name;
}

void KernelCache::writeAtomically(const std::string& path, const void* data, size_t size) const {
  writeFileAtomically(path, std::string_view(static_cast<const char*>(data), size));
}

std::optional<std::vector<uint32_t>> KernelCache::loadSpirv(uint64_t key, uint64_t check) const {
  if (!enabled()) return std::nullopt;
  const std::vector<char> bytes = readAll(spirvPath(key));
  SpirvHeader h;
  if (bytes.size() < sizeof h) return std::nullopt;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kSpirvMagic, sizeof h.magic) != 0 || h.key != key || h.check != check ||
      bytes.size() != sizeof h + h.words * 4 || h.words == 0) {
    return std::nullopt;
  }
  std::vector<uint32_t> words(h.words);
  std::memcpy(words.data(), bytes.data() + sizeof h, h.words * 4);
  if (checksumOf(words) != h.checksum || words[0] != 0x07230203u) return std::nullopt;
  return words;
}

void KernelCache::storeSpirv(uint64_t key, uint64_t check, const std::vector<uint32_t>& spirv) const {
  if (!enabled()) return;
  SpirvHeader h;
  std::memcpy(h.magic, kSpirvMagic, sizeof h.magic);
  h.key = key;
  h.check = check;
  h.words = spirv.size();
  h.checksum = checksumOf(spirv);
  std::vector<char> bytes(sizeof h + spirv.size() * 4);
  std::memcpy(bytes.data(), &h, sizeof h);
  std::memcpy(bytes.data() + sizeof h, spirv.data(), spirv.size() * 4);
  writeAtomically(spirvPath(key), bytes.data(), bytes.size());
}

std::vector<uint8_t> KernelCache::loadPipelineCache() const {
  if (!enabled()) return {};
  const std::vector<char> bytes = readAll(directory_ + "/pipeline-cache.bin");
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

void KernelCache::storePipelineCache(const std::vector<uint8_t>& data) const {
  if (!enabled() || data.empty()) return;
  writeAtomically(directory_ + "/pipeline-cache.bin", data.data(), data.size());
}

std::string KernelCache::loadText(const std::string& name) const {
  if (!enabled()) return {};
  const std::vector<char> bytes = readAll(directory_ + "/" + name);
  return std::string(bytes.begin(), bytes.end());
}

void KernelCache::storeText(const std::string& name, const std::string& text) const {
  if (!enabled()) return;
  writeAtomically(directory_ + "/" + name, text.data(), text.size());
}

}  // namespace jitllm::vulkan
