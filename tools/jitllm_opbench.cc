// jitllm-opbench: the time of one op on one device, alone - for a kernel's A/B where a whole
// model's step is too noisy to show it (attention is a tenth of a decode step: a 10 % change in it
// is 1 % of tok/s, inside the run-to-run noise).
//
// Each measurement queues the op REPS times back to back and then reads 4 bytes back, which waits
// for all of them: the figure is wall-clock time per call with the device's queue full, as inside
// a model's step (on CUDA the calls go out as one graph, as a step's do; secondsPerCall). The
// calls take turns over --copies copies of the op's inputs (weights, KV pages), by default as many
// as make 256 MiB: in a model each layer reads its own, so they come from memory, not from a cache
// that one copy would fit in (an H200's L2 holds 50 MB: a 1B layer's KV after 4096 tokens, 17 MB,
// would stay there). Inputs are random, fixed by --seed. The last lines, one per setting, are what
// scripts read:
//   attention cuda:0 heads 32/8 dim 64 kv f32 tokens 1 context 4096: 31.20 us a call (100 calls, 16 copies)
//   matmul cuda:0 q4_K 8192x2048 tokens 1: 9.80 us a call, 1.926 TB/s of weights (112 calls, 28 copies)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/devices/builtin_backends.h"
#include "kernels/device.h"
#include "kernels/quant/quantize.h"
#include "kernels/quant/tensor_type.h"
#include "tools/command_line.h"

using namespace jitllm;

