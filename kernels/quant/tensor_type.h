// Tensor element types, numbered exactly as GGUF / ggml number them (ggml_type), so a value
// read from a file's tensor info is a TensorType without translation.
//
// Every type jitllm reads stores a row of n elements as n / blockElems blocks of blockBytes
// each, bit-for-bit the layout ggml defines (see kernels/quant/blocks.h). Types that exist in
// ggml but that we do not (yet) compute with are still named, so errors can say which type a
// file asked for.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace jitllm::quant {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct TypeTraits {
  std::string_view name;  // as ggml prints it: "f32", "q4_K", ...
  int64_t blockElems;     // elements per block (1 for plain floats)
  size_t blockBytes;      // bytes per block
  bool computable;        // jitllm can dequantize and multiply with it
};

// Traits of a type known to ggml, or nullopt for a number ggml does not define.
std::optional<TypeTraits> typeTraits(uint32_t rawType);
TypeTraits typeTraits(TensorType type);  // a named type always has traits

// Bytes of one row of n elements; nullopt when n is not a multiple of the block size.
std::optional<size_t> rowBytes(TensorType type, int64_t n);

std::string_view typeName(TensorType type);
// Parses a ggml type name ("q4_K", "Q4_K", "f16", ...); nullopt when unknown.
std::optional<TensorType> parseTypeName(std::string_view name);

}  // namespace jitllm::quant
