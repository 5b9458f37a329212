// llama.cpp's tokenizer test data: for each ../shared/vocab/ggml-vocab-NAME.gguf, NAME.gguf.inp
// holds inputs separated by "\n__ggml_vocab_test__\n" and NAME.gguf.out one line of expected ids
// per input. They come from llama.cpp's test-tokenizer-0, which tokenizes with add_special = false
// (no BOS even for SentencePiece) and parse_special = false.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "tests/tokenizer/test_vocab.h"
#include "tools/random_model.h"

namespace jitllm::tokenizer {
namespace {

namespace fs = std::filesystem;
using test_support::goldenPath;
using test_support::loadTokenizer;
using test_support::sharedPath;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream all;
  all << in.rdbuf();
  return all.str();
}

std::vector<std::string> readInputs(const fs::path& path) {
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  const std::string all = readFile(path);
  std::vector<std::string> inputs;
  size_t pos = 0;
  for (size_t hit; (hit = all.find(kSeparator, pos)) != std::string::npos; pos = hit + kSeparator.size()) {
    inputs.push_back(all.substr(pos, hit - pos));
  }
  return inputs;
}

std::vector<std::vector<int32_t>> readOutputs(const fs::path& path) {
  std::istringstream in(readFile(path));
  std::vector<std::vector<int32_t>> outputs;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    std::vector<int32_t>& row = outputs.emplace_back();
    for (int32_t id; ids >> id;) row.push_back(id);
  }
  return outputs;
}

std::string idsToString(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

std::string escaped(const std::string& text) {
  std::string s;
  for (unsigned char c : text) {
    if (c == '\n') {
      s += "\\n";
    } else if (c == '\t') {
      s += "\\t";
    } else if (c == '\r') {
      s += "\\r";
    } else {
      s.push_back(char(c));
    }
  }
  return s;
}

// Where vocabularies with test data are: ../shared/vocab, and the repository's own
// (tests/goldens/vocab: the pre-tokenizers the shared folder lacks).
std::vector<fs::path> vocabDirs() { return {sharedPath("vocab"), goldenPath("vocab")}; }

// Vocabularies in a family's form (tools/random_model.h) that are not committed, being a shared
// vocabulary's pieces plus a few markers (Phi-4's: 7.8 MB): jitllm-mkmodel --vocab-only writes
// them byte for byte as make_goldens.sh did, so the test writes them too. Only their .inp and
// .out are in tests/goldens/vocab.
const std::map<std::string, std::string>& formShapes() {
  static const std::map<std::string, std::string> shapes = {{"phi4-form", "phi4-micro"}};
  return shapes;
}

// The vocab names with test data, e.g. "llama-spm" for ggml-vocab-llama-spm.gguf.
std::vector<std::string> vocabNames() {
  std::vector<std::string> names;
  for (const fs::path& dir : vocabDirs()) {
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string file = entry.path().filename().string();
      static constexpr std::string_view kPrefix = "ggml-vocab-", kSuffix = ".gguf";
      if (file.size() > kPrefix.size() + kSuffix.size() && file.starts_with(kPrefix) && file.ends_with(kSuffix)) {
        names.push_back(file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size()));
      }
    }
  }
  for (const auto& [name, shape] : formShapes()) {
    if (fs::exists(goldenPath("vocab/ggml-vocab-" + name + ".gguf.inp"))) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

fs::path formVocabPath(const std::string& name) {
  return fs::temp_directory_path() / ("jitllm-test-" + std::to_string(::getpid()) + "-ggml-vocab-" + name + ".gguf");
}

// A form vocabulary, written once per run to the temp folder.
fs::path writtenFormVocab(const std::string& name) {
  static std::map<std::string, fs::path> written;
  if (auto it = written.find(name); it != written.end()) return it->second;
  const fs::path path = formVocabPath(name);
  tools::RandomModelSpec spec{*tools::findShape(formShapes().at(name)), *tools::findMix("f16"), 0, JITLLM_SHARED_DIR};
  spec.vocabOnly = true;
  tools::writeRandomModel(spec, path.string());
  return written[name] = path;
}

class VocabFileTest : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path gguf() const {
    for (const fs::path& dir : vocabDirs()) {
      const fs::path p = dir / ("ggml-vocab-" + GetParam() + ".gguf");
      if (fs::exists(p)) return p;
    }
    if (formShapes().count(GetParam())) return writtenFormVocab(GetParam());
    return sharedPath("vocab/ggml-vocab-" + GetParam() + ".gguf");
  }
  // The test data: beside the vocabulary, or in tests/goldens/vocab for a written one.
  std::string data(const char* suffix) const {
    if (formShapes().count(GetParam())) return goldenPath("vocab/ggml-vocab-" + GetParam() + ".gguf" + suffix);
    return gguf().string() + suffix;
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    for (const auto& [name, shape] : formShapes()) fs::remove(formVocabPath(name), ignored);
  }
};

