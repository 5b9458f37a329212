// y = W x for one weight matrix and a few tokens of float32 activations, on the CPU.
//
// Weights stay in their file type (f32, f16, bf16 or a GGUF quant) and are decoded on the fly.
// The float kernels keep activations and accumulation in float32; on every SIMD Isa but kAvx512
// (AVX2, AVX-VNNI, AVX-512 VNNI, AMX) q4_0, q5_0, q4_K, q5_K, q6_K and q8_0 multiply activations
// held as ~15-bit integers (matmul_int8.inc, the same bits on all four), not the 8 bits of
// llama.cpp's CPU path, which is where most of its error against a float64 reference comes from.
// Only prompt tokens may take one byte per activation (matmulPromptRows, below), at half the work.
//
// Determinism: every (row, token) result is the sum of the products W[r,k] * x[t,k] (W decoded
// exactly as quant::dequantizeRow does) accumulated in one fixed order chosen by the Isa alone.
// It does not depend on how rows are split among threads, nor on how many tokens are multiplied
// together (a decode step and a prefill give the same bits for the same token).
//
// Thread-safety: matmulRows may run on many threads at once (on disjoint row ranges of y). It
// uses a per-thread scratch buffer that grows to 4 decoded rows and is kept for the thread's life.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gemm/isa.h"
#include "kernels/quant/tensor_type.h"

namespace jitllm::cpu {

// A rows x cols matrix stored row by row in its GGUF type. Not owning.
struct WeightView {
  quant::TensorType type;
  const uint8_t* data;  // row r starts at data + r * rowStride; must be 2-byte aligned
  int64_t rows;
  int64_t cols;      // a multiple of the type's block size
  size_t rowStride;  // bytes, at least rowBytes(type, cols)
  // A hint, never a change to results: the matrix comes from memory at each use (the weights in
  // use do not fit the caches), so decode reads its rows as one sequential stream per thread.
  bool streamed = false;
  // Also a hint: columns per chunk of the avx2 / avxvnni token-vector prefill (a multiple of 32;
  // anything else: the kernels' default). Measured per CPU (kernels/cpu/cpu_tuning.h).
  int64_t prefillChunk = 0;
  // Also a hint: how many bytes ahead of the row it multiplies decode requests the weights into L2
  // (0: the kernel's own distance). Measured per CPU (cpu_tuning.h): the best distance follows the
  // memory's latency and bandwidth, and 2 KB left a Zen 4 VM's row streams at half the speed of 8 KB.
  size_t prefetchBytes = 0;
  // Also a hint: on an AVX-512 VNNI CPU, run this product on the 256-bit integer kernels (the same
  // bits; faster on CPUs that split 512-bit operations in two). Measured per CPU (cpu_tuning.h).
  bool narrowInt8 = false;
  // Also a hint: products with the same non-zero epoch, x and shape have the same activations, so a
  // thread may quantize a few tokens of x once for all of them (decode: once per thread per group of
  // products, not once per chunk of rows). The caller gives each group of products a value no other
  // call in the process has used (while x cannot change); 0: quantize at every call.
  uint64_t inputEpoch = 0;
  // Rows [0, rows / 8 * 8) again, interleaved by 8 for decode (packed_rows.h: packRows), or null.
  // Decode reads its groups there where packedDecode(isa, type) holds and the rest of the rows in
  // `data`; the results are the same bits either way.
  const uint8_t* packed = nullptr;
};

// y[t*yStride + r] = sum_k W[r,k] * x[t*xStride + k], for r in [rowBegin,rowEnd) and t in
// [0,nTokens). Deterministic: the result of a row never depends on rowBegin/rowEnd splitting
// (threads split rows), only on the Isa. `isa` must be supported by this CPU (isaSupported).
// Throws FAILED for a type that cannot be computed or for inconsistent shapes.
void matmulRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                int64_t rowBegin, int64_t rowEnd, Isa isa);

// Prompt tokens (Device::setPromptRows: tokens the model did not produce, whose bits need not be
// decode's) may be multiplied on a path of their own: activations quantized to one byte per element
// (per block of 32, a = round(x * 127 / amax): llama.cpp's q8 precision class, where the wide form
// keeps ~15 bits) on the 256-bit integer kernels, which then skip the products of the second byte -
// half the integer work of the token-vector prefill, the bound on AVX2 prefill. Each token's bits
// are a function of its own row only (never of the batch, the row split or the token count), and
// the same on every Isa that has the path.
//
// Whether `isa` has the prompt path for `type`: q4_0, q5_0, q4_K, q5_K and q6_K on every Isa that
// runs the 256-bit integer kernels, q8_0 where they have vpdpbusd (AVX-VNNI or AVX-512 VNNI: its
// signed weights go in as q + 128, whose pair sums vpmaddubsw's int16 could not hold) - except the
// types AMX multiplies on its tiles (already at the tile unit's speed).
bool promptRowsOnBytes(Isa isa, quant::TensorType type);
// As matmulRows, on the prompt path; promptRowsOnBytes(isa, w.type) must hold.
void matmulPromptRows(const WeightView& w, const float* x, int64_t xStride, int64_t nTokens, float* y, int64_t yStride,
                      int64_t rowBegin, int64_t rowEnd, Isa isa);

