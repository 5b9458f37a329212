#include "kernels/cuda/cuda_settings.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "base/error.h"
#include "kernels/cuda/kernel_library.h"

namespace jitllm::cuda {
namespace {

// The items of a comma-separated list, in order (an item between two commas is empty; nothing
// follows a trailing comma).
std::vector<std::string> commaSeparated(const std::string& list) {
  std::vector<std::string> items;
  for (size_t at = 0; at < list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    items.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return items;
}

// A switch: the option when set, else off where the variable is "0", else on.
bool onUnlessZero(std::optional<bool> option, const char* envName) {
  if (option) return *option;
  const char* env = std::getenv(envName);
  return !(env && std::strcmp(env, "0") == 0);
}

// A diagnostic: the option when set, else on where the variable is set to anything but "0" or "".
bool offUnlessSet(std::optional<bool> option, const char* envName) {
  if (option) return *option;
  const char* env = std::getenv(envName);
  return env && *env && *env != '0';
}

// A whole-number setting: `option` when set, else the environment variable when set (written as
// the number alone: no sign but '-', no spaces, no leading zeros), else `fallback`. A value that
// `valid` refuses fails by name - "LABEL (ENV): VALUE is not EXPECTED".
int wholeNumber(std::optional<int> option, const char* envName, const char* label, int fallback,
                bool (*valid)(long long), const std::string& expected) {
  if (option) {
    JITLLM_REQUIRE(valid(*option), label, " (", envName, "): ", *option, " is not ", expected);
    return *option;
  }
  const char* env = std::getenv(envName);
  if (env == nullptr) return fallback;
  const std::string_view text(env);
  long long value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);  // value stays 0 when it fails
  JITLLM_REQUIRE(text == std::to_string(value) && valid(value), label, " (", envName, "): '", text, "' is not ",
                 expected);
  return int(value);
}

// A tuning number read leniently, as experiments write it (atoi): unset -> `fallback`.
std::optional<int> experiment(std::optional<int> option, const char* envName) {
  if (option) return option;
  if (const char* env = std::getenv(envName)) return std::atoi(env);
  return std::nullopt;
}

}  // namespace

ResolvedCudaSettings resolveSettings(const CudaSettings& s) {
  ResolvedCudaSettings r;
  r.graphs = onUnlessZero(s.graphs, "JITLLM_CUDA_GRAPHS");
  r.integerMatmul = onUnlessZero(s.integerMatmul, "JITLLM_CUDA_INTDOT");
  r.tensorCores = onUnlessZero(s.tensorCores, "JITLLM_CUDA_MMA");
  r.promptGemm = onUnlessZero(s.promptGemm, "JITLLM_CUDA_PROMPT_GEMM");
  if (const auto rows = experiment(s.promptBlockRows, "JITLLM_CUDA_PROMPT_ROWS")) {
    JITLLM_REQUIRE(*rows == 32 || *rows == 64 || *rows == 128,
                   "prompt product rows per block (JITLLM_CUDA_PROMPT_ROWS) must be 32, 64 or 128, not ", *rows);
    r.promptBlockRows = rows;
  }
  if (const auto slice = experiment(s.promptSliceK, "JITLLM_CUDA_PROMPT_SLICE")) {
    JITLLM_REQUIRE(*slice == 32 || *slice == 64,
                   "prompt product K per stage (JITLLM_CUDA_PROMPT_SLICE) must be 32 or 64, not ", *slice);
    r.promptSliceK = *slice;
  }
  if (const auto tokens = experiment(s.tensorCoreTokens, "JITLLM_CUDA_MMA_TOKENS")) {
    JITLLM_REQUIRE(*tokens == 32 || *tokens == 64,
                   "tensor-core tokens per block (JITLLM_CUDA_MMA_TOKENS) must be 32 or 64, not ", *tokens);
    r.tensorCoreTokens = tokens;
  }
  if (const auto warps = experiment(s.tensorCoreRowWarps, "JITLLM_CUDA_MMA_ROW_WARPS")) {
    JITLLM_REQUIRE(*warps == 1 || *warps == 2 || *warps == 4,
                   "tensor-core row warps per block (JITLLM_CUDA_MMA_ROW_WARPS) must be 1, 2 or 4, not ", *warps);
    JITLLM_REQUIRE(*warps != 1 || r.tensorCoreTokens.value_or(32) == 32,
                   "tensor-core blocks of one row warp (JITLLM_CUDA_MMA_ROW_WARPS=1) take 32 tokens: set "
                   "JITLLM_CUDA_MMA_TOKENS=32 with it");
    r.tensorCoreRowWarps = warps;
  }
  r.programmaticLaunch = onUnlessZero(s.programmaticLaunch, "JITLLM_CUDA_PDL");
  r.fuse = onUnlessZero(s.fuse, "JITLLM_CUDA_FUSE");
  r.blockKernels = onUnlessZero(s.blockKernels, "JITLLM_CUDA_GATHER");
  // JITLLM_CUDA_EARLY_SUBMIT=N: the first part's launches, 0 turning it off.
  const char* early = std::getenv("JITLLM_CUDA_EARLY_SUBMIT");
  const size_t partCommands = s.earlySubmitCommands ? size_t(std::max(0, *s.earlySubmitCommands))
                              : early               ? size_t(std::max(0ll, std::atoll(early)))
                                                    : size_t(32);
  r.earlySubmitCommands = s.earlySubmit.value_or(partCommands > 0) ? std::max<size_t>(partCommands, 1) : 0;
  if (const auto growth = experiment(s.earlySubmitGrowth, "JITLLM_CUDA_EARLY_GROWTH")) {
    r.earlySubmitGrowth = size_t(std::max(1, *growth));
  }
  r.attentionSpan = wholeNumber(
      s.attentionSpan, "JITLLM_CUDA_ATTENTION_SPAN", "attention span", kDefaultAttentionSpan,
      [](long long v) { return v == 0 || v == 2 || v == 4 || v == 8; }, "0, 2, 4 or 8");
  r.attentionRowTokens = wholeNumber(
      s.attentionRowTokens, "JITLLM_CUDA_ATTENTION_ROWS", "attention tokens a block", -1,
      [](long long v) { return v >= 0 && v <= kMaxAttentionRowTokens; },
      "0 to " + std::to_string(kMaxAttentionRowTokens));
  if (const auto blocks = experiment(s.attentionSpanBlocks, "JITLLM_CUDA_SPAN_BLOCKS")) {
    r.attentionSpanBlocks = std::max(0, *blocks);
  }
  if (const auto split = experiment(s.attentionSplit, "JITLLM_CUDA_ATTENTION_SPLIT")) {
    r.attentionSplit = std::max(0, *split);
  }
  r.attentionPerHead = onUnlessZero(s.attentionPerHead, "JITLLM_CUDA_ATTENTION_HEADS");
  r.defines = s.defines;
  if (const char* d = std::getenv("JITLLM_CUDA_DEFINES")) {
    for (const std::string& item : commaSeparated(d)) {
      const size_t eq = item.find('=');
      char* rest = nullptr;
      const long long value = eq == std::string::npos ? 0 : std::strtoll(item.c_str() + eq + 1, &rest, 10);
      JITLLM_REQUIRE(eq != std::string::npos && eq > 0 && rest != item.c_str() + eq + 1 && *rest == '\0',
                     "JITLLM_CUDA_DEFINES: '", item, "' is not NAME=VALUE");
      r.defines.emplace_back(item.substr(0, eq), int64_t(value));
    }
  }
  r.profile = offUnlessSet(s.profile, "JITLLM_CUDA_PROFILE");
  r.timeGraphs = offUnlessSet(s.timeGraphs, "JITLLM_CUDA_GRAPH_TIMES");
  r.intDecodeRows = experiment(s.intDecodeRows, "JITLLM_CUDA_INT_DECODE_ROWS").value_or(0);
  r.intPrefillRows = experiment(s.intPrefillRows, "JITLLM_CUDA_INT_PREFILL_ROWS").value_or(0);
  r.skipOps = s.skipOps;
  if (const char* skip = std::getenv("JITLLM_CUDA_SKIP")) {
    for (std::string& prefix : commaSeparated(skip)) {
      if (!prefix.empty()) r.skipOps.push_back(std::move(prefix));
    }
  }
  return r;
}

}  // namespace jitllm::cuda
