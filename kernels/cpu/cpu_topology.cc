#include "kernels/cpu/cpu_topology.h"

#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace jitllm::cpu {

namespace {

std::string readLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "512K", "32768K", "1M", "12345" -> bytes (0 when it does not parse).
size_t parseCacheSize(const std::string& text) {
  size_t value = 0, i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (value > (size_t(1) << 40)) return 0;
    value = value * 10 + size_t(text[i++] - '0');
  }
  if (i == 0) return 0;
  if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) return value << 10;
  if (i < text.size() && (text[i] == 'M' || text[i] == 'm')) return value << 20;
  if (i < text.size() && (text[i] == 'G' || text[i] == 'g')) return value << 30;
  return value;
}

std::string brandString() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) || eax < 0x80000004u) return "unknown";
  char brand[49] = {};
  for (unsigned leaf = 0; leaf < 3; leaf++) {
    unsigned r[4];
    __get_cpuid(0x80000002u + leaf, &r[0], &r[1], &r[2], &r[3]);
    std::memcpy(brand + 16 * leaf, r, sizeof r);
  }
  std::string s(brand);
  const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown" : s.substr(first, last - first + 1);
#else
  return "unknown";
#endif
}

}  // namespace

std::vector<int> parseCpuList(const std::string& list) {
  std::vector<int> out;
  std::stringstream parts(list);
  std::string part;
  while (std::getline(parts, part, ',')) {
    int a = 0, b = 0;
    char dash = 0;
    std::istringstream in(part);
    if (!(in >> a) || a < 0) continue;
    if (in >> dash) {
      if (dash != '-' || !(in >> b) || b < a || b - a > 65536) continue;
    } else {
      b = a;
    }
    for (int c = a; c <= b; c++) out.push_back(c);
  }
  return out;
}

std::string CpuTopology::key() const {
  std::string k;
  for (char c : model) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      k += char(std::tolower(static_cast<unsigned char>(c)));
    } else if (!k.empty() && k.back() != '-') {
      k += '-';
    }
  }
  while (!k.empty() && k.back() == '-') k.pop_back();
  if (k.size() > 80) k.resize(80);
  return k + "-c" + std::to_string(physicalCores) + "t" + std::to_string(logicalCpus) + "-l2-" +
         std::to_string(l2Bytes >> 10) + "k-l3-" + std::to_string(l3Bytes >> 10) + "k";
}

CpuTopology detectCpuTopology(const std::string& sysCpuDir) {
  CpuTopology t;
  t.model = brandString();
  std::vector<int> online = parseCpuList(readLine(sysCpuDir + "/online"));
  if (online.empty()) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    t.logicalCpus = t.physicalCores = n > 0 ? int(n) : 1;
    return t;
  }
  t.logicalCpus = int(online.size());
  std::set<std::pair<std::string, std::string>> cores;
  bool known = true;
  for (int c : online) {
    const std::string dir = sysCpuDir + "/cpu" + std::to_string(c) + "/topology/";
    const std::string package = readLine(dir + "physical_package_id"), core = readLine(dir + "core_id");
    if (package.empty() || core.empty()) known = false;
    cores.emplace(package, core);
  }
  t.physicalCores = known ? int(cores.size()) : t.logicalCpus;
  for (int index = 0; index < 8; index++) {
    const std::string dir =
        sysCpuDir + "/cpu" + std::to_string(online.front()) + "/cache/index" + std::to_string(index) + "/";
    const std::string level = readLine(dir + "level"), type = readLine(dir + "type");
    if (level.empty()) continue;
    if (type != "Unified" && type != "Data") continue;
    const size_t bytes = parseCacheSize(readLine(dir + "size"));
    if (level == "2") t.l2Bytes = bytes;
    if (level == "3") t.l3Bytes = bytes;
  }
  return t;
}

}  // namespace jitllm::cpu
