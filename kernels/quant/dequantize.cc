#include "kernels/quant/dequantize.h"

#include <cstring>

#include "base/error.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/half.h"

namespace jitllm::quant {
namespace {

// Each function below decodes nb whole blocks; the arithmetic mirrors ggml's reference exactly
// (int quant times float scale, then the float offset), which is what "exact" is checked against.

void dequantizeQ4_0(const block_q4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += kQK4_0) {
    const float d = fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; j++) {
      y[j] = float((x[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK4_0 / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantizeQ4_1(const block_q4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += kQK4_1) {
    const float d = fp16ToFp32(x[i].d);
    const float m = fp16ToFp32(x[i].m);
    for (int j = 0; j < kQK4_1 / 2; j++) {
      y[j] = float(x[i].qs[j] & 0xF) * d + m;
      y[j + kQK4_1 / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

uint32_t loadQh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof v);  // little-endian, as written by ggml on x86 and ARM
  return v;
}

void dequantizeQ5_0(const block_q5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += kQK5_0) {
    const float d = fp16ToFp32(x[i].d);
    const uint32_t qh = loadQh(x[i].qh);
    for (int j = 0; j < kQK5_0 / 2; j++) {
      const int lo = (x[i].qs[j] & 0xF) | int(((qh >> j) & 1u) << 4);
      const int hi = (x[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4);
      y[j] = float(lo - 16) * d;
      y[j + kQK5_0 / 2] = float(hi - 16) * d;
    }
  }
}

void dequantizeQ5_1(const block_q5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += kQK5_1) {
    const float d = fp16ToFp32(x[i].d);
    const float m = fp16ToFp32(x[i].m);
    const uint32_t qh = loadQh(x[i].qh);
    for (int j = 0; j < kQK5_1 / 2; j++) {
      const int lo = (x[i].qs[j] & 0xF) | int(((qh >> j) & 1u) << 4);
      const int hi = (x[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4);
      y[j] = float(lo) * d + m;
      y[j + kQK5_1 / 2] = float(hi) * d + m;
    }
  }
}

void dequantizeQ8_0(const block_q8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, y += kQK8_0) {
    const float d = fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK8_0; j++) y[j] = float(x[i].qs[j]) * d;
  }
}

void dequantizeQ4_K(const block_q4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = fp16ToFp32(x[i].d);
    const float dmin = fp16ToFp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int pair = 0; pair < 4; pair++, q += 32) {
      uint8_t sc, mn;
      unpackScaleMinK4(2 * pair, x[i].scales, &sc, &mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      unpackScaleMinK4(2 * pair + 1, x[i].scales, &sc, &mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      for (int l = 0; l < 32; l++) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantizeQ5_K(const block_q5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = fp16ToFp32(x[i].d);
    const float dmin = fp16ToFp32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int pair = 0; pair < 4; pair++, ql += 32) {
      uint8_t sc, mn;
      unpackScaleMinK4(2 * pair, x[i].scales, &sc, &mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      unpackScaleMinK4(2 * pair + 1, x[i].scales, &sc, &mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      const uint8_t u1 = uint8_t(1u << (2 * pair)), u2 = uint8_t(2u << (2 * pair));
      for (int l = 0; l < 32; l++) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequantizeQ6_K(const block_q6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = fp16ToFp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

}  // namespace

void dequantizeRow(TensorType type, const void* src, float* dst, int64_t n) {
  const TypeTraits t = typeTraits(type);
  JITLLM_REQUIRE(n >= 0 && n % t.blockElems == 0, "dequantize: ", n, " elements are not whole ", t.name, " blocks of ",
                 t.blockElems);
  const int64_t nb = n / t.blockElems;
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case TensorType::kF16:
      fp16ToFp32Row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case TensorType::kBF16:
      bf16ToFp32Row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case TensorType::kQ4_0:
      return dequantizeQ4_0(static_cast<const block_q4_0*>(src), dst, nb);
    case TensorType::kQ4_1:
      return dequantizeQ4_1(static_cast<const block_q4_1*>(src), dst, nb);
    case TensorType::kQ5_0:
      return dequantizeQ5_0(static_cast<const block_q5_0*>(src), dst, nb);
    case TensorType::kQ5_1:
      return dequantizeQ5_1(static_cast<const block_q5_1*>(src), dst, nb);
    case TensorType::kQ8_0:
      return dequantizeQ8_0(static_cast<const block_q8_0*>(src), dst, nb);
    case TensorType::kQ4_K:
      return dequantizeQ4_K(static_cast<const block_q4_K*>(src), dst, nb);
    case TensorType::kQ5_K:
      return dequantizeQ5_K(static_cast<const block_q5_K*>(src), dst, nb);
    case TensorType::kQ6_K:
      return dequantizeQ6_K(static_cast<const block_q6_K*>(src), dst, nb);
    default:
      break;
  }
  JITLLM_FAIL(kUnimplemented, "dequantize: tensor type ", t.name, " is not supported");
}

}  // namespace jitllm::quant
