// The runtime against llama.cpp and the float64 truth, on committed goldens
// (tests/goldens/make_goldens.sh says how each was made).
#include <gtest/gtest.h>

#include "engine/runtime/step_loop.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "tests/runtime/test_support.h"
#include "tests/scoped_test_state.h"
#include "tools/random_model.h"

namespace jitllm::testing {
namespace {

// Undoes the goldens' C-escaping: \\ \n \xHH.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
    } else if (s[i + 1] == 'n') {
      out += '\n', i++;
    } else if (s[i + 1] == '\\') {
      out += '\\', i++;
    } else if (s[i + 1] == 'x' && i + 3 < s.size()) {
      out += char(std::stoi(s.substr(i + 2, 2), nullptr, 16)), i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct GreedyGolden {
  std::string prompt;
  std::vector<int32_t> promptTokens, greedyTokens;
  std::string text;
};

std::vector<GreedyGolden> readGreedyGoldens(const std::string& path) {
  std::ifstream in(path);
  std::vector<GreedyGolden> out;
  std::string line;
  auto value = [](const std::string& l, const std::string& key) { return l.substr(key.size()); };
  while (std::getline(in, line)) {
    if (line.rfind("prompt: ", 0) == 0) {
      out.emplace_back();
      out.back().prompt = unescape(value(line, "prompt: "));
    } else if (line.rfind("prompt_tokens: ", 0) == 0) {
      out.back().promptTokens = readIds(value(line, "prompt_tokens: "));
    } else if (line.rfind("greedy_tokens: ", 0) == 0) {
      out.back().greedyTokens = readIds(value(line, "greedy_tokens: "));
    } else if (line.rfind("text: ", 0) == 0) {
      out.back().text = unescape(value(line, "text: "));
    }
  }
  return out;
}

// One golden prompt where llama.cpp's own decode rounding flips a near-tie: at generated token 66
// its greedy run picks 448, while the float64 truth (reference.py: 442 at 14.15569, 448 at
// 14.15489) and llama.cpp's --score pass over the same prefix pick 442. jitllm follows the truth.
// Reproduce: tests/goldens/make_goldens.sh's comment, and docs/fidelity.md.
struct KnownDeviation {
  const char* prompt;
  size_t position;
  int32_t llamaCppToken, truthToken;
};
constexpr KnownDeviation kKnownDeviations[] = {{"Sara had a red ball. She", 66, 448, 442}};

TEST(Fidelity, Stories260KGreedyMatchesLlamaCppTokenForTokenOnEveryGoldenPrompt) {
  const std::string path = sharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto goldens = readGreedyGoldens(goldenPath("stories260K_greedy.txt"));
  ASSERT_GE(goldens.size(), 11u);
  size_t identical = 0;
  auto m = loadOnCpu(path);
  for (const auto& g : goldens) {
    SCOPED_TRACE(g.prompt);
    const auto prompt = m.model->tokenizer().encode(g.prompt, true, true);
    ASSERT_EQ(prompt, g.promptTokens);
    auto session = m.model->createSession(int64_t(prompt.size() + g.greedyTokens.size() + 1));
    runtime::SequenceRequest req;
    req.prompt = prompt;
    req.maxTokens = int32_t(g.greedyTokens.size());
    std::vector<int32_t> out;
    tokenizer::StreamingDetokenizer detok(m.model->tokenizer());
    std::string text;
    runtime::generate(*m.model, *session, req, [&](int32_t t, std::span<const float>) {
      out.push_back(t);
      text += detok.feed(t);
      return true;
    });
    text += detok.flush();
    const KnownDeviation* deviation = nullptr;
    for (const auto& d : kKnownDeviations) {
      if (g.prompt == d.prompt) deviation = &d;
    }
    if (deviation) {
      // Identical up to llama.cpp's rounding flip, then the truth's token.
      ASSERT_GT(out.size(), deviation->position);
      EXPECT_TRUE(std::equal(out.begin(), out.begin() + long(deviation->position), g.greedyTokens.begin()));
      EXPECT_EQ(g.greedyTokens[deviation->position], deviation->llamaCppToken);
      EXPECT_EQ(out[deviation->position], deviation->truthToken);
      continue;
    }
    EXPECT_EQ(g.greedyTokens.size(), 200u);
    EXPECT_EQ(out, g.greedyTokens);
    EXPECT_EQ(text, g.text);
    identical += out == g.greedyTokens && text == g.text;
  }
  EXPECT_GE(identical, 10u);
}

class MicroFidelity : public ::testing::TestWithParam<const char*> {};

// llama.cpp's own distance from the truth is the bar: ours must be within 1.1x of it (floor 1e-6)
// with at least its top-1 agreement.
TEST_P(MicroFidelity, LogitsAreAtLeastAsCloseToTheFloat64TruthAsLlamaCpps) {
  const std::string type = GetParam();
  const auto ids = readIds(readFirstLine(goldenPath("micro/tokens.txt")));
  ASSERT_EQ(ids.size(), 64u);
  auto m = loadOnCpu(goldenPath("micro/micro-" + type + ".gguf"));
  const auto ours = scoreAll(*m.model, ids);
  const auto truth = readFloats(goldenPath("micro/" + type + ".truth.bin"));
  const auto llamacpp = readFloats(goldenPath("micro/" + type + ".llamacpp.bin"));
  ASSERT_EQ(ours.size(), truth.size());
  ASSERT_EQ(llamacpp.size(), truth.size());
  const auto a = compareLogits(ours, truth, 512);
  const auto b = compareLogits(llamacpp, truth, 512);
  RecordProperty("jitllm_nmse", std::to_string(a.nmse));
  RecordProperty("llamacpp_nmse", std::to_string(b.nmse));
  std::printf("micro %-7s jitllm nmse %.3e top1 %.4f | llama.cpp nmse %.3e top1 %.4f\n", type.c_str(), a.nmse, a.top1,
              b.nmse, b.top1);
  EXPECT_LE(a.nmse, std::max(1.1 * b.nmse, 1e-6));
  EXPECT_GE(a.top1, b.top1);
}

// The prompt path (Device::setPromptRows; on the CPU, byte activations for the quantized types
// that have it) is held to the same bar: every position fed as a prompt token, the head then
// computing each one's logits.
TEST_P(MicroFidelity, OnThePromptPathLogitsAreAtLeastAsCloseToTheFloat64TruthAsLlamaCpps) {
  const std::string type = GetParam();
  const auto ids = readIds(readFirstLine(goldenPath("micro/tokens.txt")));
  auto m = loadOnCpu(goldenPath("micro/micro-" + type + ".gguf"));
  auto session = m.model->createSession(int64_t(ids.size()));
  std::vector<float> ours;
  runtime::SequenceInput in{session.get(), ids, true, int64_t(ids.size())};
  m.model->forward({&in, 1}, ours);
  const auto truth = readFloats(goldenPath("micro/" + type + ".truth.bin"));
  const auto llamacpp = readFloats(goldenPath("micro/" + type + ".llamacpp.bin"));
  ASSERT_EQ(ours.size(), truth.size());
  const auto a = compareLogits(ours, truth, 512);
  const auto b = compareLogits(llamacpp, truth, 512);
  std::printf("micro %-7s prompt path: jitllm nmse %.3e top1 %.4f | llama.cpp nmse %.3e top1 %.4f\n", type.c_str(),
              a.nmse, a.top1, b.nmse, b.top1);
  EXPECT_LE(a.nmse, std::max(1.1 * b.nmse, 1e-6));
  EXPECT_GE(a.top1, b.top1);
}

INSTANTIATE_TEST_SUITE_P(EveryWeightType, MicroFidelity,
                         ::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"));

struct TeacherForced {
  double nmse = 0;
  double top1 = 0;
};

// Our generator's f16 model of `shape`, re-made byte for byte as llama.cpp scored it
// (make_goldens.sh part 3), scored by us on the golden's 64 ids and compared with llama.cpp's
// logits at every 37th column and its argmax at every position.
TeacherForced teacherForcedAgainstLlamaCpp(const std::string& shape, const std::string& dir, runtime::Architecture arch,
                                           int64_t expectedVocab = 151936) {
  const auto ids = readIds(readFirstLine(goldenPath(dir + "/tokens.txt")));
  EXPECT_EQ(ids.size(), 64u);
  const auto cols = readFloats(goldenPath(dir + "/llamacpp_cols.bin"));
  std::ifstream argmaxFile(goldenPath(dir + "/llamacpp_argmax.txt"));
  std::vector<int32_t> llamaArgmax;
  for (int32_t v; argmaxFile >> v;) llamaArgmax.push_back(v);
  EXPECT_EQ(llamaArgmax.size(), 64u);

  const std::string path = (std::filesystem::temp_directory_path() / ("jitllm-test-" + shape + "-f16.gguf")).string();
  tools::RandomModelSpec spec{*tools::findShape(shape), *tools::findMix("f16"), 0, JITLLM_SHARED_DIR};
  tools::writeRandomModel(spec, path);
  auto m = loadOnCpu(path);
  std::filesystem::remove(path);  // the mapping keeps the bytes alive
  EXPECT_EQ(m.model->config().arch, arch);
  const int64_t vocab = m.model->config().vocabSize;
  EXPECT_EQ(vocab, expectedVocab);
  const auto ours = scoreAll(*m.model, ids);

  constexpr int64_t kStride = 37;
  const size_t width = size_t((vocab + kStride - 1) / kStride);
  EXPECT_EQ(cols.size(), 64 * width);
  std::vector<float> oursCols;
  size_t agree = 0;
  for (int64_t p = 0; p < 64; p++) {
    const float* row = ours.data() + p * vocab;
    for (int64_t c = 0; c < vocab; c += kStride) oursCols.push_back(row[c]);
    agree += runtime::argmax({row, size_t(vocab)}) == llamaArgmax[size_t(p)];
  }
  const auto r = compareLogits(oursCols, cols, width);
  TeacherForced out{r.nmse, double(agree) / 64.0};
  std::printf("%s f16 vs llama.cpp: nmse %.3e top1 %.4f\n", shape.c_str(), out.nmse, out.top1);
  return out;
}

TEST(Fidelity, Qwen2TeacherForcedLogitsStayWithin1e5OfLlamaCpps) {
  const TeacherForced r = teacherForcedAgainstLlamaCpp("qwen2.5-0.5b", "qwen2", runtime::Architecture::kQwen2);
  EXPECT_LE(r.nmse, 1e-5);
  EXPECT_GE(r.top1, 0.98);
}

// Granite's graph: Llama's with the embeddings, residual branches, attention scores and logits
// scaled by Granite 3.3's multipliers, on the refact tokenizer's vocabulary.
TEST(Fidelity, GraniteTeacherForcedLogitsStayWithin1e5OfLlamaCpps) {
  const TeacherForced r =
      teacherForcedAgainstLlamaCpp("granite-micro", "granite", runtime::Architecture::kGranite, 49216);
  EXPECT_LE(r.nmse, 1e-5);
  EXPECT_GE(r.top1, 0.999);
}

// Phi-3's graph: q, k and v from one fused matrix, gate and up from another, NEOX rope with
// LongRoPE's long factors (the context, 8192, is past the original 4096) and its attention factor.
TEST(Fidelity, Phi3TeacherForcedLogitsStayWithin1e5OfLlamaCpps) {
  const TeacherForced r = teacherForcedAgainstLlamaCpp("phi3-micro", "phi3", runtime::Architecture::kPhi3, 32064);
  EXPECT_LE(r.nmse, 1e-5);
  EXPECT_GE(r.top1, 0.999);
}

// Phi-4-mini's form of it: grouped-query heads, a tied output, rope over 48 of each head's 64 dims
// (partial_rotary_factor 0.75), llama-bpe's pieces under Phi-4's markers.
TEST(Fidelity, Phi4TeacherForcedLogitsStayWithin1e5OfLlamaCpps) {
  const TeacherForced r = teacherForcedAgainstLlamaCpp("phi4-micro", "phi4", runtime::Architecture::kPhi3, 128267);
  EXPECT_LE(r.nmse, 1e-5);
  EXPECT_GE(r.top1, 0.999);
}

// Qwen3's graph: q/k RMS norms per head before rope, heads 128 wide on a 256-wide model
// (attention.key_length), no QKV bias, tied output.
TEST(Fidelity, Qwen3TeacherForcedLogitsStayWithin1e5OfLlamaCpps) {
  const TeacherForced r = teacherForcedAgainstLlamaCpp("qwen3-micro", "qwen3", runtime::Architecture::kQwen3);
  EXPECT_LE(r.nmse, 1e-5);
  EXPECT_GE(r.top1, 0.999);
}

// The new architectures' Q4_K_M micro files (our generator's, seed 0) against the float64 truth
// (reference_archs.py, make_goldens.sh part 5), jitllm beside llama.cpp on the same file: at
// least as close as llama.cpp (its 8-bit activations sit at NMSE 4e-5 to 5e-4 here).
struct QuantTruthCase {
  const char* shape;
  const char* dir;
  int64_t vocab;
};

class QuantizedTruth : public ::testing::TestWithParam<QuantTruthCase> {};

TEST_P(QuantizedTruth, Q4KMLogitsAreAtLeastAsCloseToTheFloat64TruthAsLlamaCpps) {
  const QuantTruthCase c = GetParam();
  const std::string dir = c.dir;
  const auto ids = readIds(readFirstLine(goldenPath(dir + "/tokens.txt")));
  const auto truth = readFloats(goldenPath(dir + "/q4_k_m.truth_cols.bin"));
  std::ifstream argmaxFile(goldenPath(dir + "/q4_k_m.truth_argmax.txt"));
  std::vector<int32_t> truthArgmax;
  for (int32_t v; argmaxFile >> v;) truthArgmax.push_back(v);
  std::ifstream peerFile(goldenPath(dir + "/q4_k_m.llamacpp_vs_truth.txt"));
  std::string nmseWord, top1Word;
  double peerNmse = 0, peerTop1 = 0;
  peerFile >> nmseWord >> peerNmse >> top1Word >> peerTop1;
  ASSERT_EQ(nmseWord, "nmse");
  ASSERT_EQ(truthArgmax.size(), 64u);

  const TempDir tmp;
  const std::string path = tmp.path() + "/model.gguf";
  tools::writeRandomModel({*tools::findShape(c.shape), *tools::findMix("q4_k_m"), 0, JITLLM_SHARED_DIR}, path);
  auto m = loadOnCpu(path);
  ASSERT_EQ(m.model->config().vocabSize, c.vocab);
  const auto ours = scoreAll(*m.model, ids);
  const size_t width = size_t((c.vocab + 36) / 37);
  ASSERT_EQ(truth.size(), 64 * width);
  std::vector<float> oursCols;
  size_t agree = 0;
  for (int64_t p = 0; p < 64; p++) {
    const float* row = ours.data() + p * c.vocab;
    for (int64_t col = 0; col < c.vocab; col += 37) oursCols.push_back(row[col]);
    agree += runtime::argmax({row, size_t(c.vocab)}) == truthArgmax[size_t(p)];
  }
  const auto r = compareLogits(oursCols, truth, width);
  const double top1 = double(agree) / 64.0;
  std::printf("%s q4_k_m vs float64 truth: jitllm nmse %.3e top1 %.4f | llama.cpp nmse %.3e top1 %.4f\n", c.shape,
              r.nmse, top1, peerNmse, peerTop1);
  EXPECT_LE(r.nmse, std::max(1.1 * peerNmse, 1e-6));
  EXPECT_GE(top1, peerTop1);
}

INSTANTIATE_TEST_SUITE_P(NewArchitectures, QuantizedTruth,
                         ::testing::Values(QuantTruthCase{"qwen3-micro", "qwen3", 151936},
                                           QuantTruthCase{"granite-micro", "granite", 49216},
                                           QuantTruthCase{"phi3-micro", "phi3", 32064},
                                           QuantTruthCase{"phi4-micro", "phi4", 128267},
                                           QuantTruthCase{"gemma3-micro", "gemma3", 32002}),
                         [](const auto& info) { return std::string(info.param.dir); });

// Gemma 3's graph: embeddings times sqrt(d), q/k norms, norms after attention and the FFN,
// GEGLU, 5 of 6 layers attending to a 24-token sliding window with their own rope base, a tied
// output. The 64 positions reach 2.6 windows; llama.cpp's logits are compared inside the first
// window and past it, scored in one step and fed one token at a time (the sliding layers then
// free the pages their windows leave behind, and must hold no more than the window needs).
TEST(Fidelity, Gemma3TeacherForcedLogitsStayWithin1e5OfLlamaCppsInsideAndPastTheWindow) {
  const TeacherForced r = teacherForcedAgainstLlamaCpp("gemma3-micro", "gemma3", runtime::Architecture::kGemma3, 32002);
  EXPECT_LE(r.nmse, 1e-5);
  EXPECT_GE(r.top1, 0.999);

  const auto ids = readIds(readFirstLine(goldenPath("gemma3/tokens.txt")));
  const auto cols = readFloats(goldenPath("gemma3/llamacpp_cols.bin"));
  const std::string path = (std::filesystem::temp_directory_path() / "jitllm-test-gemma3-decode-f16.gguf").string();
  tools::writeRandomModel({*tools::findShape("gemma3-micro"), *tools::findMix("f16"), 0, JITLLM_SHARED_DIR}, path);
  auto m = loadOnCpu(path);
  std::filesystem::remove(path);
  const runtime::ModelConfig& c = m.model->config();
  ASSERT_EQ(c.slidingWindow, 24);
  const int64_t vocab = c.vocabSize;
  const size_t width = size_t((vocab + 36) / 37);
  auto session = m.model->createSession(64);
  const int pageTokens = m.model->kvLayout().pageTokens;
  std::vector<float> inside, insideGolden, past, pastGolden;
  for (size_t p = 0; p < ids.size(); p++) {
    std::vector<float> logits;
    runtime::SequenceInput in{session.get(), std::span<const int32_t>(&ids[p], 1), false};
    m.model->forward({&in, 1}, logits);
    ASSERT_EQ(int64_t(logits.size()), vocab);
    auto& ours = p < 24 ? inside : past;
    auto& golden = p < 24 ? insideGolden : pastGolden;
    for (int64_t col = 0; col < vocab; col += 37) ours.push_back(logits[size_t(col)]);
    golden.insert(golden.end(), cols.begin() + ptrdiff_t(p * width), cols.begin() + ptrdiff_t((p + 1) * width));
    for (int l = 0; l < int(c.layers); l++) {
      // A sliding layer holds the pages of its next window (24 positions: two or three pages);
      // the global layer every page so far.
      const size_t written = (p + 1 + size_t(pageTokens) - 1) / size_t(pageTokens);
      if (c.slidingLayer(l)) {
        EXPECT_LE(session->layerPageCount(l), size_t(24 + pageTokens - 1) / size_t(pageTokens) + 1) << "layer " << l;
      } else {
        EXPECT_EQ(session->layerPageCount(l), written) << "layer " << l;
      }
    }
  }
  const auto a = compareLogits(inside, insideGolden, width);
  const auto b = compareLogits(past, pastGolden, width);
  std::printf("gemma3-micro decoded one token at a time: nmse %.3e inside the window, %.3e past it\n", a.nmse, b.nmse);
  EXPECT_LE(a.nmse, 1e-5);
  EXPECT_LE(b.nmse, 1e-5);
  // Sliding layers freed the pages behind their windows: 64 positions are 4 pages a layer.
  EXPECT_LT(session->pageCount(), size_t(c.layers) * 4);
  // A rewind behind the freed pages is refused; one inside the window is not.
  EXPECT_FALSE(session->canTruncate(10));
  EXPECT_TRUE(session->canTruncate(60));
  EXPECT_THROW(session->truncate(10), Error);
}

}  // namespace
}  // namespace jitllm::testing
