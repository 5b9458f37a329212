// The step shapes serving meets, for the GPU backends' "after prepareKernels no step makes a
// kernel" tests: a random tiny Q4_K_M model (integer products at every width), and batches of
// sessions - one long prefill among short ones, then decode steps with greedy and sampled
// candidates - run through Model::forward.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/model.h"
#include "tools/random_model.h"

namespace jitllm::testing {

// Writes the tiny shape's Q4_K_M model (seed 3) to a temporary file named after `tag` and returns
// its path; "" when the shape's vocab file is missing (the caller skips, saying so).
inline std::string writeTinyQ4KM(const std::string& tag) {
  const auto shape = tools::findShape("tiny");
  if (!std::filesystem::exists(std::string(JITLLM_SHARED_DIR) + "/" + shape->vocabFile)) return {};
  const std::string path =
      (std::filesystem::temp_directory_path() / ("jitllm-" + tag + "-" + std::to_string(getpid()) + ".gguf")).string();
  tools::writeRandomModel({*shape, *tools::findMix("q4_k_m"), 3, JITLLM_SHARED_DIR}, path);
  return path;
}

// For each n of `batches`: n sessions prefilled in one step (the first with `longPrompt` tokens,
// the others 3-9; all but their last tokens on the prompt path), then `decodeSteps` decode steps of all n, greedy and
// top-40 sampled in turn.
inline void runServingShapes(runtime::Model& model, std::initializer_list<int> batches, size_t longPrompt,
                             int decodeSteps, int64_t contextLimit) {
  std::mt19937 rng(11);
  const int32_t vocab = int32_t(model.config().vocabSize);
  auto tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& id : t) id = int32_t(rng() % uint32_t(vocab));
    return t;
  };
  int most = 0;
  for (int n : batches) most = std::max(most, n);
  std::vector<CandidateRequest> greedy(size_t(most), CandidateRequest{1, 1.0f, {}});
  std::vector<CandidateRequest> sampled(size_t(most), CandidateRequest{40, 1.1f, {}});
  std::vector<int32_t> ids;
  std::vector<float> values;
  for (int n : batches) {
    std::vector<std::unique_ptr<runtime::Session>> sessions;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; i++) {
      sessions.push_back(model.createSession(contextLimit));
      prompts.push_back(tokens(i == 0 ? longPrompt : size_t(3 + i % 7)));
    }
    std::vector<runtime::SequenceInput> in;
    // As the step loop feeds them: all but each prompt's last token on the prompt path.
    for (int i = 0; i < n; i++)
      in.push_back({sessions[size_t(i)].get(), prompts[size_t(i)], false, int64_t(prompts[size_t(i)].size()) - 1});
    model.forward(in, std::span(greedy).first(size_t(n)), 1, ids, values);
    for (int step = 0; step < decodeSteps; step++) {
      std::vector<std::vector<int32_t>> next(static_cast<size_t>(n));
      in.clear();
      for (int i = 0; i < n; i++) {
        next[size_t(i)] = {ids[size_t(i) * size_t(step == 0 ? 1 : 40)] % vocab};
        in.push_back({sessions[size_t(i)].get(), next[size_t(i)], false});
      }
      model.forward(in, std::span(step % 2 ? sampled : greedy).first(size_t(n)), 40, ids, values);
    }
  }
}

}  // namespace jitllm::testing
