// Internal to kernels/cpu/gemm: one matmulRows implementation per Isa, each in its own
// translation unit compiled for that instruction set (see matmul_driver.inc). Callers (only
// matmul.cc) must have checked the arguments and that the CPU supports the variant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gemm/matmul.h"

namespace jitllm::cpu::detail {

void matmulRowsScalar(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd);
void matmulRowsAvx2(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                    int64_t rowBegin, int64_t rowEnd);
// One compile of the 256-bit integer kernels (matmul_int8_256.inc): kInt8Avx2 (vpmaddubsw +
// vpmaddwd: Isa::kAvx2), kInt8AvxVnni (VEX vpdpbusd: Isa::kAvxVnni) and kInt8NarrowVnni (EVEX
// vpdpbusd on ymm: the AVX-512 VNNI paths' narrow kernels, for CPUs with AVX-512 VNNI and no
// AVX-VNNI too). All give the same bits. Each function returns false for a type the kernels do
// not multiply (they do q4_0, q5_0, q4_K, q5_K, q6_K and q8_0; the prompt form all but q8_0).
struct Int8Kernels256 {
  // matmulRows; promptForm: the activations in the prompt form (matmulPromptRows).
  bool (*rows)(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
               int64_t rowBegin, int64_t rowEnd, bool promptForm);
  // PromptActivations' layout: groups of 8 tokens of `cols` columns, promptGroupBytes each; groups
  // [groupBegin, groupEnd) of x's nTokens rows laid out at base.
  size_t (*promptGroupBytes)(int64_t cols);
  void (*promptLayOut)(const float* x, int64_t xStride, int64_t nTokens, int64_t cols, uint8_t* base,
                       int64_t groupBegin, int64_t groupEnd);
  // Rows [rowBegin, rowEnd) against nTokens laid out at base.
  bool (*promptRowsPrepared)(const WeightView& w, const uint8_t* base, int64_t nTokens, float* y, int64_t yStride,
                             int64_t rowBegin, int64_t rowEnd);
};
extern const Int8Kernels256 kInt8Avx2, kInt8AvxVnni, kInt8NarrowVnni;

// matmulRows on one compile of the 256-bit integer kernels; the types they do not multiply on the
// AVX2 float kernels (matmulRowsAvx2).
void matmulRowsInt8(const Int8Kernels256& kernels, const WeightView& w, const float* x, int64_t xStride,
                    int64_t nTokens, float* y, int64_t yStride, int64_t rowBegin, int64_t rowEnd);

void matmulRowsAvx512(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd);
void matmulRowsAvx512Vnni(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                          int64_t yStride, int64_t rowBegin, int64_t rowEnd);
// Isa::kAvx512Bf16: BF16 weights on vdpbf16ps (activations as two bf16 halves), every other type
// on matmulRowsAvx512Vnni.
void matmulRowsAvx512Bf16(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                          int64_t yStride, int64_t rowBegin, int64_t rowEnd);

// Prefill of q4_K / q6_K / q8_0 on AMX tiles (same bits as matmulRowsAvx512Vnni, which it calls
// for everything else, and for batches under kAmxMinTokens).
void matmulRowsAvx512Amx(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y,
                         int64_t yStride, int64_t rowBegin, int64_t rowEnd);

// The AMX kernels' activations, laid out in tiles of kAmxTile tokens (matmul_amx.cc):
constexpr int64_t kAmxTile = 16;
// Fewer tokens take the VNNI kernels: a padded tile costs what a full one does, and one token is
// decode, which streams the weights instead (docs/cpu-kernels.md).
constexpr int64_t kAmxMinTokens = 8;
// Whether the AMX kernels multiply this weight type.
bool amxMultiplies(quant::TensorType type);
// Bytes of one token tile of `cols` columns (a multiple of 64).
size_t amxTokenTileBytes(int64_t cols);
// Quantizes and lays out token tiles [tileBegin, tileEnd) of x (nTokens rows) into `tiles`
// (64-byte aligned, one amxTokenTileBytes per tile). Disjoint tile ranges may be laid out by
// several threads at once.
void amxLayOutTokens(const float* x, int64_t xStride, int64_t nTokens, int64_t cols, uint8_t* tiles, int64_t tileBegin,
                     int64_t tileEnd);
// Rows [rowBegin, rowEnd) of an amxMultiplies type against nTokens laid out by amxLayOutTokens.
void matmulRowsAmxPrepared(const WeightView& w, const uint8_t* tiles, int64_t nTokens, float* y, int64_t yStride,
                           int64_t rowBegin, int64_t rowEnd);

// This thread's scratch of at least `floats` floats, 64-byte aligned. Valid until the next call
// on the same thread; its contents are not preserved across calls.
float* threadScratch(size_t floats);

// This thread's quantized copy of a few tokens' activations, kept from one call to the next of
// the same product group (WeightView::inputEpoch): decode's token is quantized once per thread per
// group of products instead of once per chunk of rows of each. `form` names the layout (each
// kernel family its own, with what it depends on, like the 512-bit kernels' offset). `data`
// (64-byte aligned, at least `bytes`) holds x's quantized rows when `ready`; otherwise the caller
// writes them there, and later calls with the same key find them. Never for epoch 0. Valid until
// the next call on the same thread with another key.
struct QuantizedInput {
  uint8_t* data;
  bool ready;
};
QuantizedInput threadQuantizedInput(const float* x, int64_t xStride, int64_t nTokens, int64_t cols, int form,
                                    uint64_t epoch, size_t bytes);

}  // namespace jitllm::cpu::detail
