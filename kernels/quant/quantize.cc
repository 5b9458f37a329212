#include "kernels/quant/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/half.h"

namespace jitllm::quant {
namespace {

// Below this a group of weights is treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even (the current rounding mode, which nothing in jitllm changes).
int nearestInt(float v) { return int(std::lrintf(v)); }

void quantizeQ4_0(const float* x, block_q4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += kQK4_0) {
    float amax = 0, max = 0;  // the value of largest magnitude, with its sign
    for (int j = 0; j < kQK4_0; j++) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    for (int j = 0; j < kQK4_0 / 2; j++) {
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + kQK4_0 / 2] * id + 8.5f)));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantizeQ4_1(const float* x, block_q4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += kQK4_1) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK4_1; j++) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    y[i].m = fp32ToFp16(min);
    for (int j = 0; j < kQK4_1 / 2; j++) {
      const int q0 = std::min(15, int(int8_t((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, int(int8_t((x[j + kQK4_1 / 2] - min) * id + 0.5f)));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantizeQ5_0(const float* x, block_q5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += kQK5_0) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK5_0; j++) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; j++) {
      const uint32_t q0 = uint32_t(std::min(31, int(int8_t(x[j] * id + 16.5f))));
      const uint32_t q1 = uint32_t(std::min(31, int(int8_t(x[j + kQK5_0 / 2] * id + 16.5f))));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= ((q0 >> 4) & 1u) << j;
      qh |= ((q1 >> 4) & 1u) << (j + kQK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void quantizeQ5_1(const float* x, block_q5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += kQK5_1) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK5_1; j++) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    y[i].m = fp32ToFp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_1 / 2; j++) {
      const uint32_t q0 = uint32_t(uint8_t((x[j] - min) * id + 0.5f));
      const uint32_t q1 = uint32_t(uint8_t((x[j + kQK5_1 / 2] - min) * id + 0.5f));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= ((q0 >> 4) & 1u) << j;
      qh |= ((q1 >> 4) & 1u) << (j + kQK5_1 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof qh);
  }
}

void quantizeQ8_0(const float* x, block_q8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++, x += kQK8_0) {
    float amax = 0;
    for (int j = 0; j < kQK8_0; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = fp32ToFp16(d);
    for (int j = 0; j < kQK8_0; j++) y[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

// Finds scale and min for n values so that x ~= scale * L - min with L in [0, nmax], minimizing
// the weighted squared error: start from the range, then try nsteps+1 stretched scales, refitting
// scale and min by least squares for each rounding and keeping the best (ggml's make_qkx2_quants).
// Returns the scale; *minOut receives the (non-negative) min to subtract.
float fitScaleMin(int n, int nmax, const float* x, const float* w, uint8_t* L, float* minOut, float rmin, float rdelta,
                  int nsteps) {
  float min = x[0], max = x[0];
  float sumW = w[0], sumX = w[0] * x[0];
  for (int i = 1; i < n; i++) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sumW += w[i];
    sumX += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, uint8_t(0));
    *minOut = -min;
    return 0;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float bestError = 0;
  for (int i = 0; i < n; i++) {
    L[i] = uint8_t(std::clamp(nearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    bestError += w[i] * diff * diff;
  }
  uint8_t trial[32];
  for (int step = 0; step <= nsteps; step++) {
    iscale = (rmin + rdelta * float(step) + float(nmax)) / (max - min);
    float sumL = 0, sumL2 = 0, sumXL = 0;
    for (int i = 0; i < n; i++) {
      const int l = std::clamp(nearestInt(iscale * (x[i] - min)), 0, nmax);
      trial[i] = uint8_t(l);
      sumL += w[i] * float(l);
      sumL2 += w[i] * float(l * l);
      sumXL += w[i] * float(l) * x[i];
    }
    const float det = sumW * sumL2 - sumL * sumL;
    if (det <= 0) continue;
    float thisScale = (sumW * sumXL - sumX * sumL) / det;
    float thisMin = (sumL2 * sumX - sumL * sumXL) / det;
    if (thisMin > 0) {
      thisMin = 0;
      thisScale = sumXL / sumL2;
    }
    float error = 0;
    for (int i = 0; i < n; i++) {
      const float diff = thisScale * trial[i] + thisMin - x[i];
      error += w[i] * diff * diff;
    }
    if (error < bestError) {
      std::copy(trial, trial + n, L);
      bestError = error;
      scale = thisScale;
      min = thisMin;
    }
  }
  *minOut = -min;
  return scale;
}

// Symmetric fit x ~= scale * (L - nmax) with L - nmax in [-nmax, nmax-1], weights x^2, trying
// scales around the max-based one (ggml's make_qx_quants, rmse_type 1). L gets L - nmax + nmax.
float fitSymmetricScale(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; i++) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0;
  }
  auto fit = [&](float iscale, float* sumLX, float* sumL2) {
    *sumLX = *sumL2 = 0;
    for (int i = 0; i < n; i++) {
      const int l = std::clamp(nearestInt(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sumLX += w * x[i] * float(l);
      *sumL2 += w * float(l * l);
    }
  };
  auto assign = [&](float iscale) {
    for (int i = 0; i < n; i++) {
      L[i] = int8_t(nmax + std::clamp(nearestInt(iscale * x[i]), -nmax, nmax - 1));
    }
  };
  float bestIscale = -float(nmax) / max;
  float sumLX, sumL2;
  fit(bestIscale, &sumLX, &sumL2);
  float scale = sumL2 > 0 ? sumLX / sumL2 : 0.0f;
  float best = scale * sumLX;
  for (int step = -9; step <= 9; step++) {
    if (step == 0) continue;
    const float iscale = -(float(nmax) + 0.1f * float(step)) / max;
    fit(iscale, &sumLX, &sumL2);
    if (sumL2 > 0 && sumLX * sumLX > best * sumL2) {
      bestIscale = iscale;
      scale = sumLX / sumL2;
      best = scale * sumLX;
    }
  }
  assign(bestIscale);
  return scale;
}

// q4_K and q5_K share everything but the number of bits per quant and where the fifth bit goes.
template <int kBits>
void quantizeKWithMins(const float* x, uint16_t* dOut, uint16_t* dminOut, uint8_t* scalesOut, uint8_t L[kQK_K]) {
  constexpr int kMax = (1 << kBits) - 1;
  float scales[8], mins[8], weights[32];
  float maxScale = 0, maxMin = 0;
  for (int s = 0; s < 8; s++) {
    const float* xs = x + 32 * s;
    float sumX2 = 0;
    for (int l = 0; l < 32; l++) sumX2 += xs[l] * xs[l];
    const float avX = std::sqrt(sumX2 / 32);
    for (int l = 0; l < 32; l++) weights[l] = avX + std::fabs(xs[l]);
    scales[s] = kBits == 4 ? fitScaleMin(32, kMax, xs, weights, L + 32 * s, &mins[s], -1.0f, 0.1f, 20)
                           : fitScaleMin(32, kMax, xs, weights, L + 32 * s, &mins[s], -0.5f, 0.1f, 15);
    maxScale = std::max(maxScale, scales[s]);
    maxMin = std::max(maxMin, mins[s]);
  }
  const float invScale = maxScale > 0 ? 63.0f / maxScale : 0.0f;
  const float invMin = maxMin > 0 ? 63.0f / maxMin : 0.0f;
  std::memset(scalesOut, 0, kKScaleBytes);
  for (int s = 0; s < 8; s++) {
    const uint8_t ls = uint8_t(std::min(63, nearestInt(invScale * scales[s])));
    const uint8_t lm = uint8_t(std::min(63, nearestInt(invMin * mins[s])));
    packScaleMinK4(s, ls, lm, scalesOut);
  }
  *dOut = fp32ToFp16(maxScale / 63.0f);
  *dminOut = fp32ToFp16(maxMin / 63.0f);
  // Requantize against the scales as they will be decoded (6-bit, fp16), not the ideal ones.
  const float d = fp16ToFp32(*dOut), dmin = fp16ToFp32(*dminOut);
  for (int s = 0; s < 8; s++) {
    uint8_t sc, mn;
    unpackScaleMinK4(s, scalesOut, &sc, &mn);
    const float ds = d * float(sc);
    if (ds == 0) continue;
    const float dm = dmin * float(mn);
    for (int l = 0; l < 32; l++) {
      L[32 * s + l] = uint8_t(std::clamp(nearestInt((x[32 * s + l] + dm) / ds), 0, kMax));
    }
  }
}

void quantizeQ4_K(const float* x, block_q4_K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; i++, x += kQK_K) {
    quantizeKWithMins<4>(x, &y[i].d, &y[i].dmin, y[i].scales, L);
    for (int pair = 0; pair < 4; pair++) {
      for (int l = 0; l < 32; l++) {
        y[i].qs[32 * pair + l] = uint8_t(L[64 * pair + l] | (L[64 * pair + 32 + l] << 4));
      }
    }
  }
}

void quantizeQ5_K(const float* x, block_q5_K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; i++, x += kQK_K) {
    quantizeKWithMins<5>(x, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int pair = 0; pair < 4; pair++) {
      for (int l = 0; l < 32; l++) {
        const int lo = L[64 * pair + l], hi = L[64 * pair + 32 + l];
        y[i].qs[32 * pair + l] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
        y[i].qh[l] |= uint8_t(((lo >> 4) << (2 * pair)) | ((hi >> 4) << (2 * pair + 1)));
      }
    }
  }
}

void quantizeQ6_K(const float* x, block_q6_K* y, int64_t nb) {
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < nb; i++, x += kQK_K) {
    float maxScale = 0, maxAbsScale = 0;
    for (int s = 0; s < kQK_K / 16; s++) {
      scales[s] = fitSymmetricScale(16, 32, x + 16 * s, L + 16 * s);
      if (std::fabs(scales[s]) > maxAbsScale) {
        maxAbsScale = std::fabs(scales[s]);
        maxScale = scales[s];
      }
    }
    std::memset(&y[i], 0, sizeof y[i]);
    if (maxAbsScale < kGroupMaxEps) continue;  // all zero: d = 0 and zero quants decode to 0
    const float iscale = -128.0f / maxScale;
    y[i].d = fp32ToFp16(1 / iscale);
    for (int s = 0; s < kQK_K / 16; s++) {
      y[i].scales[s] = int8_t(std::min(127, nearestInt(iscale * scales[s])));
    }
    const float d = fp16ToFp32(y[i].d);
    for (int s = 0; s < kQK_K / 16; s++) {
      const float ds = d * float(y[i].scales[s]);
      if (ds == 0) {
        std::fill(L + 16 * s, L + 16 * s + 16, int8_t(32));
        continue;
      }
      for (int l = 0; l < 16; l++) {
        L[16 * s + l] = int8_t(32 + std::clamp(nearestInt(x[16 * s + l] / ds), -32, 31));
      }
    }
    for (int half = 0; half < 2; half++) {
      uint8_t* ql = y[i].ql + 64 * half;
      uint8_t* qh = y[i].qh + 32 * half;
      const int8_t* Lh = L + 128 * half;
      for (int l = 0; l < 32; l++) {
        const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        ql[l] = uint8_t((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = uint8_t((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace

void quantizeRow(TensorType type, const float* src, void* dst, int64_t n) {
  const TypeTraits t = typeTraits(type);
  JITLLM_REQUIRE(n >= 0 && n % t.blockElems == 0, "quantize: ", n, " elements are not whole ", t.name, " blocks of ",
                 t.blockElems);
  const int64_t nb = n / t.blockElems;
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case TensorType::kF16:
      fp32ToFp16Row(src, static_cast<uint16_t*>(dst), n);
      return;
    case TensorType::kBF16:
      fp32ToBf16Row(src, static_cast<uint16_t*>(dst), n);
      return;
    case TensorType::kQ4_0:
      return quantizeQ4_0(src, static_cast<block_q4_0*>(dst), nb);
    case TensorType::kQ4_1:
      return quantizeQ4_1(src, static_cast<block_q4_1*>(dst), nb);
    case TensorType::kQ5_0:
      return quantizeQ5_0(src, static_cast<block_q5_0*>(dst), nb);
    case TensorType::kQ5_1:
      return quantizeQ5_1(src, static_cast<block_q5_1*>(dst), nb);
    case TensorType::kQ8_0:
      return quantizeQ8_0(src, static_cast<block_q8_0*>(dst), nb);
    case TensorType::kQ4_K:
      return quantizeQ4_K(src, static_cast<block_q4_K*>(dst), nb);
    case TensorType::kQ5_K:
      return quantizeQ5_K(src, static_cast<block_q5_K*>(dst), nb);
    case TensorType::kQ6_K:
      return quantizeQ6_K(src, static_cast<block_q6_K*>(dst), nb);
    default:
      break;
  }
  JITLLM_FAIL(kUnimplemented, "quantize: tensor type ", t.name, " is not supported");
}

size_t quantizedBytes(TensorType type, int64_t rows, int64_t cols) {
  const std::optional<size_t> row = rowBytes(type, cols);
  JITLLM_REQUIRE(row.has_value() && rows >= 0, "a ", rows, " x ", cols, " matrix is not whole ", typeName(type),
                 " blocks");
  return size_t(rows) * *row;
}

}  // namespace jitllm::quant
