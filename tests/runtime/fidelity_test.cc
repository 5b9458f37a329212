// The runtime against llama.cpp and the float64 truth, on committed goldens
// (tests/goldens/make_goldens.sh says how each was made).
#include <gtest/gtest.h>

#include "engine/runtime/step_loop.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "tests/runtime/test_support.h"
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

INSTANTIATE_TEST_SUITE_P(EveryWeightType, MicroFidelity,
                         ::testing::Values("f32", "f16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"));

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

// Qwen3's graph: q/k RMS norms per head before rope, heads 128 wide on a 256-wide model
// (attention.key_length), no QKV bias, tied output.
TEST(Fidelity, Qwen3TeacherForcedLogitsStayWithin1e5OfLlamaCpps) {
  const TeacherForced r = teacherForcedAgainstLlamaCpp("qwen3-micro", "qwen3", runtime::Architecture::kQwen3);
  EXPECT_LE(r.nmse, 1e-5);
  EXPECT_GE(r.top1, 0.999);
}

}  // namespace
}  // namespace jitllm::testing
