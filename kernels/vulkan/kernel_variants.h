// The kernel variant (KernelSpec) each op of a VulkanDevice asks for, one place each, so that
// prepareKernels asks for exactly the variants the ops will; and the workgroup widths the shaders'
// numerics are written for (never chosen per device or by timing).
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>

#include "kernels/device.h"
#include "kernels/quant/tensor_type.h"
#include "kernels/vulkan/pipeline_library.h"

namespace jitllm::vulkan {

// Reduction widths fixed for numerics (see the shaders).
inline constexpr int kMatmulLanes = 32;
// 256: 8 loads per invocation for the 2048-wide rows of the 1B shape (at 64, each invocation's 32
// dependent loads made a norm take 22 us on an H200, more than a 2048 x 2048 product); every
// desktop GPU and lavapipe allow 1024 invocations.
inline constexpr int kNormWorkgroup = 256;
inline constexpr int kAttentionWorkgroup = 64;
inline constexpr int kElementwiseWorkgroup = 256;

// Workgroups for n items at perGroup each.
inline uint32_t groupsFor(uint64_t n, uint64_t perGroup) { return uint32_t((n + perGroup - 1) / perGroup); }

// The shaders' TYPE_* define of a weight type; null for a type they do not read.
const char* typeDefine(quant::TensorType type);

KernelSpec selectCandidatesSpec();
KernelSpec getRowsSpec(const WeightRef& table);
KernelSpec rmsNormSpec(int64_t dim, bool quantize);
KernelSpec ropeSpec(int headDim, int rotaryDims, bool neox);
KernelSpec kvStoreSpec(const KvLayout& layout);
// mode: attention.comp's MODE (0: a workgroup per head and token; 1 and 2: the split's chunks
// and their fold).
KernelSpec attentionSpec(const KvLayout& kv, int heads, int mode, bool quantize);
// Tokens per workgroup of the products (TT): growing with the batch up to 8.
int matmulTokensPerGroup(int64_t tokens);
// A product variant of `shader` (matmul.comp, matmul_int.comp) for w at tt tokens a workgroup,
// without its dispatch shape (WR and NR: MatmulShapes).
KernelSpec matmulVariant(const char* shader, const WeightRef& w, int tt);

}  // namespace jitllm::vulkan