namespace {

constexpr const char* kUsage = R"(usage: jitllm-opbench OP [options] [--devices SPEC] [-r REPS] [--seed N]
  OP attention  decode attention over paged KV:
       --heads H --kv-heads K --head-dim D   the model's shape (default 32 8 64: Llama-3.2-1B)
       --context N[,N...]                    positions attended to (default 128,1024,4096)
       --tokens T                            query tokens a call, each its own session (default 1)
       --kv f32|f16                          KV precision (default f32)
  OP matmul     a product y = W x:
       --type T --rows R --cols C            W's type (q4_K, q6_K, q8_0, f16, ...) and shape
                                             (default q4_K 8192 2048: the 1B's gate)
       --tokens T                            columns of x (default 1: decode)
  --devices S  the device (default cpu:0; e.g. cuda:0, vulkan:0)
  -t THREADS   CPU threads (default: all cores)
  --copies N   copies of the inputs the calls take turns over (default: as many as make 256 MiB,
               at most 64)
  -r REPS      calls timed per setting, after two untimed rounds as many (default 100; rounded up
               to a multiple of the copies)
  --seed N     the random inputs' seed (default 1)
)";

std::vector<float> randomFloats(size_t n, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::unique_ptr<DeviceBuffer> upload(Device& device, const std::vector<float>& v) {
  auto b = device.allocate(v.size() * sizeof(float));
  device.copyFromHost(b->data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Seconds a call of `op` in a round of `reps` calls and a read-back of `probe` (which waits for
// them), after two such rounds untimed: the first compiles the kernels, and a queue the device
// has seen before runs as a graph (the CUDA backend captures a repeated queue, as a model's
// decode steps repeat), so the timed round is the GPU's time for the calls, not the host's.
// op(i) makes call i of a round; the rounds are alike, call for call.
template <typename Op>
double secondsPerCall(Device& device, int reps, const uint8_t* probe, Op op) {
  float sink = 0;
  const auto round = [&] {
    for (int i = 0; i < reps; i++) op(i);
    device.copyToHost(&sink, probe, sizeof(sink));
  };
  round();
  round();
  const auto start = std::chrono::steady_clock::now();
  round();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

std::vector<int> parseList(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > (1 << 24)) {
      throw tools::UsageError(flag + ": '" + item + "' is not a positive number");
    }
    out.push_back(int(v));
    at = comma + 1;
  }
  return out;
}

// Copies of an op's inputs of `bytes` each: `asked`, or (0) as many as make 256 MiB, at most 64.
int copiesFor(int asked, size_t bytes) {
  constexpr size_t kColdBytes = size_t(256) << 20;
  if (asked > 0) return asked;
  return int(std::clamp<size_t>((kColdBytes + bytes - 1) / std::max<size_t>(bytes, 1), 1, 64));
}

// reps rounded up to a whole number of turns over `copies`.
int wholeTurns(int reps, int copies) { return (reps + copies - 1) / copies * copies; }

struct AttentionShape {
  int heads = 32, kvHeads = 8, headDim = 64, tokens = 1, copies = 0;
  KvPrecision precision = KvPrecision::kF32;
  std::vector<int> contexts = {128, 1024, 4096};
};

void benchAttention(Device& device, const AttentionShape& s, int reps, std::mt19937& rng) {
  if (s.heads % s.kvHeads != 0) throw tools::UsageError("--heads must be a multiple of --kv-heads");
  const KvLayout layout{16, s.kvHeads, s.headDim, s.precision};
  const int longest = *std::max_element(s.contexts.begin(), s.contexts.end());
  // Each token of each copy its own session of `longest` positions, all pages in one allocation;
  // tables[c * tokens + t] is copy c's token t's.
  const size_t pagesPerSession = size_t(longest + layout.pageTokens - 1) / size_t(layout.pageTokens);
  const int copies = copiesFor(s.copies, size_t(s.tokens) * pagesPerSession * layout.pageBytes());
  reps = wholeTurns(reps, copies);
  auto pages = device.allocate(size_t(copies) * size_t(s.tokens) * pagesPerSession * layout.pageBytes());
  std::vector<std::vector<const uint8_t*>> tables(size_t(copies) * size_t(s.tokens));
  const int64_t width = int64_t(s.kvHeads) * s.headDim;
  constexpr int64_t kStoreBatch = 512;
  const auto k = upload(device, randomFloats(size_t(kStoreBatch * width), rng, 1.0f));
  const auto v = upload(device, randomFloats(size_t(kStoreBatch * width), rng, 1.0f));
  for (size_t t = 0; t < tables.size(); t++) {
    for (size_t p = 0; p < pagesPerSession; p++) {
      tables[t].push_back(pages->data() + (t * pagesPerSession + p) * layout.pageBytes());
    }
    for (int64_t first = 0; first < longest; first += kStoreBatch) {
      const int64_t n = std::min<int64_t>(kStoreBatch, longest - first);
      std::vector<KvSlot> slots;
      for (int64_t i = first; i < first + n; i++) {
        slots.push_back({const_cast<uint8_t*>(tables[t][size_t(i / layout.pageTokens)]), int(i % layout.pageTokens)});
      }
      device.kvStore(reinterpret_cast<const float*>(k->data()), reinterpret_cast<const float*>(v->data()), n,
                     slots.data(), layout);
    }
  }
  const auto q = upload(device, randomFloats(size_t(s.tokens) * size_t(s.heads) * size_t(s.headDim), rng, 0.3f));
  auto out = device.allocate(size_t(s.tokens) * size_t(s.heads) * size_t(s.headDim) * sizeof(float));
  std::vector<const uint8_t* const*> tablePtrs;
  for (const auto& t : tables) tablePtrs.push_back(t.data());
  for (int context : s.contexts) {
    const std::vector<int32_t> positions(size_t(s.tokens), context - 1);
    AttentionBatch batch;
    batch.tokens = s.tokens;
    batch.heads = s.heads;
    batch.kv = layout;
    batch.scale = float(1.0 / std::sqrt(double(s.headDim)));
    batch.positions = positions.data();
    const double seconds = secondsPerCall(device, reps, out->data(), [&](int call) {
      batch.pageTables = tablePtrs.data() + size_t(call % copies) * size_t(s.tokens);
      device.attention(reinterpret_cast<const float*>(q->data()), reinterpret_cast<float*>(out->data()), batch);
    });
    std::printf("attention %s heads %d/%d dim %d kv %s tokens %d context %d: %.2f us a call (%d calls, %d cop%s)\n",
                device.info().id.str().c_str(), s.heads, s.kvHeads, s.headDim,
                s.precision == KvPrecision::kF16 ? "f16" : "f32", s.tokens, context, seconds * 1e6, reps, copies,
                copies == 1 ? "y" : "ies");
  }
}

struct MatmulShape {
  quant::TensorType type = quant::TensorType::kQ4_K;
  int64_t rows = 8192, cols = 2048;
  int tokens = 1, copies = 0;
};

void benchMatmul(Device& device, const MatmulShape& s, int reps, std::mt19937& rng) {
  const auto stride = quant::rowBytes(s.type, s.cols);
  if (!stride) {
    throw tools::UsageError("--cols " + std::to_string(s.cols) + " is not a whole number of " +
                            std::string(quant::typeName(s.type)) + " blocks");
  }
  std::vector<uint8_t> bytes(*stride * size_t(s.rows));
  for (int64_t r = 0; r < s.rows; r++) {
    const auto row = randomFloats(size_t(s.cols), rng, 0.05f);
    quant::quantizeRow(s.type, row.data(), bytes.data() + size_t(r) * *stride, s.cols);
  }
  const int copies = copiesFor(s.copies, bytes.size());
  reps = wholeTurns(reps, copies);
  // Each copy its own host bytes: the CPU adopts them in place, so one host copy adopted many
  // times would be one copy. The last copy is the quantized bytes themselves.
  const size_t matrixBytes = bytes.size();
  std::vector<std::vector<uint8_t>> hostCopies(size_t(copies - 1), bytes);
  hostCopies.push_back(std::move(bytes));
  std::vector<std::unique_ptr<DeviceBuffer>> weights;
  std::vector<WeightRef> refs;
  for (const auto& host : hostCopies) {
    weights.push_back(device.adoptHostBytes(host.data(), host.size()));
    refs.push_back({s.type, weights.back()->data(), s.rows, s.cols, *stride});
  }
  const auto x = upload(device, randomFloats(size_t(s.tokens) * size_t(s.cols), rng, 1.0f));
  auto y = device.allocate(size_t(s.tokens) * size_t(s.rows) * sizeof(float));
  const double seconds = secondsPerCall(device, reps, y->data(), [&](int call) {
    device.matmul(refs[size_t(call % copies)], reinterpret_cast<const float*>(x->data()), s.tokens,
                  reinterpret_cast<float*>(y->data()), nullptr);
  });
  std::printf("matmul %s %s %lldx%lld tokens %d: %.2f us a call, %.3f TB/s of weights (%d calls, %d cop%s)\n",
              device.info().id.str().c_str(), std::string(quant::typeName(s.type)).c_str(), (long long)s.rows,
              (long long)s.cols, s.tokens, seconds * 1e6, double(matrixBytes) / seconds / 1e12, reps, copies,
              copies == 1 ? "y" : "ies");
}

int run(int argc, char** argv) {
  tools::CommandLine cl(argc, argv);
  if (cl.done()) throw tools::UsageError("which op?");
  const std::string op = cl.take();
  if (op != "attention" && op != "matmul") throw tools::UsageError("unknown op '" + op + "'");
  std::string deviceSpec = "cpu:0";
  runtime::DeviceSpecOptions deviceOptions;
  int reps = 100;
  uint32_t seed = 1;
  AttentionShape attention;
  MatmulShape matmul;
  const auto positive = [](const std::string& flag, long long v) {
    if (v <= 0) throw tools::UsageError(flag + " must be positive");
    return v;
  };
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "--devices") {
      deviceSpec = cl.value(a);
    } else if (a == "-t") {
      deviceOptions.cpuThreads = int(positive(a, cl.number<int>(a)));
    } else if (a == "-r") {
      reps = int(positive(a, cl.number<int>(a)));
    } else if (a == "--seed") {
      seed = cl.number<uint32_t>(a);
    } else if (a == "--copies") {
      attention.copies = matmul.copies = int(positive(a, cl.number<int>(a)));
    } else if (a == "--tokens") {
      attention.tokens = matmul.tokens = int(positive(a, cl.number<int>(a)));
    } else if (op == "attention" && a == "--heads") {
      attention.heads = int(positive(a, cl.number<int>(a)));
    } else if (op == "attention" && a == "--kv-heads") {
      attention.kvHeads = int(positive(a, cl.number<int>(a)));
    } else if (op == "attention" && a == "--head-dim") {
      attention.headDim = int(positive(a, cl.number<int>(a)));
    } else if (op == "attention" && a == "--context") {
      attention.contexts = parseList(a, cl.value(a));
    } else if (op == "attention" && a == "--kv") {
      attention.precision = cl.oneOf(a, {"f32", "f16"}) == "f16" ? KvPrecision::kF16 : KvPrecision::kF32;
    } else if (op == "matmul" && a == "--type") {
      const std::string name = cl.value(a);
      const auto type = quant::parseTypeName(name);
      if (!type) throw tools::UsageError("--type: unknown type '" + name + "'");
      matmul.type = *type;
    } else if (op == "matmul" && a == "--rows") {
      matmul.rows = positive(a, cl.number<int64_t>(a));
    } else if (op == "matmul" && a == "--cols") {
      matmul.cols = positive(a, cl.number<int64_t>(a));
    } else {
      throw tools::UsageError("unknown option '" + a + "' for " + op);
    }
  }
  auto devices = runtime::createDevices(deviceSpec, deviceOptions);
  if (devices.size() != 1) throw tools::UsageError("--devices names one device");
  Device& device = *devices.front();
  std::printf("device %s: %s\n", device.info().id.str().c_str(), device.info().name.c_str());
  std::mt19937 rng(seed);
  if (op == "attention") {
    benchAttention(device, attention, reps, rng);
  } else {
    benchMatmul(device, matmul, reps, rng);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-opbench", kUsage, run, argc, argv); }
