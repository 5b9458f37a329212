// libFuzzer target: the GGUF reader and everything that reads a parsed file's metadata.
//
// Any bytes may be refused with jitllm::Error; anything else - another exception type, a crash,
// a leak, undefined behaviour, or a broken invariant below - is a bug. A file that parses is then
// walked completely (every metadata value and array element, every typed getter on every key,
// the first and last byte of every tensor), read as a model (ModelConfig, ModelTensors) and as a
// tokenizer vocabulary, and written back through GgufWriter: what the reader accepts the writer
// must reproduce, and the reader must accept that again and read the same file.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include "base/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/runtime/model_config.h"
#include "engine/runtime/model_tensors.h"
#include "kernels/quant/tensor_type.h"
#if JITLLM_FUZZ_TOKENIZER
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/vocab_from_gguf.h"
#endif

namespace {

using jitllm::gguf::Array;
using jitllm::gguf::GgufFile;
using jitllm::gguf::TensorInfo;
using jitllm::gguf::Value;
using jitllm::gguf::ValueType;

// Stops the run with a message; libFuzzer reports the abort and saves the input.
#define FUZZ_CHECK(cond)                                                                         \
  do {                                                                                           \
    if (!(cond)) [[unlikely]] {                                                                  \
      std::fprintf(stderr, "gguf_fuzz: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

// Runs one call that may refuse the input with jitllm::Error; returns whether it succeeded.
template <typename F>
bool mayRefuse(F&& f) {
  try {
    f();
    return true;
  } catch (const jitllm::Error&) {
    return false;
  }
}

// Keeps a value alive past the optimizer, so reads of tensor bytes really happen.
template <typename T>
void consume(const T& v) {
  asm volatile("" : : "r,m"(v) : "memory");
}

void walkValue(const Value& v, int depth) {
  FUZZ_CHECK(depth <= jitllm::gguf::kMaxArrayDepth);
  consume(v.isInteger());
  consume(v.isNumber());
  consume(v.asInt());
  consume(v.asUint());
  consume(v.asFloat());
  consume(v.asBool());
  FUZZ_CHECK((v.asString() != nullptr) == (v.type() == ValueType::kString));
  const Array* a = v.asArray();
  FUZZ_CHECK((a != nullptr) == (v.type() == ValueType::kArray));
  if (!a) return;
  const size_t n = a->size();
  for (size_t i = 0; i < n; i++) {
    const Value item = a->at(i);
    FUZZ_CHECK(item.type() == a->elementType);
    walkValue(item, depth + 1);
  }
}

// Every typed getter on every key. A getter refuses a value of the wrong type, never one that
// fits; when it answers, it answers what the value holds.
void walkMetadata(const GgufFile& f) {
  for (const auto& entry : f.metadata()) {
    const std::string& key = entry.first;  // not a structured binding: clang 14 cannot capture those
    const Value& value = entry.second;
    FUZZ_CHECK(!key.empty());
    FUZZ_CHECK(f.find(key) == &value);
    walkValue(value, 0);
    const ValueType type = value.type();
    const Array* array = value.asArray();
    const bool isArray = array != nullptr;

    std::optional<std::string> s;
    FUZZ_CHECK(mayRefuse([&] { s = f.getString(key); }) == (type == ValueType::kString));
    if (s) FUZZ_CHECK(*s == *value.asString());

    std::optional<int64_t> i;
    const bool intOk = mayRefuse([&] { i = f.getInt(key); });
    FUZZ_CHECK(intOk == (value.isInteger() && value.asInt().has_value()));
    if (i) FUZZ_CHECK(*i == *value.asInt());

    std::optional<uint32_t> u;
    if (mayRefuse([&] { u = f.getU32(key); })) FUZZ_CHECK(u && uint64_t(*u) == *value.asUint());

    std::optional<double> d;
    FUZZ_CHECK(mayRefuse([&] { d = f.getFloat(key); }) == value.isNumber());

    std::optional<bool> b;
    FUZZ_CHECK(mayRefuse([&] { b = f.getBool(key); }) == (type == ValueType::kBool));

    std::optional<std::vector<std::string>> strings;
    FUZZ_CHECK(mayRefuse([&] { strings = f.getStringArray(key); }) ==
               (isArray && array->elementType == ValueType::kString));
    if (strings) FUZZ_CHECK(strings->size() == array->size());

    std::optional<std::vector<float>> floats;
    if (mayRefuse([&] { floats = f.getF32Array(key); })) {
      FUZZ_CHECK(floats && isArray && floats->size() == array->size());
    }
    std::optional<std::vector<int32_t>> ints;
    if (mayRefuse([&] { ints = f.getI32Array(key); })) {
      FUZZ_CHECK(ints && isArray && ints->size() == array->size());
    }
  }
  consume(f.find("general.architecture"));
}

// Every tensor lies inside the file where the reader says, with the size its type and shape give.
void walkTensors(const GgufFile& f) {
  const uint32_t alignment = f.alignment();
  FUZZ_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0);
  FUZZ_CHECK(f.tensors().empty() || f.dataOffset() <= f.fileSize());
  for (const TensorInfo& t : f.tensors()) {
    FUZZ_CHECK(f.findTensor(t.name) == &t);
    FUZZ_CHECK(!t.dims.empty() && t.dims.size() <= size_t(jitllm::gguf::kMaxDims));
    for (int64_t d : t.dims) FUZZ_CHECK(d > 0);
    FUZZ_CHECK(t.elements() > 0);
    FUZZ_CHECK(t.rows() * t.dims[0] == t.elements());
    consume(t.shapeString());
    const std::optional<size_t> rowBytes = jitllm::quant::rowBytes(t.type, t.dims[0]);
    FUZZ_CHECK(rowBytes && *rowBytes * size_t(t.rows()) == t.nbytes);
    FUZZ_CHECK(t.offset % alignment == 0);
    FUZZ_CHECK(t.offset <= f.fileSize() - f.dataOffset());
    FUZZ_CHECK(t.nbytes > 0 && t.nbytes <= f.fileSize() - f.dataOffset() - t.offset);
    FUZZ_CHECK(t.data != nullptr);
    // AddressSanitizer checks these against the reader's copy of the bytes.
    consume(t.data[0]);
    consume(t.data[t.nbytes - 1]);
  }
}

void readAsModel(const GgufFile& f) {
  mayRefuse([&] {
    jitllm::runtime::ModelConfig config = jitllm::runtime::ModelConfig::fromGguf(f);
    FUZZ_CHECK(config.embedding > 0 && config.heads > 0 && config.kvHeads > 0 && config.layers > 0);
    // Heads are embedding / heads wide, or attention.key_length's even width (qwen3, gemma3).
    FUZZ_CHECK(config.headDim > 0 && (config.headDim * config.heads == config.embedding || config.headDim % 2 == 0));
    FUZZ_CHECK(config.rotaryDims > 0 && config.rotaryDims <= config.headDim);
    // A sliding window names every layer as sliding or not.
    FUZZ_CHECK(config.slidingWindow == 0 || int64_t(config.slidingLayers.size()) == config.layers);
    const jitllm::runtime::ModelTensors m = jitllm::runtime::ModelTensors::find(f, config);
    FUZZ_CHECK(m.tokenEmbedding && m.outputNorm && m.output);
    FUZZ_CHECK(int64_t(m.blocks.size()) == config.layers);
    for (const auto& block : m.blocks) consume(block.bytes());
  });
}

void readAsVocabulary(const GgufFile& f) {
#if JITLLM_FUZZ_TOKENIZER
  mayRefuse([&] {
    jitllm::tokenizer::Tokenizer tokenizer(jitllm::tokenizer::vocabFromGguf(f));
    const int32_t n = tokenizer.vocabSize();
    FUZZ_CHECK(n > 0);
    // Text made of the vocabulary's own first tokens reaches the merge and lookup paths.
    std::string text = " Hello, world! 123";
    for (int32_t id = 0; id < n && id < 8; id++) text += tokenizer.tokenText(id);
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = tokenizer.encode(text, special, special);
      for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < n);
      consume(tokenizer.detokenize(ids, special, special));
    }
  });
#else
  (void)f;
#endif
}

std::vector<uint8_t> rewrite(const GgufFile& f) {
  jitllm::gguf::GgufWriter w(f.version(), f.alignment());
  for (const auto& [key, value] : f.metadata()) w.set(key, value);
  for (const TensorInfo& t : f.tensors()) {
    w.addTensor(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.nbytes));
  }
  return w.serialize();
}