TEST(VocabFiles, TheSharedFolderHasTheFourReferenceVocabularies) {
  const std::vector<std::string> names = vocabNames();
  for (const char* expected : {"gpt-2", "llama-bpe", "llama-spm", "qwen2"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
}

TEST_P(VocabFileTest, EveryTestInputTokenizesToLlamaCppsIds) {
  const std::vector<std::string> inputs = readInputs(data(".inp"));
  const std::vector<std::vector<int32_t>> outputs = readOutputs(data(".out"));
  ASSERT_FALSE(inputs.empty());
  ASSERT_EQ(inputs.size(), outputs.size()) << "the .inp and .out files disagree on the count";
  const Tokenizer tokenizer = loadTokenizer(gguf().string());
  size_t mismatches = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // parse_special makes no difference here (no input spells a special token); check both.
    for (bool parseSpecial : {false, true}) {
      const std::vector<int32_t> got = tokenizer.encode(inputs[i], false, parseSpecial);
      if (got != outputs[i]) {
        ++mismatches;
        ADD_FAILURE() << GetParam() << " input " << i << " \"" << escaped(inputs[i])
                      << "\" parseSpecial=" << parseSpecial << "\n  expected:" << idsToString(outputs[i])
                      << "\n  got:     " << idsToString(got);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

// Detokenizing gives the input back, except where llama.cpp itself would not: the BPE models that
// clean up spaces before punctuation drop the space of " ," or " 's" (Hugging Face's
// clean_up_tokenization_spaces), so those inputs are skipped for them.
TEST_P(VocabFileTest, DetokenizingTheTokensOfEachInputGivesTheInputBack) {
  const std::vector<std::string> inputs = readInputs(data(".inp"));
  const Tokenizer tokenizer = loadTokenizer(gguf().string());
  const bool cleansSpaces =
      GetParam() == "gpt-2" || GetParam() == "llama-bpe" || GetParam() == "refact" || GetParam() == "starcoder";
  size_t checked = 0;
  for (const std::string& input : inputs) {
    if (cleansSpaces) {
      bool touched = false;
      for (const char* pattern : {" ?", " !", " .", " ,", " ' ", " 's", " 'm", " 're", " 've"}) {
        touched = touched || input.find(pattern) != std::string::npos;
      }
      if (touched) continue;
    }
    ASSERT_TRUE(utf8::isValid(input));
    const std::vector<int32_t> ids = tokenizer.encode(input, false, false);
    EXPECT_EQ(tokenizer.detokenize(ids, false, false), input) << "\"" << escaped(input) << "\"";
    ++checked;
  }
  EXPECT_GT(checked, inputs.size() / 2);
}

TEST_P(VocabFileTest, EveryTokenIdProducedIsInsideTheVocabulary) {
  const Tokenizer tokenizer = loadTokenizer(gguf().string());
  for (const std::string& input : readInputs(data(".inp"))) {
    for (int32_t id : tokenizer.encode(input, true, true)) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tokenizer.vocabSize());
    }
  }
}

std::string paramName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(uint8_t(c)); }, '_');
  return name;
}

TEST(VocabFiles, TheRepositoryHasTheVocabulariesTheSharedFolderLacks) {
  const std::vector<std::string> names = vocabNames();
  for (const char* expected : {"refact", "starcoder", "phi-3", "gemma3-form", "phi4-form"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
}

INSTANTIATE_TEST_SUITE_P(SharedVocab, VocabFileTest, ::testing::ValuesIn(vocabNames()), paramName);

}  // namespace
}  // namespace jitllm::tokenizer
