// The step plan: how a step's tokens are laid out (microbatches, prompt rows, head rows, KV
// tables), kept from one step to the next - so that a step of a shape the model has run allocates
// nothing on the host, whatever runs where.
#include "engine/runtime/step_plan.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "engine/kv/kv_page_pool.h"
#include "tests/runtime/test_support.h"

namespace {
// Counts the allocations of the thread that asked (operator new is replaced for this binary).
thread_local bool tCounting = false;
thread_local int64_t tAllocations = 0;
}  // namespace

// The replacements pair malloc with free, which GCC's check cannot see through the inlined calls.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t bytes) {
  if (tCounting) tAllocations++;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too, so that every unaligned new pairs with these deletes (a sanitizer's own
// nothrow new would not).
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  if (tCounting) tAllocations++;
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void* operator new[](std::size_t bytes, const std::nothrow_t& tag) noexcept { return operator new(bytes, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace jitllm::testing {
namespace {

const std::string kMicro = goldenPath("micro/micro-q4_k_m.gguf");

// A device whose ops do nothing (its memory is the host's): a step on it costs exactly what the
// model's own code does, which is what these tests count.
class NoOpDevice final : public Device {
 public:
  explicit NoOpDevice(int index) {
    info_.id = DeviceId::parse("cpu:" + std::to_string(index));
    info_.name = "no-op device";
    info_.memoryBudget = size_t(1) << 30;
    info_.caps.hostMemory = true;
    info_.caps.kernelsCompiledIn = true;
  }
  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override {
    return std::make_unique<Buffer>(static_cast<uint8_t*>(std::calloc(bytes + 64, 1)), bytes, true);
  }
  std::unique_ptr<DeviceBuffer> adoptHostBytes(const uint8_t* bytes, size_t size) override {
    return std::make_unique<Buffer>(const_cast<uint8_t*>(bytes), size, false);
  }
  void copyFromHost(uint8_t* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copyToHost(void* dst, const uint8_t* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copyToDevice(Device&, uint8_t* dst, const uint8_t* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void getRows(const WeightRef&, const int32_t*, int64_t, float*) override {}
  void rmsNorm(const float*, const float*, float*, int64_t, int64_t, float) override {}
  void matmul(const WeightRef&, const float*, int64_t, float*, const float*) override {}
  void rope(float*, int64_t, int, int, const int32_t*, const RopeParams&) override {}
  void kvStore(const float*, const float*, int64_t, const KvSlot*, const KvLayout&) override {}
  void attention(const float*, float*, const AttentionBatch&) override {}
  void swiglu(const float*, const float*, float*, int64_t) override {}
  void geglu(const float*, const float*, float*, int64_t) override {}
  void add(float*, const float*, int64_t) override {}
  void scale(float*, float, int64_t) override {}
  void selectCandidates(float*, int64_t rows, int64_t, std::span<const CandidateRequest>, int32_t* ids, float* values,
                        int64_t stride) override {
    for (int64_t r = 0; r < rows; r++) ids[r * stride] = 0, values[r * stride] = 0;
  }

 private:
  class Buffer final : public DeviceBuffer {
   public:
    Buffer(uint8_t* bytes, size_t size, bool owned) : bytes_(bytes), size_(size), owned_(owned) {}
    ~Buffer() override {
      if (owned_) std::free(bytes_);
    }
    uint8_t* data() override { return bytes_; }
    size_t size() const override { return size_; }
    Device& device() override { JITLLM_FAIL(kUnimplemented, "not asked by the model"); }

   private:
    uint8_t* bytes_;
    size_t size_;
    bool owned_;
  };
};

TEST(StepPlan, CutsMicrobatchesAndNamesThePromptAndHeadRowsOfEach) {
  cpu::CpuDeviceOptions o;
  o.threads = 1;
  cpu::CpuDevice device(o);
  runtime::KvPagePool pool(device, KvLayout{16, 2, 8, KvPrecision::kF32});
  runtime::Session a(1, 1000, {&pool}), b(2, 1000, {&pool});
  b.reserve(3);
  b.advance(3);
  const std::vector<int32_t> prompt(600, 7), next{5};
  // A's 600-token prompt (all but its last token on the prompt path) beside B's decode token.
  const runtime::SequenceInput inputs[] = {{&a, prompt, false, 599}, {&b, next, false, 0}};
  runtime::StepPlan plan(512);
  plan.build(inputs, 32);
  ASSERT_EQ(plan.microbatches().size(), 2u);
  const auto& first = plan.microbatches()[0];
  const auto& second = plan.microbatches()[1];
  EXPECT_EQ(first.tokens, 512);
  EXPECT_EQ(second.tokens, 89);
  ASSERT_EQ(plan.promptRows(first).size(), 1u);
  EXPECT_EQ(plan.promptRows(first)[0].begin, 0);
  EXPECT_EQ(plan.promptRows(first)[0].end, 512);
  EXPECT_TRUE(plan.headRows(first).empty());
  ASSERT_EQ(plan.promptRows(second).size(), 1u);
  EXPECT_EQ(plan.promptRows(second)[0].end, 87) << "A's last token takes decode's path";
  EXPECT_EQ(std::vector<int32_t>(plan.headRows(second).begin(), plan.headRows(second).end()),
            (std::vector<int32_t>{87, 88}));
  EXPECT_EQ(plan.positions(second)[88], 3) << "B's token comes after the 3 it holds";
  EXPECT_EQ(second.headRowsBegin, 0u) << "no logits were returned before it";

  // The same shape again keeps the layout; another shape lays the step out anew.
  const runtime::SequenceInput scoring[] = {{&a, {prompt.data(), 4}, true, 0}};
  plan.build(scoring, 32);
  ASSERT_EQ(plan.microbatches().size(), 1u);
  EXPECT_EQ(plan.headRows(plan.microbatches()[0]).size(), 4u);
  EXPECT_TRUE(plan.promptRows(plan.microbatches()[0]).empty());
}

TEST(StepPlan, RefusesABatchThatNamesASessionTwice) {
  cpu::CpuDeviceOptions o;
  o.threads = 1;
  cpu::CpuDevice device(o);
  runtime::KvPagePool pool(device, KvLayout{16, 2, 8, KvPrecision::kF32});
  runtime::Session a(1, 100, {&pool});
  const std::vector<int32_t> token{1};
  const runtime::SequenceInput twice[] = {{&a, token, false}, {&a, token, false}};
  runtime::StepPlan plan(512);
  try {
    plan.build(twice, 32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("appears twice"), std::string::npos) << e.what();
  }
}

struct Layout {
  const char* name;
  std::vector<int> placement;  // over two devices; empty: tensor parallel over both
  std::vector<bool> streamed;
};

class StepAllocations : public ::testing::TestWithParam<Layout> {};

// Decode steps of three sessions, every step the shape of the last, none opening a KV page (which
// is the session's growth, not the step's): after
// the first steps have sized what they keep, a step allocates nothing on the host - in either
// forward(), across a device boundary, split over two devices, or streaming a block.
TEST_P(StepAllocations, AStepOfAShapeTheModelHasRunAllocatesNothing) {
  NoOpDevice d0(0), d1(1);
  runtime::ModelLoadOptions options;
  options.devices = {&d0, &d1};
  options.placement = GetParam().placement;
  options.streamed = GetParam().streamed;
  options.kvPageTokens = 64;  // the steps below stay in each session's first page
  if (options.placement.empty()) options.tensorParallel = 2;
  auto model = runtime::Model::load(kMicro, options);
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  for (int i = 0; i < 3; i++) sessions.push_back(model->createSession(64));
  const int32_t tokens[] = {1, 2, 3};
  std::vector<runtime::SequenceInput> inputs;
  for (int i = 0; i < 3; i++) inputs.push_back({sessions[size_t(i)].get(), {&tokens[i], 1}, false});
  const std::vector<CandidateRequest> greedy(3, CandidateRequest{1, 1.0f, {}});
  std::vector<int32_t> ids;
  std::vector<float> values, logits;
  logits.reserve(size_t(3 * model->config().vocabSize));
  for (int step = 0; step < 12; step++) {  // two forwards a step: positions 0-23
    const bool counted = step >= 2;
    tAllocations = 0;
    tCounting = counted;
    model->forward(inputs, greedy, 1, ids, values);
    logits.clear();
    model->forward(inputs, logits);
    tCounting = false;
    if (counted) {
      EXPECT_EQ(tAllocations, 0) << "step " << step;
    }
  }
  EXPECT_EQ(sessions[0]->length(), 24);
}

INSTANTIATE_TEST_SUITE_P(Layouts, StepAllocations,
                         ::testing::Values(Layout{"one_device", {0, 0, 0, 0}, {}},
                                           Layout{"a_device_boundary", {0, 0, 1, 1}, {}},
                                           Layout{"tensor_parallel", {}, {}},
                                           Layout{"streamed_blocks", {0, 0, 0, 0}, {false, true, true, false}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace jitllm::testing
