// jitllm-run: generate from a model on one or more devices, or score a token sequence.
//
// Prints the same lines as ../shared/peer's llama-greedy, so the two can be compared by script:
//   prompt_tokens: 1 403 407 ...
//   greedy_tokens: 432 383 ...      (sampled_tokens: when sampling)
//   text: , there was a little girl
//   timing: prompt 5 tok 0.0012 s (4166.7 tok/s); generate 63 tok 0.0200 s (3150.0 tok/s)
// --score --logits FILE writes the float32 logits of every prompt position (n_vocab each).
// --chat FILE renders a conversation through the model's chat template (engine/chat) first and
// prints `chat_template: FAMILY`; with --render-only it prints the prompt text and stops.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "engine/chat/chat_messages_json.h"
#include "engine/chat/model_chat_template.h"
#include "engine/devices/builtin_backends.h"
#include "engine/runtime/model.h"
#include "engine/runtime/step_loop.h"
#include "engine/tokenizer/streaming_detokenizer.h"
#include "engine/tokenizer/vocab_from_gguf.h"
#include "tools/command_line.h"

using namespace jitllm;

namespace {

constexpr const char* kUsage = R"(usage: jitllm-run MODEL.gguf (-p TEXT | -t "IDS" | --chat FILE) [options]
  -p TEXT               prompt text (tokenized with the model's special tokens, BOS as its metadata says)
  -t "1 2 3"            prompt as token ids
  --chat FILE           a conversation as JSON ({"messages": [...], "tools": [...]}, OpenAI's shape; - for
                        stdin), rendered through the model's chat template into the prompt
  --chat-template FILE  render with this Jinja template instead of the model's
  --no-generation-prompt  do not open the assistant's turn at the end of the conversation
  --render-only         with --chat: print the rendered prompt and stop (reads no weights; MODEL may be
                        left out when --chat-template is given)
  -n N                  tokens to generate (default 32); stops early at end-of-generation tokens
  --threads N           CPU threads per CPU device (default: all cores)
  --devices SPEC        devices to spread the layers over, e.g. cpu:0, cpu:0,cpu:1, vulkan:0, cpu:0,vulkan:0
                        (default cpu:0; vulkan:N counts real GPUs first, software ones last)
  --ctx N               session context limit (default: prompt + n); also the context a model
                        whose rope depends on it is loaded for (phi3's LongRoPE; default: trained)
  --kv f32|f16          KV cache precision (default f32: exact attention; f16 halves its memory)
  --temp T              sampling temperature (default 0: greedy)
  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N, --seed S
  --logits FILE         write each generated step's logits (float32, n_vocab per step)
  --score               no generation: write the logits of every prompt position to --logits FILE
)";

std::string readAll(const std::string& path) {
  std::ifstream in;
  std::istream* stream = &std::cin;
  if (path != "-") {
    in.open(path, std::ios::binary);
    if (!in) JITLLM_FAIL(kFailed, path, ": cannot open: ", std::strerror(errno));
    stream = &in;
  }
  std::stringstream ss;
  ss << stream->rdbuf();
  return ss.str();
}

// The conversation in `chatPath` rendered through the template: --chat-template's, else the model's.
std::string renderConversation(const std::string& chatPath, const std::string& templatePath, bool addGenerationPrompt,
                               const std::string& modelPath, const gguf::GgufFile* file,
                               const tokenizer::Tokenizer* tok) {
  runtime::ChatTemplate tmpl = runtime::ChatTemplate::chatMl();
  if (!templatePath.empty()) {
    auto text = [&](int32_t id) {
      return tok && id >= 0 && id < tok->vocabSize() ? std::string(tok->tokenText(id)) : std::string();
    };
    tmpl = runtime::ChatTemplate::fromModel(readAll(templatePath), tok ? text(tok->bosId()) : "",
                                            tok ? text(tok->eosId()) : "", templatePath, tok && tok->addBos());
  } else if (file && tok) {
    tmpl = runtime::chatTemplateForFile(*file, *tok, modelPath);
  }
  runtime::ChatConversation conversation = runtime::parseChatConversation(readAll(chatPath));
  runtime::ChatRenderOptions options;
  options.addGenerationPrompt = addGenerationPrompt;
  options.toolsJson = conversation.toolsJson;
  std::printf("chat_template: %s\n", tmpl.family().c_str());
  return tmpl.render(conversation.messages, options);
}

void writeFloats(std::ofstream& out, const float* data, size_t n, const std::string& path) {
  out.write(reinterpret_cast<const char*>(data), std::streamsize(n * sizeof(float)));
  if (!out) JITLLM_FAIL(kFailed, path, ": write failed");
}

int run(int argc, char** argv) {
  tools::CommandLine cl(argc, argv);
  std::string modelPath, text, ids, logitsPath, deviceSpec = "cpu:0", chatPath, chatTemplatePath;
  bool haveText = false, haveIds = false, score = false, renderOnly = false, addGenerationPrompt = true;
  KvPrecision kvPrecision = KvPrecision::kF32;
  int32_t nPredict = 32;
  int64_t ctx = 0;
  runtime::DeviceSpecOptions deviceOptions;
  runtime::SamplingParams sampling;
  while (!cl.done()) {
    const std::string a = cl.take();
    if (a == "-p")
      text = cl.value(a), haveText = true;
    else if (a == "-t")
      ids = cl.value(a), haveIds = true;
    else if (a == "--chat")
      chatPath = cl.value(a);
    else if (a == "--chat-template")
      chatTemplatePath = cl.value(a);
    else if (a == "--no-generation-prompt")
      addGenerationPrompt = false;
    else if (a == "--render-only")
      renderOnly = true;
    else if (a == "-n")
      nPredict = cl.number<int32_t>(a);
    else if (a == "--threads")
      deviceOptions.cpuThreads = cl.number<int>(a);
    else if (a == "--devices")
      deviceSpec = cl.value(a);
    else if (a == "--ctx")
      ctx = cl.number<int64_t>(a);
    else if (a == "--kv")
      kvPrecision = cl.oneOf(a, {"f32", "f16"}) == "f16" ? KvPrecision::kF16 : KvPrecision::kF32;
    else if (a == "--temp")
      sampling.temperature = cl.number<float>(a);
    else if (a == "--top-k")
      sampling.topK = cl.number<int32_t>(a);
    else if (a == "--top-p")
      sampling.topP = cl.number<float>(a);
    else if (a == "--min-p")
      sampling.minP = cl.number<float>(a);
    else if (a == "--repeat-penalty")
      sampling.repeatPenalty = cl.number<float>(a);
    else if (a == "--repeat-last-n")
      sampling.repeatLastN = cl.number<int32_t>(a);
    else if (a == "--seed")
      sampling.seed = cl.number<uint64_t>(a);
    else if (a == "--logits")
      logitsPath = cl.value(a);
    else if (a == "--score")
      score = true;
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-')
      throw tools::UsageError("unknown option " + a);
    else if (modelPath.empty())
      modelPath = a;
    else
      throw tools::UsageError("unexpected argument " + a);
  }
  const bool haveChat = !chatPath.empty();
  if (renderOnly && !haveChat) throw tools::UsageError("--render-only needs --chat FILE");
  if (renderOnly) {
    std::unique_ptr<gguf::GgufFile> file;
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (!modelPath.empty()) {
      file = gguf::GgufFile::open(modelPath);
      tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::vocabFromGguf(*file));
    } else if (chatTemplatePath.empty()) {
      throw tools::UsageError("no model given (--render-only without a model needs --chat-template FILE)");
    }
    std::string prompt =
        renderConversation(chatPath, chatTemplatePath, addGenerationPrompt, modelPath, file.get(), tok.get());
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return 0;
  }
  if (modelPath.empty()) throw tools::UsageError("no model given");
  if (int(haveText) + int(haveIds) + int(haveChat) != 1) {
    throw tools::UsageError("give exactly one of -p TEXT, -t IDS and --chat FILE");
  }
  if (nPredict < 0) throw tools::UsageError("-n must be >= 0");
  if (score && logitsPath.empty()) throw tools::UsageError("--score needs --logits FILE");
  sampling.validate();

  auto devices = runtime::createDevices(deviceSpec, deviceOptions);
  runtime::ModelLoadOptions options;
  for (auto& d : devices) options.devices.push_back(d.get());
  options.kvPrecision = kvPrecision;
  options.contextSize = ctx;
  auto model = runtime::Model::load(modelPath, options);
  const auto& config = model->config();

  if (haveChat) {
    text = renderConversation(chatPath, chatTemplatePath, addGenerationPrompt, modelPath, &model->file(),
                              &model->tokenizer());
  }
  std::vector<int32_t> prompt =
      haveText || haveChat ? model->tokenizer().encode(text, true, true) : tools::parseTokenIds(ids);
  if (prompt.empty()) JITLLM_FAIL(kFailed, "the prompt is empty");
  std::printf("prompt_tokens:");
  for (int32_t t : prompt) std::printf(" %d", t);
  std::printf("\n");

  std::ofstream logitsFile;
  if (!logitsPath.empty()) {
    logitsFile.open(logitsPath, std::ios::binary | std::ios::trunc);
    if (!logitsFile) JITLLM_FAIL(kFailed, logitsPath, ": cannot create: ", std::strerror(errno));
  }
  const int64_t limit = ctx > 0 ? ctx : int64_t(prompt.size()) + nPredict + 1;
  auto session = model->createSession(limit);

  if (score) {
    std::vector<float> logits;
    runtime::SequenceInput input{session.get(), prompt, true};
    model->forward({&input, 1}, logits);
    writeFloats(logitsFile, logits.data(), logits.size(), logitsPath);
    std::printf("scored %zu positions x %lld logits\n", prompt.size(), (long long)config.vocabSize);
    return 0;
  }

  std::vector<int32_t> out;
  std::string textOut;
  std::unique_ptr<tokenizer::StreamingDetokenizer> detok;
  if (model->hasTokenizer()) detok = std::make_unique<tokenizer::StreamingDetokenizer>(model->tokenizer());
  runtime::SequenceRequest request;
  request.prompt = prompt;
  request.maxTokens = nPredict;
  request.sampling = sampling;
  request.keepLogits = logitsFile.is_open();
  runtime::GenerationStats stats;
  if (nPredict > 0) {
    stats = runtime::generate(*model, *session, request, [&](int32_t token, std::span<const float> logits) {
      out.push_back(token);
      if (detok) textOut += detok->feed(token);
      if (logitsFile.is_open()) writeFloats(logitsFile, logits.data(), logits.size(), logitsPath);
      return true;
    });
  }
  if (detok) textOut += detok->flush();

  std::printf(sampling.temperature > 0 ? "sampled_tokens:" : "greedy_tokens:");
  for (int32_t t : out) std::printf(" %d", t);
  std::printf("\ntext: %s\n", textOut.c_str());
  const int64_t genTokens = stats.generatedTokens > 1 ? stats.generatedTokens - 1 : 0;
  std::printf("timing: prompt %lld tok %.4f s (%.1f tok/s); generate %lld tok %.4f s (%.1f tok/s)\n",
              (long long)stats.promptTokens, stats.promptSeconds, double(stats.promptTokens) / stats.promptSeconds,
              (long long)genTokens, stats.generateSeconds,
              genTokens > 0 ? double(genTokens) / stats.generateSeconds : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tools::runTool("jitllm-run", kUsage, run, argc, argv); }
