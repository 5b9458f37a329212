// Not a test: times matmulRows for one matrix shape per type and Isa, in per-thread CPU time (the
// development machine is shared, so wall time is noise). Prints GB/s of weights for decode (one
// token) and tokens/s x rows for a prefill of 128 tokens.
//   [STREAMED=1] [PREFILL=reps] [REPS=decode reps] [TYPE=q4_K] build/bin/matmul_microbench [rows cols]
// PROMPT=1: prefill as prompt rows (matmulPromptRows: byte activations) where the Isa has them.
// PACKED=1: decode on the packed copy (packed_rows.h) where the Isa reads one. PREFETCH=bytes:
// decode's prefetch distance.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm/matmul.h"
#include "kernels/cpu/gemm/packed_rows.h"
#include "kernels/quant/quantize.h"

using namespace jitllm;
using namespace jitllm::cpu;

static double threadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int main(int argc, char** argv) {
  const int64_t rows = argc > 2 ? atol(argv[1]) : 2048, cols = argc > 2 ? atol(argv[2]) : 8192;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> row(static_cast<size_t>(cols)), x(static_cast<size_t>(cols * 128)),
      y(static_cast<size_t>(rows * 128));
  for (float& v : x) v = dist(rng);
  for (quant::TensorType type :
       {quant::TensorType::kF32, quant::TensorType::kF16, quant::TensorType::kQ8_0, quant::TensorType::kQ4_0,
        quant::TensorType::kQ5_0, quant::TensorType::kQ4_K, quant::TensorType::kQ5_K, quant::TensorType::kQ6_K}) {
    // TYPE=q4_K: that type only.
    if (getenv("TYPE") != nullptr && quant::typeName(type) != std::string(getenv("TYPE"))) continue;
    const size_t stride = *quant::rowBytes(type, cols);
    // COPIES=n: decode cycles through n copies of the matrix (past the caches, as a model's layers).
    const int copies = getenv("COPIES") != nullptr ? std::max(1, atoi(getenv("COPIES"))) : 1;
    std::vector<uint8_t> w(stride * size_t(rows) * size_t(copies));
    for (int64_t r = 0; r < rows; r++) {
      for (float& v : row) v = dist(rng);
      quant::quantizeRow(type, row.data(), w.data() + size_t(r) * stride, cols);
    }
    for (int c = 1; c < copies; c++)
      std::copy(w.begin(), w.begin() + stride * size_t(rows), w.begin() + stride * size_t(rows) * size_t(c));
    WeightView view{type, w.data(), rows, cols, stride};
    // STREAMED=1: decode as for weights that stream from memory (one row at a time, prefetched);
    // give a matrix larger than the last-level cache to time that. PREFILL=0 skips prefill.
    // NARROW=1: the AVX-512 VNNI paths on their 256-bit kernels (WeightView::narrowInt8).
    view.streamed = getenv("STREAMED") != nullptr;
    view.narrowInt8 = getenv("NARROW") != nullptr;
    // PREFETCH=bytes: decode's prefetch distance (WeightView::prefetchBytes; the tuner's setting).
    view.prefetchBytes = getenv("PREFETCH") != nullptr ? size_t(atol(getenv("PREFETCH"))) : 0;
    const size_t packedSize = packedBytes(type, rows, cols);
    std::vector<uint8_t> packed(packedSize * size_t(copies));
    for (int c = 0; c < copies && packedSize > 0; c++) {
      WeightView v = view;
      v.data = w.data() + stride * size_t(rows) * size_t(c);
      packRows(v, 0, rows / kPackedRows, packed.data() + packedSize * size_t(c));
    }
    for (Isa isa : kAllIsas) {
      if (!isaSupported(isa)) continue;
      const bool usePacked = getenv("PACKED") != nullptr && packedDecode(isa, type);
      if (isa == Isa::kScalar && getenv("SCALAR") == nullptr) continue;
      if (getenv("ISA") != nullptr && std::string(isaName(isa)) != getenv("ISA")) continue;  // ISA=avx2: that one
      double best = 1e9;
      const int reps = getenv("REPS") != nullptr ? atoi(getenv("REPS")) : 7;
      for (int rep = 0; rep < reps; rep++) {
        const double t0 = threadSeconds();
        for (int c = 0; c < copies; c++) {
          WeightView v = view;
          v.data = w.data() + stride * size_t(rows) * size_t(c);
          v.packed = usePacked ? packed.data() + packedSize * size_t(c) : nullptr;
          matmulRows(v, x.data(), cols, 1, y.data(), rows, 0, rows, isa);
        }
        best = std::min(best, (threadSeconds() - t0) / copies);
      }
      double bestPrefill = 1e9;
      const int64_t tokens = 128;
      const int prefillReps = getenv("PREFILL") != nullptr ? atoi(getenv("PREFILL")) : 2;
      for (int rep = 0; rep < prefillReps; rep++) {
        const double t0 = threadSeconds();
        if (getenv("PROMPT") != nullptr && promptRowsOnBytes(isa, type)) {
          matmulPromptRows(view, x.data(), cols, tokens, y.data(), rows, 0, rows, isa);
        } else {
          matmulRows(view, x.data(), cols, tokens, y.data(), rows, 0, rows, isa);
        }
        bestPrefill = std::min(bestPrefill, threadSeconds() - t0);
      }
      std::printf("%-6s %-7s decode %7.3f ms %6.2f GB/s | prefill128 %8.2f ms %7.1f GFLOP/s\n",
                  std::string(quant::typeName(type)).c_str(), isaName(isa), best * 1e3, double(w.size()) / best * 1e-9,
                  bestPrefill * 1e3, 2.0 * double(rows * cols * tokens) / bestPrefill * 1e-9);
    }
  }
}
