// The first half of sampling on the device (kernels/candidates.h): each row of logits narrowed to
// its best `count` candidates after the repetition penalty, so a step reads back a few ids and
// values per session instead of a whole row (128k floats for Llama 3). The host's
// selectCandidates() bit for bit: the same ids and values in its order - higher logit first, -0
// equal to +0, then the lower id, NaN after every number. (The CUDA kernel, sampling.cuh, does the
// same in the same way.)
//
// One workgroup of 256 invocations per row. The order is a 32-bit key per logit (larger key =
// earlier; ties broken by the lower id), so the row's count-th key is found by a radix select
// over the keys' bytes, highest first: four histogram passes over the row. The candidates are
// every logit above that key and the lowest-id ones equal to it, collected in id order by
// workgroup prefix sums (no atomic decides an order), then sorted in shared memory.
// Defines: none.
#include "common.glsl"

#define WG 256u
#define MAX_SELECT 1024u  // engine/runtime/sampler.h: kMaxCandidates

layout(local_size_x = 256) in;

layout(push_constant) uniform Params {
  uint64_t logits;        // rows x vocab floats (the penalty is applied in place)
  uint64_t counts;        // int32 per row: candidates wanted (1 .. MAX_SELECT)
  uint64_t penaltyStart;  // int32 per row + 1: row r's penalised ids are [start[r], start[r + 1])
  uint64_t penaltyIds;    // int32, distinct within a row
  uint64_t penalties;     // float per row (1: none)
  uint64_t outIds;        // int32, row r's candidates from r * stride on
  uint64_t outValues;     // float, likewise
  uint vocab;
  uint stride;
} p;

shared uint hist[256];
shared uint scanBuf[256];
shared uint keys[MAX_SELECT];
shared int ids[MAX_SELECT];
shared uint chosenPrefix, chosenAbove;

