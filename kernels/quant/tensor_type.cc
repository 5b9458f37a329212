#include "kernels/quant/tensor_type.h"

#include <array>

#include "base/error.h"

namespace jitllm::quant {
namespace {

struct TableEntry {
  uint32_t raw;
  TypeTraits traits;
};

// Block sizes and bytes exactly as ggml's type_traits table (ggml.c); a GGUF file's tensor byte
// counts are computed from these, so one wrong number misplaces every tensor after it.
constexpr std::array kTable = {
    TableEntry{0, {"f32", 1, 4, true}},          TableEntry{1, {"f16", 1, 2, true}},
    TableEntry{2, {"q4_0", 32, 18, true}},       TableEntry{3, {"q4_1", 32, 20, true}},
    TableEntry{6, {"q5_0", 32, 22, true}},       TableEntry{7, {"q5_1", 32, 24, true}},
    TableEntry{8, {"q8_0", 32, 34, true}},       TableEntry{9, {"q8_1", 32, 36, false}},
    TableEntry{10, {"q2_K", 256, 84, false}},    TableEntry{11, {"q3_K", 256, 110, false}},
    TableEntry{12, {"q4_K", 256, 144, true}},    TableEntry{13, {"q5_K", 256, 176, true}},
    TableEntry{14, {"q6_K", 256, 210, true}},    TableEntry{15, {"q8_K", 256, 292, false}},
    TableEntry{16, {"iq2_xxs", 256, 66, false}}, TableEntry{17, {"iq2_xs", 256, 74, false}},
    TableEntry{18, {"iq3_xxs", 256, 98, false}}, TableEntry{19, {"iq1_s", 256, 50, false}},
    TableEntry{20, {"iq4_nl", 32, 18, false}},   TableEntry{21, {"iq3_s", 256, 110, false}},
    TableEntry{22, {"iq2_s", 256, 82, false}},   TableEntry{23, {"iq4_xs", 256, 136, false}},
    TableEntry{24, {"i8", 1, 1, false}},         TableEntry{25, {"i16", 1, 2, false}},
    TableEntry{26, {"i32", 1, 4, false}},        TableEntry{27, {"i64", 1, 8, false}},
    TableEntry{28, {"f64", 1, 8, false}},        TableEntry{29, {"iq1_m", 256, 56, false}},
    TableEntry{30, {"bf16", 1, 2, true}},        TableEntry{34, {"tq1_0", 256, 54, false}},
    TableEntry{35, {"tq2_0", 256, 66, false}},   TableEntry{39, {"mxfp4", 32, 17, false}},
};

char lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<TypeTraits> typeTraits(uint32_t rawType) {
  for (const TableEntry& e : kTable) {
    if (e.raw == rawType) return e.traits;
  }
  return std::nullopt;
}

TypeTraits typeTraits(TensorType type) {
  std::optional<TypeTraits> t = typeTraits(static_cast<uint32_t>(type));
  JITLLM_ASSERT(t.has_value());
  return *t;
}

std::optional<size_t> rowBytes(TensorType type, int64_t n) {
  const TypeTraits t = typeTraits(type);
  if (n < 0 || n % t.blockElems != 0) return std::nullopt;
  return size_t(n / t.blockElems) * t.blockBytes;
}

std::string_view typeName(TensorType type) { return typeTraits(type).name; }

std::optional<TensorType> parseTypeName(std::string_view name) {
  // ggml's names are unique ignoring case ("q4_K" vs "q4_k" never both exist), so users may type
  // either spelling.
  for (const TableEntry& e : kTable) {
    if (equalsIgnoringCase(e.traits.name, name)) return static_cast<TensorType>(e.raw);
  }
  return std::nullopt;
}

}  // namespace jitllm::quant