// The writer reproduces any file the reader accepts, and rewriting that copy changes nothing.
// Skipped when the alignment is larger than the file: the writer pads its header to the
// alignment, and an empty file declaring 2^31 needs no 2 GiB copy to prove anything.
void roundTrip(const GgufFile& f) {
  if (f.alignment() > f.fileSize()) return;
  std::vector<uint8_t> once;
  FUZZ_CHECK(mayRefuse([&] { once = rewrite(f); }));
  std::unique_ptr<GgufFile> again;
  if (!mayRefuse([&] { again = GgufFile::fromBytes(once, "rewritten.gguf"); })) {
    std::fprintf(stderr, "gguf_fuzz: the reader refuses what the writer made of a file it accepted\n");
    std::abort();
  }
  FUZZ_CHECK(again->version() == f.version() && again->alignment() == f.alignment());
  FUZZ_CHECK(again->metadata().size() == f.metadata().size());
  FUZZ_CHECK(again->tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); i++) {
    const TensorInfo& a = f.tensors()[i];
    const TensorInfo& b = again->tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.type == b.type && a.dims == b.dims && a.nbytes == b.nbytes);
    FUZZ_CHECK(std::equal(a.data, a.data + a.nbytes, b.data));
  }
  FUZZ_CHECK(rewrite(*again) == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    std::unique_ptr<GgufFile> file;
    if (!mayRefuse([&] { file = GgufFile::fromBytes(std::span(data, size), "fuzz.gguf"); })) return 0;
    FUZZ_CHECK(file->version() == 2 || file->version() == 3);
    FUZZ_CHECK(file->fileSize() == size);
    walkMetadata(*file);
    walkTensors(*file);
    readAsModel(*file);
    readAsVocabulary(*file);
    roundTrip(*file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_fuzz: %s escaped (only jitllm::Error may): %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}