// The order key of a logit: the float's bits made to compare as unsigned integers in the order of
// the values, -0 folded into +0, NaN below everything.
uint orderKey(float v) {
  if (isnan(v)) return 0u;
  if (v == 0.0) v = 0.0;
  const uint b = floatBitsToUint(v);
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// Whether (ka, ia) comes before (kb, ib).
bool earlier(uint ka, int ia, uint kb, int ib) { return ka > kb || (ka == kb && ia < ib); }

// A workgroup-wide exclusive prefix sum of `x` in invocation order; `total` gets the sum. Every
// invocation must call it (barriers inside).
uint workgroupPrefix(uint x, out uint total) {
  const uint t = gl_LocalInvocationID.x;
  scanBuf[t] = x;
  barrier();
  for (uint d = 1u; d < WG; d <<= 1) {
    const uint y = t >= d ? scanBuf[t - d] : 0u;
    barrier();
    scanBuf[t] += y;
    barrier();
  }
  const uint inclusive = scanBuf[t];
  total = scanBuf[WG - 1u];
  barrier();  // scanBuf is reused by the next call
  return inclusive - x;
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.x;
  F32Buf x = F32Buf(p.logits + uint64_t(row) * p.vocab * 4u);
  const uint count = min(uint(I32Buf(p.counts).v[row]), p.vocab);
  I32Buf outIds = I32Buf(p.outIds);
  F32Buf outValues = F32Buf(p.outValues);
  const uint outAt = row * p.stride;

  // The repetition penalty, in place (the ids are distinct: no two invocations write one logit).
  const float penalty = F32Buf(p.penalties).v[row];
  if (penalty != 1.0) {
    const int first = I32Buf(p.penaltyStart).v[row], last = I32Buf(p.penaltyStart).v[row + 1u];
    for (int i = first + int(t); i < last; i += int(WG)) {
      const int id = I32Buf(p.penaltyIds).v[i];
      if (id >= 0 && uint(id) < p.vocab) {
        const float l = x.v[id];
        x.v[id] = l > 0.0 ? l / penalty : l * penalty;
      }
    }
  }
  memoryBarrierBuffer();
  barrier();

  if (count == 1u) {
    // The argmax: each invocation's best over its stride, then the workgroup's in a fixed tree.
    uint bestKey = 0u;
    int bestId = 0x7fffffff;
    for (uint i = t; i < p.vocab; i += WG) {
      const uint k = orderKey(x.v[i]);
      if (earlier(k, int(i), bestKey, bestId)) {
        bestKey = k;
        bestId = int(i);
      }
    }
    keys[t] = bestKey;
    ids[t] = bestId;
    barrier();
    for (uint half_ = WG / 2u; half_ > 0u; half_ >>= 1) {
      if (t < half_ && earlier(keys[t + half_], ids[t + half_], keys[t], ids[t])) {
        keys[t] = keys[t + half_];
        ids[t] = ids[t + half_];
      }
      barrier();
    }
    if (t == 0u) {
      outIds.v[outAt] = ids[0];
      outValues.v[outAt] = x.v[ids[0]];
    }
    return;
  }

  // Radix select: the count-th largest key, a byte at a time from the top. `above`: how many keys
  // are known to be larger than every key with the chosen prefix.
  uint prefix = 0u, mask = 0u, above = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[t] = 0u;
    barrier();
    for (uint i = t; i < p.vocab; i += WG) {
      const uint k = orderKey(x.v[i]);
      if ((k & mask) == prefix) atomicAdd(hist[(k >> shift) & 255u], 1u);
    }
    barrier();
    if (t == 0u) {
      uint seen = above;
      int bin = 255;
      for (; bin > 0; bin--) {
        if (seen + hist[bin] >= count) break;
        seen += hist[bin];
      }
      chosenPrefix = prefix | (uint(bin) << shift);
      chosenAbove = seen;
    }
    barrier();
    prefix = chosenPrefix;
    above = chosenAbove;
    mask |= 255u << shift;
    barrier();
  }
  // `prefix` is the count-th key; `above` keys are larger; the rest come from the ties, lowest
  // ids first. Collected in id order: the larger ones into [0, above), the ties after.
  const uint ties = count - above;
  uint placedAbove = 0u, placedTies = 0u;
  for (uint base = 0u; base < p.vocab; base += WG) {
    const uint i = base + t;
    const uint k = i < p.vocab ? orderKey(x.v[i]) : 0u;
    const bool isAbove = i < p.vocab && k > prefix, isTie = i < p.vocab && k == prefix;
    uint totalAbove, totalTies;
    const uint atAbove = placedAbove + workgroupPrefix(isAbove ? 1u : 0u, totalAbove);
    const uint atTie = placedTies + workgroupPrefix(isTie ? 1u : 0u, totalTies);
    if (isAbove) {
      keys[atAbove] = k;
      ids[atAbove] = int(i);
    }
    if (isTie && atTie < ties) {
      keys[above + atTie] = k;
      ids[above + atTie] = int(i);
    }
    placedAbove += totalAbove;
    placedTies += totalTies;
  }
  barrier();

  // Sorted in the candidate order: a bitonic sort over the next power of two, padded with entries
  // that come after everything.
  uint n = 1u;
  while (n < count) n <<= 1;
  for (uint i = count + t; i < n; i += WG) {
    keys[i] = 0u;
    ids[i] = 0x7fffffff;
  }
  barrier();
  for (uint size = 2u; size <= n; size <<= 1) {
    for (uint half_ = size >> 1; half_ > 0u; half_ >>= 1) {
      for (uint i = t; i < n; i += WG) {
        const uint j = i ^ half_;
        if (j > i) {
          const bool ascending = (i & size) == 0u;  // here: "earlier first"
          const bool swap =
              ascending ? earlier(keys[j], ids[j], keys[i], ids[i]) : earlier(keys[i], ids[i], keys[j], ids[j]);
          if (swap) {
            const uint tk = keys[i];
            keys[i] = keys[j];
            keys[j] = tk;
            const int ti = ids[i];
            ids[i] = ids[j];
            ids[j] = ti;
          }
        }
      }
      barrier();
    }
  }
  for (uint i = t; i < count; i += WG) {
    outIds.v[outAt + i] = ids[i];
    outValues.v[outAt + i] = x.v[ids[i]];
  }
}
