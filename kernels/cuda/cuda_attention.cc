#include "kernels/cuda/cuda_attention.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "base/error.h"

namespace jitllm::cuda {

CudaAttention::CudaAttention(const CudaContext& ctx, CudaMemory& memory, CudaOpQueue& queue, CudaKernelSet& kernels,
                             const ResolvedCudaSettings& settings)
    : ctx_(ctx),
      memory_(memory),
      queue_(queue),
      kernels_(kernels),
      splitPast_(settings.attentionSplit),
      attentionRowTokens_(settings.attentionRowTokens),
      perHead_(settings.attentionPerHead),
      spanBlocks_(std::max(0, settings.attentionSpanBlocks.value_or(2 * ctx.multiprocessors))) {}

int CudaAttention::rowTokens(int headDim) const {
  return attentionRowTokens_ >= 0 ? attentionRowTokens_ : defaultAttentionRowTokens(headDim);
}

void CudaAttention::attend(const float* q, float* out, const AttentionBatch& batch) {
  queue_.setOpTokens(batch.tokens);
  if (batch.tokens == 0) return;
  const int group = check(q, out, batch);
  ctx_.makeCurrent();
  const PageTables pages = pageTables(batch);
  const Layout l = layout(batch, group, pages.maxPositions);
  if (l.split) {
    // The scratch grows before anything is staged (growing synchronises, and the staging ring
    // starts over after that).
    const KvLayout& kv = batch.kv;
    const size_t partialFloats = size_t(l.blockGroup) * size_t(kv.headDim + 2);
    memory_.grow(partials_,
                 size_t(batch.tokens) * size_t(l.headBlocks) * size_t(l.maxChunks) * partialFloats * sizeof(float),
                 "attention partials");
    // attention_split's chunk counters start at zero, and each launch leaves them at zero.
    if (memory_.grow(chunkCounters_, size_t(batch.tokens) * size_t(l.headBlocks) * sizeof(uint32_t),
                     "attention chunk counters")) {
      ctx_.check(ctx_.api.cuMemsetD32Async(chunkCounters_.ptr(), 0, chunkCounters_.bytes() / 4, ctx_.stream),
                 "cuMemsetD32Async");
    }
  }
  const Args a = stage(q, out, batch, pages, l);
  if (l.blockGroup != group) perHeadAttentions_++;
  if (l.split) {
    launchSplit(out, batch, l, a);
    return;
  }
  if (launchRows(out, batch, pages, l, a)) return;
  // (Looked up only here: attention_rows at 16 tokens a block comes from another module, and this
  // one's compile would be wasted on it.)
  const KvLayout& kv = batch.kv;
  const CUfunction f = kernels_.attention(kv.headDim, l.blockGroup, kv.pageTokens, kv.precision == KvPrecision::kF16);
  const unsigned threads = attentionThreads(kv.headDim);
  offer("attention", out, batch, l, [=](CUdeviceptr xq, uint64_t stride) {
    return CudaOpQueue::makeLaunch(f, a.tokens, a.gridY, threads, 0, a.q, a.out, a.heads, a.kvHeads, a.scale,
                                   a.positions, a.offsets, a.pages, xq, stride, a.window);
  });
}

int CudaAttention::check(const float* q, const float* out, const AttentionBatch& batch) const {
  const KvLayout& kv = batch.kv;
  JITLLM_REQUIRE(kv.kvHeads > 0 && batch.heads % kv.kvHeads == 0 && kv.headDim > 0 && kv.headDim <= 256 &&
                     kv.pageTokens > 0 && batch.tokens < (int64_t(1) << 31),
                 ctx_.id, ": attention: ", batch.heads, " heads over ", kv.kvHeads, " KV heads of dim ", kv.headDim,
                 " is not supported");
  const int group = batch.heads / kv.kvHeads;
  // The kernel keeps one KV head's group of queries in shared memory beside its K/V tiles.
  JITLLM_REQUIRE(group * kv.headDim <= 2048, ctx_.id, ": attention: ", group, " query heads of dim ", kv.headDim,
                 " per KV head is not supported");
  const size_t elems = size_t(batch.tokens) * size_t(batch.heads) * size_t(kv.headDim);
  memory_.requireOwned(q, elems * 4, "attention queries");
  memory_.requireOwned(out, elems * 4, "attention output");
  return group;
}

CudaAttention::PageTables CudaAttention::pageTables(const AttentionBatch& batch) const {
  // With a sliding window the entries of pages before a token's window may be null (freed): they
  // are copied as they are, and no kernel reads them (attention.cuh starts every token's positions
  // at its window).
  const int window = std::max(0, batch.window);
  const int64_t pageTokens = batch.kv.pageTokens;
  PageTables p;
  p.tableOf.resize(static_cast<size_t>(batch.tokens));
  for (int64_t t = 0; t < batch.tokens; t++) {
    JITLLM_REQUIRE(batch.positions[t] >= 0, ctx_.id, ": attention: negative position");
    const int seen = batch.positions[t] + 1;
    p.maxPositions = std::max(p.maxPositions, window > 0 ? std::min(seen, window) : seen);
    p.slid = p.slid || (window > 0 && seen > window);
    const size_t need = size_t(batch.positions[t]) / size_t(pageTokens) + 1;
    size_t i = 0;
    while (i < p.tables.size() && p.tables[i].first != batch.pageTables[t]) i++;
    if (i == p.tables.size()) p.tables.push_back({batch.pageTables[t], 0});
    p.tables[i].second = std::max(p.tables[i].second, need);
    p.tableOf[size_t(t)] = int32_t(i);
  }
  p.tableStart.resize(p.tables.size());
  for (size_t i = 0; i < p.tables.size(); i++) {
    p.tableStart[i] = int32_t(p.totalPages);
    p.totalPages += p.tables[i].second;
  }
  return p;
}

CudaAttention::Layout CudaAttention::layout(const AttentionBatch& batch, int group, int maxPositions) const {
  // Few blocks (decode: a handful of KV heads per token): a block per query head instead of per
  // KV head (unless that would cost the fused quantization of the output, which needs a block's
  // columns in whole 32-column blocks), and over a long context each 64-position chunk its own
  // block, then the chunks folded in order - the same bits as one block per KV head
  // (attention.cuh). The chunk count is rounded up to 8 so a decode step's queue (and its graph)
  // stays the same for 512 positions at a time.
  const KvLayout& kv = batch.kv;
  Layout l;
  l.fewBlocks = batch.tokens * kv.kvHeads < ctx_.multiprocessors;
  const bool perHead = perHead_ && l.fewBlocks && (kv.headDim % 32 == 0 || (group * kv.headDim) % 32 != 0);
  l.blockGroup = perHead ? 1 : group;
  l.headBlocks = batch.heads / l.blockGroup;
  l.maxChunks = (maxPositions + 8 * kAttentionChunk - 1) / (8 * kAttentionChunk) * 8;
  l.split = splitPast_ > 0 && l.fewBlocks && maxPositions > splitPast_ && int64_t(l.headBlocks) * l.maxChunks < 65536;
  return l;
}

CudaAttention::Args CudaAttention::stage(const float* q, float* out, const AttentionBatch& batch, const PageTables& p,
                                         const Layout& l) {
  const size_t intBytes = roundUp(size_t(batch.tokens) * sizeof(int32_t), 16);
  const CudaOpQueue::Staged s = queue_.stage(2 * intBytes + p.totalPages * sizeof(uint64_t));
  auto* positions = reinterpret_cast<int32_t*>(s.host);
  auto* offsets = reinterpret_cast<int32_t*>(s.host + intBytes);
  auto* pages = reinterpret_cast<uint64_t*>(s.host + 2 * intBytes);
  std::memcpy(positions, batch.positions, size_t(batch.tokens) * sizeof(int32_t));
  for (int64_t t = 0; t < batch.tokens; t++) offsets[t] = p.tableStart[size_t(p.tableOf[size_t(t)])];
  for (size_t i = 0; i < p.tables.size(); i++) {
    for (size_t k = 0; k < p.tables[i].second; k++) {
      pages[size_t(p.tableStart[i]) + k] = uint64_t(reinterpret_cast<uintptr_t>(p.tables[i].first[k]));
    }
  }
  queue_.commit(s);
  Args a;
  a.q = dptr(q);
  a.out = dptr(out);
  a.positions = s.device;
  a.offsets = s.device + intBytes;
  a.pages = s.device + 2 * intBytes;
  a.heads = batch.heads;
  a.kvHeads = batch.kv.kvHeads;
  a.scale = batch.scale;
  a.window = std::max(0, batch.window);
  a.tokens = unsigned(batch.tokens);
  a.gridY = unsigned(l.headBlocks);
  return a;
}

void CudaAttention::offer(const char* name, const float* out, const AttentionBatch& batch, const Layout& l,
                          const MakeLaunch& make) {
  // The last kernel writes the output, and its integer form too when a product asks.
  const int64_t outElems = batch.tokens * batch.heads * batch.kv.headDim;
  const bool fusable = (l.blockGroup * batch.kv.headDim) % 32 == 0;
  const int cols = batch.heads * batch.kv.headDim;
  const Command c = make(0, 0);
  queue_.offerFusion(queue_.enqueue(name, c), c, out, outElems,
                     [=](CUdeviceptr xq, uint64_t stride, int k) -> std::optional<Command> {
                       if (!fusable || k != cols) return std::nullopt;
                       return make(xq, stride);
                     });
}

void CudaAttention::launchSplit(const float* out, const AttentionBatch& batch, const Layout& l, const Args& a) {
  const KvLayout& kv = batch.kv;
  const CUfunction sf =
      kernels_.attentionSplit(kv.headDim, l.blockGroup, kv.pageTokens, kv.precision == KvPrecision::kF16);
  const CUdeviceptr pp = partials_.ptr(), counters = chunkCounters_.ptr();
  const unsigned threads = attentionThreads(kv.headDim);
  const int span = kernels_.attentionSpan();
  if (span > 0) {
    // A block takes a whole span (maxChunks is a multiple of 8, so of the span) where that still
    // makes enough blocks to keep every multiprocessor busy (spanBlocks_), else a chunk, the fold
    // then going in spans; both give the bits of the one-block kernel (attention.cuh:
    // attention_spans).
    const int64_t spanUnits = int64_t(batch.tokens) * l.headBlocks * (l.maxChunks / span);
    const int perBlock = spanUnits >= spanBlocks_ ? span : 1;
    const int maxUnits = l.maxChunks / perBlock;
    const unsigned unitsY = a.gridY * unsigned(maxUnits);
    offer("attention_spans", out, batch, l, [=](CUdeviceptr xq, uint64_t stride) {
      return CudaOpQueue::makeLaunch(sf, a.tokens, unitsY, threads, 0, a.q, pp, counters, a.out, a.heads, a.kvHeads,
                                     a.scale, a.positions, a.offsets, a.pages, maxUnits, perBlock, xq, stride,
                                     a.window);
    });
    return;
  }
  const unsigned splitY = a.gridY * unsigned(l.maxChunks);
  const int maxChunks = l.maxChunks;
  offer("attention_split", out, batch, l, [=](CUdeviceptr xq, uint64_t stride) {
    return CudaOpQueue::makeLaunch(sf, a.tokens, splitY, threads, 0, a.q, pp, counters, a.out, a.heads, a.kvHeads,
                                   a.scale, a.positions, a.offsets, a.pages, maxChunks, xq, stride, a.window);
  });
}

bool CudaAttention::launchRows(const float* out, const AttentionBatch& batch, const PageTables& pages, const Layout& l,
                               const Args& a) {
  // Prefill (many blocks, one session): blocks of several tokens over all query heads of a KV
  // head, each K/V tile serving them all - the same bits (attention.cuh: attention_rows). Not once
  // a window has slid: its rows would start at different positions (the one-token kernel takes
  // those batches, with the same bits).
  const KvLayout& kv = batch.kv;
  const int group = batch.heads / kv.kvHeads;
  const int perBlock = rowTokens(kv.headDim);
  const bool rows = perBlock > 0 && !l.fewBlocks && !pages.slid && pages.tables.size() == 1 && l.blockGroup == group &&
                    attentionRowsSupported(kv.headDim);
  const CUfunction rf =
      rows ? kernels_.attentionRows(kv.headDim, group, kv.pageTokens, kv.precision == KvPrecision::kF16, perBlock)
           : nullptr;
  if (!rf) return false;
  rowAttentions_++;
  const int tokenCount = int(batch.tokens);
  const unsigned gridX = unsigned((batch.tokens + perBlock - 1) / perBlock), kvGrid = unsigned(a.kvHeads);
  const size_t bytes = attentionRowsSharedBytes(kv.headDim, group, perBlock);
  offer("attention_rows", out, batch, l, [=](CUdeviceptr xq, uint64_t stride) {
    return CudaOpQueue::makeLaunch(rf, gridX, kvGrid, unsigned(kAttentionRowThreads), bytes, a.q, a.out, a.heads,
                                   a.kvHeads, a.scale, a.positions, a.offsets, a.pages, xq, stride, tokenCount);
  });
  return true;
}

void CudaAttention::wantModules(const KernelWorkload::Attention& a, int64_t maxTokens,
                                std::vector<ModuleSpec>& out) const {
  const KvLayout& kv = a.kv;
  if (kv.kvHeads <= 0 || a.heads % kv.kvHeads != 0) return;
  const int group = a.heads / kv.kvHeads;
  const bool f16 = kv.precision == KvPrecision::kF16;
  const int span = kernels_.attentionSpan();
  out.push_back(attentionModule(kv.headDim, group, kv.pageTokens, f16, span));
  // Decode (few blocks): a block per query head.
  if (perHead_ && kv.kvHeads < ctx_.multiprocessors && (kv.headDim % 32 == 0 || (group * kv.headDim) % 32 != 0))
    out.push_back(attentionModule(kv.headDim, 1, kv.pageTokens, f16, span));
  // Prefill of one session (many blocks): attention_rows.
  const int perBlock = rowTokens(kv.headDim);
  if (perBlock > 0 && attentionRowsSupported(kv.headDim) && maxTokens * kv.kvHeads >= ctx_.multiprocessors &&
      attentionRowsSharedBytes(kv.headDim, group, perBlock) <= size_t(ctx_.maxSharedOptIn))
    out.push_back(attentionModule(kv.headDim, group, kv.pageTokens, f16, span, perBlock));
}

}  // namespace jitllm::cuda