// Prompt activations quantized and laid out once for a product whose rows several threads compute
// (matmulPromptRows would have each call - each thread, each chunk of rows - quantize every token
// again). Results are matmulPromptRows' bits exactly.
//
// Thread-safety: layOut may run on several threads at once for disjoint group ranges; after it,
// matmulPromptRowsPrepared may run on many threads at once. reset() needs exclusive access.
class PromptActivations {
 public:
  PromptActivations();
  ~PromptActivations();
  PromptActivations(const PromptActivations&) = delete;
  PromptActivations& operator=(const PromptActivations&) = delete;

  // Makes room for nTokens rows of `cols` columns (a multiple of 32) for `isa`'s kernels, keeping
  // the memory for later calls. Returns the number of groups (of 8 tokens) to lay out.
  int64_t reset(Isa isa, int64_t nTokens, int64_t cols);
  // Lays out groups [groupBegin, groupEnd) from x (nTokens rows of xStride floats).
  void layOut(const float* x, int64_t xStride, int64_t groupBegin, int64_t groupEnd);

  Isa isa() const { return isa_; }
  int64_t tokens() const { return tokens_; }
  int64_t cols() const { return cols_; }
  const uint8_t* data() const { return data_; }

 private:
  Isa isa_ = Isa::kScalar;
  int64_t tokens_ = 0, cols_ = 0;
  size_t capacity_ = 0;
  uint8_t* data_ = nullptr;  // 64-byte aligned, owned
};

// As matmulPromptRows, with the activations of x.layOut (all its groups laid out); w's type must
// have the prompt path on x.isa().
void matmulPromptRowsPrepared(const WeightView& w, const PromptActivations& x, float* y, int64_t yStride,
                              int64_t rowBegin, int64_t rowEnd);

// Activations laid out once for a product whose rows several threads compute. Prefill on AMX
// (Isa::kAvx512Amx; q4_K, q6_K and q8_0 weights; kMinTokens or more) reads the activations
// quantized and transposed into tiles; matmulRows would have every call (every thread, every
// chunk of rows) do that again. Results are matmulRows' bits exactly.
//
// Thread-safety: layOut may run on several threads at once for disjoint tile ranges; after it,
// matmulRowsPrepared may run on many threads at once. reset() needs exclusive access.
class PreparedActivations {
 public:
  // Whether matmulRows(w of this type, ..., nTokens, ..., isa) reads prepared activations.
  static bool wanted(Isa isa, quant::TensorType type, int64_t nTokens);
  // Rows per step of the prepared kernels: row ranges that are multiples of it waste nothing.
  static constexpr int64_t kRowGrain = 16;

  PreparedActivations();
  ~PreparedActivations();
  PreparedActivations(const PreparedActivations&) = delete;
  PreparedActivations& operator=(const PreparedActivations&) = delete;

  // Makes room for nTokens rows of `cols` columns (a multiple of 32), keeping the memory for
  // later calls. Returns the number of tiles to lay out.
  int64_t reset(int64_t nTokens, int64_t cols);
  // Lays out tiles [tileBegin, tileEnd) from x (nTokens rows of xStride floats).
  void layOut(const float* x, int64_t xStride, int64_t tileBegin, int64_t tileEnd);

  int64_t tokens() const { return tokens_; }
  int64_t cols() const { return cols_; }
  const uint8_t* tiles() const { return tiles_; }

 private:
  int64_t tokens_ = 0, cols_ = 0;
  size_t capacity_ = 0;
  uint8_t* tiles_ = nullptr;  // 64-byte aligned, owned
};

// As matmulRows, with the activations of x.layOut (all its tiles laid out). `isa` must be one for
// which PreparedActivations::wanted(isa, w.type, x.tokens()) holds.
void matmulRowsPrepared(const WeightView& w, const PreparedActivations& x, float* y, int64_t yStride, int64_t rowBegin,
                        int64_t rowEnd, Isa isa);

}  // namespace jitllm::cpu
