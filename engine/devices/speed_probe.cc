#include "engine/devices/speed_probe.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/atomic_file.h"
#include "kernels/quant/quantize.h"

namespace jitllm::runtime {
namespace {

constexpr int64_t kRows = 4096, kCols = 4096;

}  // namespace

std::string speedKey(const Device& device) {
  const DeviceInfo& i = device.info();
  std::string key = i.id.backend + "|" + i.name + "|" + std::to_string(i.threads);
  std::replace(key.begin(), key.end(), '\t', ' ');
  std::replace(key.begin(), key.end(), '\n', ' ');
  return key;
}

double measureDecodeSpeed(Device& device) {
  const size_t rowBytes = *quant::rowBytes(quant::TensorType::kQ8_0, kCols);
  std::vector<uint8_t> weights(rowBytes * size_t(kRows));
  std::vector<float> row(static_cast<size_t>(kCols));
  for (int64_t r = 0; r < kRows; r++) {
    for (int64_t c = 0; c < kCols; c++) row[size_t(c)] = float(((r * 7919 + c * 104729) % 2001) - 1000) * 1e-3f;
    quant::quantizeRow(quant::TensorType::kQ8_0, row.data(), weights.data() + size_t(r) * rowBytes, kCols);
  }
  auto w = device.adoptHostBytes(weights.data(), weights.size());
  auto x = device.allocate(size_t(kCols) * sizeof(float));
  auto y = device.allocate(size_t(kRows) * sizeof(float));
  device.copyFromHost(x->data(), row.data(), row.size() * sizeof(float));
  const WeightRef ref{quant::TensorType::kQ8_0, w->data(), kRows, kCols, rowBytes};
  float sink = 0;
  auto once = [&] {
    device.matmul(ref, reinterpret_cast<const float*>(x->data()), 1, reinterpret_cast<float*>(y->data()), nullptr);
    device.copyToHost(&sink, y->data(), sizeof(float));  // waits for the product
  };
  once();  // kernels compiled, caches warm
  std::vector<double> seconds;
  for (int i = 0; i < 7; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return double(weights.size()) / seconds[seconds.size() / 2] / 1e9;
}

double decodeSpeed(Device& device, const std::string& cacheRoot, bool* measured) {
  const std::string key = speedKey(device);
  const std::string path = cacheRoot.empty() ? "" : cacheRoot + "/device-speeds.tsv";
  std::vector<std::pair<std::string, double>> entries;
  if (!path.empty()) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const size_t tab = line.rfind('\t');
      if (tab == std::string::npos) continue;
      try {
        const double v = std::stod(line.substr(tab + 1));
        if (line.compare(0, tab, key) == 0 && v > 0) {
          if (measured) *measured = false;
          return v;
        }
        entries.emplace_back(line.substr(0, tab), v);
      } catch (const std::exception&) {
        // a damaged line: measure again, rewrite without it
      }
    }
  }
  const double speed = measureDecodeSpeed(device);
  if (measured) *measured = true;
  if (!path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cacheRoot, ec);
    std::ostringstream out;
    for (const auto& [k, v] : entries) out << k << '\t' << v << '\n';
    out << key << '\t' << speed << '\n';
    writeFileAtomically(path, out.str());  // a read-only cache: the next start measures again
  }
  return speed;
}

}  // namespace jitllm::runtime
