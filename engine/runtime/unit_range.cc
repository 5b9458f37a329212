#include "engine/runtime/unit_range.h"

#include <charconv>

#include "base/error.h"

namespace jitllm::runtime {
namespace {

int parseEnd(const std::string& text, const std::string& whole, int layers) {
  if (text == "token_embd" || text == "embd") return 0;
  if (text == "output" || text == "head") return layers + 1;
  std::string digits = text.rfind("blk.", 0) == 0 ? text.substr(4) : text;
  int block = -1;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, block);
  JITLLM_REQUIRE(!digits.empty() && ec == std::errc() && ptr == end, "'", whole,
                 "' is not a layer range: use a block number (3), a range (0-5), blk.N, token_embd or output, "
                 "e.g. 20-output; or nothing for every layer");
  JITLLM_REQUIRE(block >= 0 && block < layers, "layer ", text, " does not exist: the model has blocks 0-", layers - 1);
  return block + 1;
}

}  // namespace

UnitRange parseUnitRange(const std::string& text, int layers) {
  if (text.empty()) return {0, layers + 1};
  // A '-' separates the ends (names contain none).
  const size_t dash = text.find('-');
  UnitRange r;
  if (dash == std::string::npos) {
    r.first = r.last = parseEnd(text, text, layers);
  } else {
    r.first = parseEnd(text.substr(0, dash), text, layers);
    r.last = parseEnd(text.substr(dash + 1), text, layers);
  }
  JITLLM_REQUIRE(r.first <= r.last, "layer range '", text, "' runs backwards (", unitName(r.first, layers),
                 " comes after ", unitName(r.last, layers), ")");
  return r;
}

std::string unitName(int unit, int layers) {
  if (unit == 0) return "token_embd";
  if (unit == layers + 1) return "output";
  return "blk." + std::to_string(unit - 1);
}

std::string unitRangeName(const UnitRange& range, int layers) {
  if (range.first == range.last) return unitName(range.first, layers);
  return unitName(range.first, layers) + "-" + unitName(range.last, layers);
}

}  // namespace jitllm::runtime
