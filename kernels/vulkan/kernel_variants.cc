#include "kernels/vulkan/kernel_variants.h"

namespace jitllm::vulkan {

const char* typeDefine(quant::TensorType type) {
  using quant::TensorType;
  switch (type) {
    case TensorType::kF32:
      return "TYPE_F32";
    case TensorType::kF16:
      return "TYPE_F16";
    case TensorType::kBF16:
      return "TYPE_BF16";
    case TensorType::kQ4_0:
      return "TYPE_Q4_0";
    case TensorType::kQ4_1:
      return "TYPE_Q4_1";
    case TensorType::kQ5_0:
      return "TYPE_Q5_0";
    case TensorType::kQ5_1:
      return "TYPE_Q5_1";
    case TensorType::kQ8_0:
      return "TYPE_Q8_0";
    case TensorType::kQ4_K:
      return "TYPE_Q4_K";
    case TensorType::kQ5_K:
      return "TYPE_Q5_K";
    case TensorType::kQ6_K:
      return "TYPE_Q6_K";
    default:
      return nullptr;
  }
}

KernelSpec selectCandidatesSpec() { return KernelSpec{"select_candidates.comp", {}}; }

KernelSpec getRowsSpec(const WeightRef& table) {
  return KernelSpec{"get_rows.comp", {}}.define(typeDefine(table.type)).define("K", table.cols);
}

KernelSpec rmsNormSpec(int64_t dim, bool quantize) {
  KernelSpec spec{"rms_norm.comp", {}};
  spec.define("DIM", dim).define("WG", int64_t(kNormWorkgroup));
  if (quantize) spec.define("QUANTIZE");
  return spec;
}

KernelSpec ropeSpec(int headDim, int rotaryDims, bool neox) {
  return KernelSpec{"rope.comp", {}}
      .define("HD", int64_t(headDim))
      .define("HALF", int64_t(rotaryDims / 2))
      .define("NEOX", int64_t(neox ? 1 : 0));
}

KernelSpec kvStoreSpec(const KvLayout& layout) {
  return KernelSpec{"kv_store.comp", {}}
      .define("WIDTH", int64_t(layout.kvHeads) * layout.headDim)
      .define("PAGE_TOKENS", int64_t(layout.pageTokens))
      .define("KV_F16", int64_t(layout.precision == KvPrecision::kF16));
}

KernelSpec attentionSpec(const KvLayout& kv, int heads, int mode, bool quantize) {
  KernelSpec spec{"attention.comp", {}};
  spec.define("HD", int64_t(kv.headDim))
      .define("HEADS", int64_t(heads))
      .define("KVH", int64_t(kv.kvHeads))
      .define("PAGE_TOKENS", int64_t(kv.pageTokens))
      .define("KV_F16", int64_t(kv.precision == KvPrecision::kF16))
      .define("WG", int64_t(kAttentionWorkgroup))
      .define("MODE", int64_t(mode));
  if (quantize && mode != 1) spec.define("QUANTIZE");
  return spec;
}

int matmulTokensPerGroup(int64_t tokens) { return tokens == 1 ? 1 : tokens == 2 ? 2 : tokens <= 4 ? 4 : 8; }

KernelSpec matmulVariant(const char* shader, const WeightRef& w, int tt) {
  KernelSpec variant{shader, {}};
  variant.define(typeDefine(w.type))
      .define("K", w.cols)
      .define("LANES", int64_t(kMatmulLanes))
      .define("TT", int64_t(tt));
  return variant;
}

}  // namespace jitllm::vulkan
