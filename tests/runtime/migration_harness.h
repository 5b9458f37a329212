// Drives a model the way the daemon's step loop does - several sessions decoding greedily, one
// token each per step - and performs live migrations at chosen steps, preparing between steps
// and committing at a token boundary. The CPU migration tests and the GPU suites share it, so
// every backend is held to the same scenario.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/live_migration.h"
#include "engine/runtime/model.h"
#include "engine/runtime/tensor_parallel_switch.h"
#include "tests/runtime/test_support.h"
#include "tools/random_model.h"

namespace jitllm::testing {

struct MigrationPoint {
  int step = 0;       // the migration starts before this step
  std::string range;  // parseUnitRange syntax; "" = every unit
  Device* target = nullptr;
  bool precopy = true;
  // Not empty: a tensor-parallel switch of the range's blocks to these devices instead of a move.
  std::vector<Device*> split = {};
  bool partialSums = false;  // of the split (TensorParallelOptions)
};

struct MigratedRun {
  std::vector<std::vector<float>> logits;                // per step: every session's logits, in order
  std::vector<std::vector<int32_t>> tokens;              // per session: prompt then generated tokens
  std::vector<runtime::MigrationStats> stats;            // per committed migration
  std::vector<runtime::TensorParallelStats> splitStats;  // per committed tensor-parallel switch
  std::vector<int> commitSteps;                          // the step before which each committed
  // After each commit: the pages the pools hand out are exactly the pages the sessions hold.
  std::vector<bool> poolsBalanced;
};

// Greedy argmax, ties to the lowest id (as the sampler does at temperature 0).
inline int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++) {
    if (row[i] > row[best]) best = i;
  }
  return int32_t(best);
}

// Pages in use over every pool of the model.
inline size_t pagesInUse(const runtime::Model& model) {
  size_t n = 0;
  for (const runtime::KvPagePool* p : model.kvPools()) n += p->pagesInUse();
  return n;
}

// Three prompts of different lengths: with 16-token pages they hold 0, 1 and 2 sealed pages
// after the prefill, and more seal while they decode.
inline std::vector<std::vector<int32_t>> prompts(int64_t vocab) {
  std::mt19937 rng(42);
  std::vector<std::vector<int32_t>> out;
  for (size_t n : {5, 19, 37}) {
    std::vector<int32_t> p{1};
    while (p.size() < n) p.push_back(int32_t(rng() % uint32_t(vocab)));
    out.push_back(p);
  }
  return out;
}

// A random-weight model of our generator, made once per process and shape: ctest runs this
// suite's tests in parallel processes, and one writing the file while another maps it is a torn
// model.
inline std::string generatedModelPath(const std::string& shape, const std::string& mix) {
  struct RemovedAtExit {
    std::map<std::string, std::string> paths;
    ~RemovedAtExit() {
      for (const auto& [key, path] : paths) std::filesystem::remove(path);
    }
  };
  static RemovedAtExit files;
  std::string& path = files.paths[shape + "-" + mix];
  if (path.empty()) {
    const std::string p = (std::filesystem::temp_directory_path() /
                           ("jitllm-migration-" + shape + "-" + mix + "-" + std::to_string(::getpid()) + ".gguf"))
                              .string();
    tools::writeRandomModel({*tools::findShape(shape), *tools::findMix(mix), 11, JITLLM_SHARED_DIR}, p);
    path = p;
  }
  return path;
}

// The parameters of LiveMigrationOnCpu: stories260K from ../shared, or "SHAPE/MIX" generated.
inline std::string modelPath(const std::string& which) {
  if (which == "stories260K") return sharedPath("models/stories260K.gguf");
  const size_t slash = which.find('/');
  return generatedModelPath(which.substr(0, slash), which.substr(slash + 1));
}

// What a parameter of modelPath() is made of that may be missing (stories260K from ../shared, or
// the vocabulary a shape borrows, from ../shared or tests/goldens/vocab): empty when all is there.
inline std::string missingFileFor(const std::string& which) {
  const std::string needed = which == "stories260K" ? "models/stories260K.gguf"
                                                    : tools::findShape(which.substr(0, which.find('/')))->vocabFile;
  if (std::filesystem::exists(sharedPath(needed)) || std::filesystem::exists(goldenPath(needed))) return {};
  return sharedPath(needed);
}

// Step 0 prefills every prompt; each later step feeds each session its last token. A migration
// prepares one slice per step and commits once prepared, before the next step.
inline MigratedRun runWithMigrations(runtime::Model& model, const std::vector<std::vector<int32_t>>& prompts, int steps,
                                     const std::vector<MigrationPoint>& points) {
  MigratedRun run;
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  for (size_t i = 0; i < prompts.size(); i++) sessions.push_back(model.createSession(model.config().contextLength));
  run.tokens = prompts;
  const int64_t V = model.config().vocabSize;
  std::unique_ptr<runtime::LiveMigration> migration;
  std::unique_ptr<runtime::TensorParallelSwitch> split;
  bool prepared = false;
  auto commit = [&](int step) {
    if (migration) {
      migration->commit();
      run.stats.push_back(migration->stats());
    } else {
      split->commit();
      run.splitStats.push_back(split->stats());
    }
    run.commitSteps.push_back(step);
    migration.reset();
    split.reset();
    size_t held = 0;
    for (const auto& s : sessions) held += s->pageCount();
    run.poolsBalanced.push_back(held == pagesInUse(model));
  };
  size_t nextPoint = 0;
  for (int step = 0; step < steps; step++) {
    if ((migration || split) && prepared) commit(step);
    if (!migration && !split && nextPoint < points.size() && points[nextPoint].step <= step) {
      const MigrationPoint& p = points[nextPoint++];
      prepared = false;
      if (!p.split.empty()) {
        runtime::TensorParallelOptions o;
        o.units = runtime::parseUnitRange(p.range, int(model.config().layers));
        o.devices = p.split;
        o.partialSums = p.partialSums;
        o.precopy = p.precopy;
        o.stepBytes = 8 * model.kvLayout().pageBytes();  // small slices: pre-copy spans several steps
        split = std::make_unique<runtime::TensorParallelSwitch>(model, o);
      } else {
        runtime::MigrationOptions o;
        o.units = runtime::parseUnitRange(p.range, int(model.config().layers));
        o.target = p.target;
        o.precopy = p.precopy;
        o.stepBytes = 8 * model.kvLayout().pageBytes();  // small slices: pre-copy spans several steps
        migration = std::make_unique<runtime::LiveMigration>(model, o);
      }
    }
    if (migration && !prepared) prepared = migration->prepareStep();
    if (split && !prepared) prepared = split->prepareStep();

    std::vector<runtime::SequenceInput> inputs;
    for (size_t i = 0; i < sessions.size(); i++) {
      const auto& t = run.tokens[i];
      std::span<const int32_t> feed = step == 0 ? std::span<const int32_t>(t) : std::span<const int32_t>(&t.back(), 1);
      inputs.push_back({sessions[i].get(), feed, false});
    }
    std::vector<float> logits;
    model.forward(inputs, logits);
    for (size_t i = 0; i < sessions.size(); i++) run.tokens[i].push_back(argmax(logits.data() + int64_t(i) * V, V));
    run.logits.push_back(std::move(logits));
  }
  if (migration || split) commit(steps);
  return run;
}

}  // namespace jitllm::testing
